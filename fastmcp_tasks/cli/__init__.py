"""The `fastmcp-tasks` command line (also `python -m fastmcp_tasks`).

    fastmcp-tasks worker path/to/server.py[:object] [--concurrency N] [--grace S] [--no-gc-freeze]
    fastmcp-tasks call SERVER TOOL [key=value ...] [--timeout SECONDS]   (SERVER: URL or server.py)
    fastmcp-tasks get SERVER TASK_ID
    fastmcp-tasks wait SERVER TASK_ID [--timeout SECONDS]
    fastmcp-tasks cancel SERVER TASK_ID
    fastmcp-tasks ls|show TASK_ID [--url STORE_URL]
    fastmcp-tasks cancel TASK_ID... | --all-matching FILTERS [--url STORE_URL] [--dry-run] [--yes]
    fastmcp-tasks purge --older-than AGE | FILTERS | TASK_ID... [--url STORE_URL] [--dry-run]
    fastmcp-tasks pause|resume TOOL [--app APP] | paused | workers | audit [--url STORE_URL]
    fastmcp-tasks ui [--url STORE_URL] [--host 127.0.0.1] [--port 8765] [--token TOKEN]
                     [--read-only]

`worker` runs a server's task tools without serving MCP: it enters the server's
lifespan, so its `TasksExtension` takes queued tasks from the shared store
(those of `concurrency=0` front ends, and recovered ones) and runs them. The
store URL is the extension's (`url=...` or `FASTMCP_TASKS_URL`); `memory://`
is refused, since no other process could see its tasks. `--concurrency` defaults
to the extension's, or to 100 when that is 0 (the same file serves as a front end).
SIGTERM or SIGINT stops taking work, lets running tasks finish for `--grace`
seconds, then hands the rest back to the store (`cli.worker`).

The client commands (`call`, `get`, `wait`, `cancel`) live in `cli.client`: SERVER
is a Streamable HTTP URL or a `path/to/server.py[:object]` run in memory. `call`
follows the task live, asks in the terminal for its input, and on Ctrl-C offers to
cancel the task or detach from it.

The operator commands open a shared store by its URL (`--url`, default
`FASTMCP_TASKS_URL`), no server needed: `ls` and `show` (`cli.operator`) list tasks
and print one with its history; `cancel` and `purge` (`cli.actions`) act on tasks by id
or by filter (a preview, then a confirmation acting on exactly the previewed tasks);
`pause` / `resume` / `paused` (`cli.pauses`) hold a tool's new runs in every process;
`workers` and `audit` (`cli.records`) list the processes that run tasks and the operator
actions. `cancel` with an http(s) URL or a server file goes through the server instead.

`ui` (`cli.ui`) serves the live operator dashboard (`fastmcp_tasks.dashboard`) of a
shared store: loopback only unless a token is set (`--token` or
`FASTMCP_TASKS_UI_TOKEN`), `--read-only` without the cancel and purge actions.
"""

from __future__ import annotations

import argparse
import functools

import anyio

from fastmcp_tasks.cli.actions import ACTION_COMMANDS, add_action_commands, run_action_command
from fastmcp_tasks.cli.client import add_client_commands, run_client_command
from fastmcp_tasks.cli.common import load_server
from fastmcp_tasks.cli.operator import COMMANDS as OPERATOR_COMMANDS
from fastmcp_tasks.cli.operator import add_operator_commands, run_operator_command
from fastmcp_tasks.cli.ui import add_ui_command, run_ui_command
from fastmcp_tasks.cli.worker import CONCURRENCY_HELP, run_worker


def main(argv: list[str] | None = None) -> None:
    """Run the `fastmcp-tasks` command line with `argv` (default: `sys.argv[1:]`)."""
    parser = argparse.ArgumentParser(prog="fastmcp-tasks", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    add_client_commands(commands)
    add_operator_commands(commands)
    add_action_commands(commands)
    add_ui_command(commands)
    worker = commands.add_parser("worker", help="run a server's task tools for a shared store")
    worker.add_argument("server", help="path/to/server.py[:object]")
    worker.add_argument("--concurrency", type=int, default=None, help=CONCURRENCY_HELP)
    worker.add_argument(
        "--grace", type=float, default=30.0, help="seconds running tasks may finish at shutdown"
    )
    worker.add_argument(
        "--no-gc-freeze",
        dest="gc_freeze",
        action="store_false",
        help="do not freeze what startup loaded out of the garbage collector's full passes",
    )
    args = parser.parse_args(argv)
    if args.command == "worker":
        server = load_server(args.server)
        anyio.run(
            functools.partial(run_worker, gc_freeze=args.gc_freeze),
            server,
            args.concurrency,
            args.grace,
        )
    elif args.command == "ui":
        raise SystemExit(run_ui_command(args))
    elif args.command in OPERATOR_COMMANDS:
        raise SystemExit(run_operator_command(args))
    elif args.command in ACTION_COMMANDS:
        raise SystemExit(run_action_command(args))
    else:
        raise SystemExit(run_client_command(args))


if __name__ == "__main__":  # pragma: no cover
    main()
