"""Quickstart: a server with a task tool, and a client that waits for it.

    python examples/quickstart.py

Starts the server over Streamable HTTP on a free 127.0.0.1 port, calls the
`render` tool as a task, prints each status message while it runs, then the
result. The same server runs on its own with `fastmcp run examples/quickstart.py`.
"""

from __future__ import annotations

import socket
from datetime import timedelta

import anyio
import uvicorn
from fastmcp import Client, FastMCP
from fastmcp.dependencies import Progress
from fastmcp.utilities.tasks import TaskConfig

from fastmcp_tasks import TasksExtension
from fastmcp_tasks.client import TasksClientExtension

mcp = FastMCP("Reports")
mcp.add_extension(TasksExtension())  # in-memory; or url="sqlite:///tasks.db"


@mcp.tool(task=TaskConfig(mode="optional", poll_interval=timedelta(milliseconds=200)))
async def render(pages: int, progress: Progress = Progress()) -> str:
    """Render a report, one page at a time."""
    await progress.set_total(pages)
    for page in range(pages):
        await progress.set_message(f"Rendering page {page + 1} of {pages}")
        await anyio.sleep(0.3)  # the real work
        await progress.increment()
    return f"Rendered {pages} pages"


def print_status(task: dict) -> None:
    message = task.get("statusMessage", "")
    print(f"  [{task['status']}] {message}".rstrip(), flush=True)


async def main() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = uvicorn.Config(mcp.http_app(), host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    async with anyio.create_task_group() as group:
        group.start_soon(server.serve)
        while not server.started:  # noqa: ASYNC110 - uvicorn offers no started event
            await anyio.sleep(0.01)
        url = f"http://127.0.0.1:{port}/mcp"
        print(f"Server listening on {url}")
        tasks = TasksClientExtension(on_status=print_status)
        async with Client(url, extensions=[tasks]) as client:
            print("Calling render(pages=5) as a task:")
            result = await client.call_tool("render", {"pages": 5})
            print(f"Result: {result.data}")
        server.should_exit = True


if __name__ == "__main__":
    anyio.run(main)
