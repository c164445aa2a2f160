"""Approval flow: a deploy task that stops to ask for confirmation, and a client that answers.

    python examples/approval.py            # approves
    python examples/approval.py --decline  # declines

The `deploy` tool runs as a task. Halfway through it calls `ctx.elicit()`: the
task parks in `input_required` with the question in `inputRequests`, the
client's elicitation handler answers it through `tasks/update`, and the tool
resumes where it stopped (nothing runs twice).
"""

from __future__ import annotations

import socket
import sys
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import anyio
import uvicorn
from fastmcp import Client, Context, FastMCP
from fastmcp.utilities.tasks import TaskConfig

from fastmcp_tasks import TasksExtension
from fastmcp_tasks.client import TasksClientExtension

mcp = FastMCP("Deployments")
mcp.add_extension(TasksExtension())


@dataclass
class Approval:
    approve: bool
    reason: str


@mcp.tool(task=TaskConfig(poll_interval=timedelta(milliseconds=200)))
async def deploy(service: str, ctx: Context) -> str:
    """Build, then ask for approval, then roll out."""
    await ctx.report_progress(1, 3, f"Building {service}")
    await anyio.sleep(0.4)
    answer = await ctx.elicit(f"Deploy {service} to production?", Approval)
    if answer.action != "accept" or not answer.data.approve:
        return f"{service}: deployment stopped ({answer.action})"
    await ctx.report_progress(2, 3, f"Rolling out {service}")
    await anyio.sleep(0.4)
    return f"{service}: deployed ({answer.data.reason})"


async def main(approve: bool) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(mcp.http_app(), host="127.0.0.1", port=port, log_level="warning")
    )

    def show(task: dict[str, Any]) -> None:
        print(f"  [{task['status']}] {task.get('statusMessage', '')}".rstrip(), flush=True)

    async def answer(message: str, response_type: Any, params: Any, context: Any) -> Any:
        print(f"  ? {message} -> {'yes' if approve else 'no'}", flush=True)
        return {"approve": approve, "reason": "change #42"}

    async with anyio.create_task_group() as group:
        group.start_soon(server.serve)
        while not server.started:  # noqa: ASYNC110 - uvicorn offers no started event
            await anyio.sleep(0.01)
        tasks = TasksClientExtension(on_status=show, elicitation_handler=answer)
        url = f"http://127.0.0.1:{port}/mcp"
        # elicitation_handler on the Client declares the elicitation capability
        async with Client(url, elicitation_handler=answer, extensions=[tasks]) as client:
            print("Calling deploy(service='billing') as a task:")
            result = await client.call_tool("deploy", {"service": "billing"})
            print(f"Result: {result.data}")
        server.should_exit = True


if __name__ == "__main__":
    anyio.run(main, "--decline" not in sys.argv)
