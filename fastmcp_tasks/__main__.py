"""`python -m fastmcp_tasks ...` runs the `fastmcp-tasks` command line."""

from fastmcp_tasks.cli import main

main()
