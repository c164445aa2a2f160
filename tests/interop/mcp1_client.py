"""The `mcp` 1.x Python SDK's experimental tasks client (SEP-1686, 2025-11-25).

Runs in .interop/mcp1 (`mcp` 1.x from PyPI, the last line with tasks): a
`ClientSession` over `streamable_http_client`, and `session.experimental`'s
`call_tool_as_task`, `get_task`, `poll_task`, `get_task_result`, `list_tasks` and
`cancel_task`. Input follows the SDK's documented pattern: poll until
`input_required`, then `tasks/result`, on whose stream the server's
`elicitation/create` reaches the session's `elicitation_callback`. See
tests/interop/common.py for the command line and the output.

Progress: `call_tool_as_task` takes no `progress_callback`, so `progress` sends the
same task-augmented `tools/call` through `session.send_request(...,
progress_callback=...)` (the SDK makes the request id its `progressToken`) and waits
in `tasks/result` at once. The SDK forgets that callback once the `CreateTaskResult`
has answered (`mcp/shared/session.py`, `send_request`'s `finally`); the session's
`message_handler` gets every notification, `notifications/progress` included.
"""

from __future__ import annotations

import sys
import warnings
from importlib.metadata import version
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script, in the client's own venv
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import anyio
import mcp.types as types
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import McpError

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

warnings.simplefilter("ignore", DeprecationWarning)  # the experimental tasks API says so
RELATED = "io.modelcontextprotocol/related-task"


def shown(model: Any) -> dict[str, Any]:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


async def elicitation_callback(context: Any, params: types.ElicitRequestParams) -> Any:
    meta = params.meta.model_dump(by_alias=True) if params.meta is not None else {}
    emit("elicited", message=params.message, related=meta.get(RELATED))
    await pause("elicitation")
    return types.ElicitResult(action="accept", content=dict(ANSWER))


async def follow(session: ClientSession, task_id: str) -> list[str]:
    """`poll_task` to the end; on `input_required`, `tasks/result` carries the input."""
    seen: list[str] = []
    async for status in session.experimental.poll_task(task_id):
        seen.append(status.status)
        if status.status == "input_required":
            result = await session.experimental.get_task_result(task_id, types.CallToolResult)
            emit("result", result=shown(result))
    return seen


def related_of(params: Any) -> Any:
    meta = params.meta.model_dump(by_alias=True) if params.meta is not None else {}
    return meta.get(RELATED)


async def steps(session: ClientSession, tool: str, key: str) -> str:
    """`progress`: create the task with a `progress_callback`, then wait in `tasks/result`."""

    async def progress_callback(progress: float, total: float | None, message: str | None) -> None:
        progressed("progress_callback", progress, total, message)

    call = types.CallToolRequest(
        params=types.CallToolRequestParams(
            name=tool, arguments={"key": key}, task=types.TaskMetadata(ttl=60_000)
        )
    )
    created = await session.send_request(
        types.ClientRequest(call), types.CreateTaskResult, progress_callback=progress_callback
    )
    task_id = created.task.taskId
    emit("created", task_id=task_id, task=shown(created.task))
    result = await session.experimental.get_task_result(task_id, types.CallToolResult)
    emit("result", result=shown(result))
    emit("status", task=shown(await session.experimental.get_task(task_id)))
    return task_id


async def scenario(url: str, name: str, key: str, peer: str | None) -> None:
    notified = Notified()

    async def message_handler(message: Any) -> None:
        """Hears `notifications/tasks/status` and `notifications/progress`; what the
        session could not read is reported."""
        if isinstance(message, Exception):
            emit("client-error", **failure(message))
        elif isinstance(message, types.ServerNotification):
            params = message.root.params
            if isinstance(message.root, types.TaskStatusNotification):
                notified.record(params.taskId, params.status, params.statusMessage)
            elif isinstance(message.root, types.ProgressNotification):
                progressed(
                    "message_handler",
                    params.progress,
                    params.total,
                    params.message,
                    token=params.progressToken,
                    related=related_of(params),
                )

    async with (
        streamable_http_client(url) as (read, write, _),
        ClientSession(
            read, write, elicitation_callback=elicitation_callback, message_handler=message_handler
        ) as session,
    ):
        init = await session.initialize()
        tasks = init.capabilities.tasks
        emit(
            "initialized",
            client=f"mcp {version('mcp')}",
            protocol=init.protocolVersion,
            tasks=shown(tasks) if tasks is not None else None,
        )
        experimental = session.experimental
        if peer is not None:
            emit("peer", task=shown(await experimental.get_task(peer)))
        if name == "resume":  # another client's task: its input comes on this tasks/result
            result = await experimental.get_task_result(peer or "", types.CallToolResult)
            emit("result", result=shown(result))
            emit("status", task=shown(await experimental.get_task(peer or "")))
            return
        if name in PROGRESS:
            await notified.report(await steps(session, PROGRESS[name], key))
            return
        tool, arguments_ = {
            "complete": ("double", {"x": 21}),
            "error": ("refuse", {"reason": "no"}),
            "cancel": ("hold", {"key": key}),
            "elicit": ("order", {"item": "tea"}),
        }[name]
        created = await experimental.call_tool_as_task(tool, arguments_, ttl=60_000)
        task_id = created.task.taskId
        emit("created", task_id=task_id, task=shown(created.task))
        if name == "cancel":
            await pause("created")
            emit("status", task=shown(await experimental.get_task(task_id)))
            emit("cancelled", task=shown(await experimental.cancel_task(task_id)))
            emit("status", task=shown(await experimental.get_task(task_id)))
            try:
                await experimental.cancel_task(task_id)
                emit("cancelled-again")
            except McpError as exc:
                emit("refused", **failure(exc))
        else:
            emit("polled", statuses=await follow(session, task_id))
            try:
                result = await experimental.get_task_result(task_id, types.CallToolResult)
                emit("result", result=shown(result))
            except McpError as exc:
                emit("raised", **failure(exc))
            emit("status", task=shown(await experimental.get_task(task_id)))
        if name == "complete":
            listed = await experimental.list_tasks()
            emit("listed", task_ids=[t.taskId for t in listed.tasks])
        await notified.report(task_id)


def main() -> None:
    args = arguments()
    main_guard(lambda: anyio.run(scenario, args.url, args.scenario, args.key, args.peer))


if __name__ == "__main__":
    main()
