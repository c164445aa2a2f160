"""FastMCP 3's own client, driven through its documented task API (SEP-1686, 2025-11-25).

Runs in .interop/fastmcp3 (plain `fastmcp` 3.x from PyPI): `client.call_tool(name,
args, task=True)` returns its `ToolTask`, whose `status()`, `wait()`, `result()` and
`cancel()` send `tasks/get`, `tasks/result` and `tasks/cancel`; its
`elicitation_handler` answers the server's `elicitation/create`. See common.py for
the command line and the output.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script, in the client's own venv
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import fastmcp
from fastmcp import Client
from fastmcp.exceptions import ToolError

from tests.interop.common import ANSWER, Notified, arguments, emit, failure, main_guard, pause

RELATED = "io.modelcontextprotocol/related-task"
TOOLS = {  # scenario -> (tool, arguments) for a `hold` key
    "complete": lambda key: ("double", {"x": 21}),
    "error": lambda key: ("refuse", {"reason": "no"}),
    "cancel": lambda key: ("hold", {"key": key}),
    "elicit": lambda key: ("order", {"item": "tea"}),
}


def shown(status: Any) -> dict[str, Any]:
    return status.model_dump(mode="json", by_alias=True, exclude_none=True)


async def elicitation_handler(message: str, response_type: Any, params: Any, context: Any) -> Any:
    meta = params.meta.model_dump(by_alias=True) if params.meta is not None else {}
    emit("elicited", message=message, related=meta.get(RELATED))
    await pause("elicitation")
    return dict(ANSWER)


async def scenario(url: str, name: str, key: str, peer: str | None) -> None:
    notified = Notified()
    async with Client(url, elicitation_handler=elicitation_handler, timeout=20) as client:
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
        tool, tool_arguments = TOOLS[name](key)
        task = await client.call_tool(tool, tool_arguments, task=True)
        emit("created", task_id=task.task_id, immediate=task.returned_immediately)
        task.on_status_change(lambda status: notified.record(status.taskId, status.status))
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
