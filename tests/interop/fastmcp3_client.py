"""FastMCP 3's own client, driven through its documented task API (SEP-1686, 2025-11-25).

Runs in .interop/fastmcp3 (plain `fastmcp` 3.x from PyPI): `client.call_tool(name,
args, task=True)` returns its `ToolTask`, whose `status()`, `wait()`, `result()` and
`cancel()` send `tasks/get`, `tasks/result` and `tasks/cancel`; its
`elicitation_handler` answers the server's `elicitation/create`. See common.py for
the command line and the output.

Progress: `call_tool(..., task=True)` takes a `progress_handler` but neither sends a
`progressToken` nor registers the handler (`fastmcp/client/mixins/tools.py`: the task
branch calls `_call_tool_as_task` without it, whose `send_request` has no
`progress_callback`). So `progress` also puts a `progressToken` in the call's `meta`
itself, as an application can, and adds a `MessageHandler` whose `on_progress` hears
what then comes (a handler of one's own replaces FastMCP 3's task-status router, so
`ToolTask` polls `tasks/get`; its `on_notification` records the status pushes).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script, in the client's own venv
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import fastmcp
import mcp.types
from fastmcp import Client
from fastmcp.client.messages import MessageHandler
from fastmcp.exceptions import ToolError

from tests.interop.common import (
    ANSWER,
    PROGRESS,
    Notified,
    arguments,
    emit,
    failure,
    main_guard,
    pause,
    progressed,
)

RELATED = "io.modelcontextprotocol/related-task"
TOOLS = {  # scenario -> (tool, arguments) for a `hold` key
    "complete": lambda key: ("double", {"x": 21}),
    "error": lambda key: ("refuse", {"reason": "no"}),
    "cancel": lambda key: ("hold", {"key": key}),
    "elicit": lambda key: ("order", {"item": "tea"}),
    **{name: lambda key, tool=tool: (tool, {"key": key}) for name, tool in PROGRESS.items()},
}
PROGRESS_TOKEN = "fastmcp3-steps"  # `progress`: put in the call's meta by the application


def shown(status: Any) -> dict[str, Any]:
    return status.model_dump(mode="json", by_alias=True, exclude_none=True)


async def elicitation_handler(message: str, response_type: Any, params: Any, context: Any) -> Any:
    meta = params.meta.model_dump(by_alias=True) if params.meta is not None else {}
    emit("elicited", message=message, related=meta.get(RELATED))
    await pause("elicitation")
    return dict(ANSWER)


def related_of(params: Any) -> Any:
    meta = params.meta.model_dump(by_alias=True) if params.meta is not None else {}
    return meta.get(RELATED)


def progress_handler(via: str) -> Any:
    async def handler(progress: float, total: float | None, message: str | None) -> None:
        progressed(via, progress, total, message)

    return handler


class Heard(MessageHandler):
    """An application's message handler: `on_progress`, and the status pushes."""

    def __init__(self, notified: Notified) -> None:
        super().__init__()
        self.notified = notified

    async def on_progress(self, message: mcp.types.ProgressNotification) -> None:
        params = message.params
        progressed(
            "on_progress",
            params.progress,
            params.total,
            params.message,
            token=params.progressToken,
            related=related_of(params),
        )

    async def on_notification(self, message: mcp.types.ServerNotification) -> None:
        if isinstance(message.root, mcp.types.TaskStatusNotification):
            params = message.root.params
            self.notified.record(params.taskId, params.status, params.statusMessage)


async def steps(client: Client, tool: str, key: str, notified: Notified) -> None:
    """`progress`: `progress_handler` on the call (and the client), a token in `meta`."""
    task = await client.call_tool(
        tool,
        {"key": key},
        task=True,
        progress_handler=progress_handler("progress_handler"),
        meta={"progressToken": PROGRESS_TOKEN},
    )
    emit("created", task_id=task.task_id, immediate=task.returned_immediately)
    result = await task.result()
    emit("result", data=result.data, is_error=result.is_error)
    emit("status", task=shown(await client.get_task_status(task.task_id)))
    await notified.report(task.task_id)


async def scenario(url: str, name: str, key: str, peer: str | None) -> None:
    notified = Notified()
    options: dict[str, Any] = {}
    if name in PROGRESS:
        options["message_handler"] = Heard(notified)
        options["progress_handler"] = progress_handler("client progress_handler")
    async with Client(
        url, elicitation_handler=elicitation_handler, timeout=20, **options
    ) as client:
        init = client.initialize_result
        emit(
            "initialized",
            client=f"fastmcp {fastmcp.__version__}",
            protocol=init.protocolVersion,
            tasks=init.capabilities.tasks.model_dump(by_alias=True, exclude_none=True)
            if init.capabilities.tasks is not None
            else None,
        )
        if peer is not None:  # a task another client created, through this client's tasks/get
            emit("peer", task=shown(await client.get_task_status(peer)))
        if name in PROGRESS:
            await steps(client, PROGRESS[name], key, notified)
            return
        tool, tool_arguments = TOOLS[name](key)
        task = await client.call_tool(tool, tool_arguments, task=True)
        emit("created", task_id=task.task_id, immediate=task.returned_immediately)
        task.on_status_change(
            lambda status: notified.record(status.taskId, status.status, status.statusMessage)
        )
        if name == "cancel":
            await pause("created")
            emit("status", task=shown(await task.status()))
            await task.cancel()
            emit("cancelled")
            emit("status", task=shown(await task.status()))
            try:
                await client.cancel_task(task.task_id)
                emit("cancelled-again")
            except Exception as exc:  # a terminal task refuses
                emit("refused", **failure(exc))
        else:
            try:
                result = await task.result()
                emit("result", data=result.data, is_error=result.is_error)
            except ToolError as exc:  # an error result raises
                emit("raised", **failure(exc))
            emit("status", task=shown(await client.get_task_status(task.task_id)))
        if name == "complete":
            listed = await client.list_tasks()
            emit("listed", task_ids=[t["taskId"] for t in listed["tasks"]])
        # The callback is registered once `call_tool` returns: a quick task's terminal
        # notification may come before that (FastMCP 3 then drops it), so wait only where
        # the task outlives the registration.
        await notified.report(task.task_id, wait=name in ("cancel", "elicit"))


def main() -> None:
    args = arguments()
    if args.scenario not in TOOLS:
        raise SystemExit(f"fastmcp3_client.py has no {args.scenario!r} scenario")
    main_guard(lambda: asyncio.run(scenario(args.url, args.scenario, args.key, args.peer)))


if __name__ == "__main__":
    main()
