"""The client half: let `fastmcp.Client.call_tool()` resolve a task to its final result.

    from fastmcp import Client
    from fastmcp_tasks.client import TasksClientExtension

    async with Client(url, extensions=[TasksClientExtension(on_status=print)]) as client:
        result = await client.call_tool("render", {"pages": 3})   # waits for the task

`TasksClientExtension` declares the tasks extension on every request (C58) and
claims `resultType: "task"` on `tools/call` (C59). Its resolver polls
`tasks/get` no faster than the latest `pollIntervalMs` (C62; the server may
change it), reports each new state to `on_status`, returns the inline
`CallToolResult` when `completed` (C71), raises `MCPError` with the task's
JSON-RPC error when `failed`, and sends `tasks/cancel` once if the caller is
cancelled or times out while waiting (C69). `tasks/*` requests carry
`Mcp-Name: <taskId>` through the request types' `name_param` (C73).

When a task waits in `input_required`, each outstanding request is handed
once to `on_input(key, request)` (keys are de-duplicated across polls, C67)
and all answers of one poll go back in a single `tasks/update` (C65).
Elicitations can instead go to a FastMCP `elicitation_handler` (the same
function `Client(elicitation_handler=...)` takes), treated exactly like a
foreground elicitation (C66). With neither, elicitations are answered
`{"action": "cancel"}` and other requests are left unanswered.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

import anyio
import mcp_types
from fastmcp.client.elicitation import ElicitationHandler, create_elicitation_callback
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.shared.exceptions import MCPError
from mcp_types import Request, Result
from pydantic import ConfigDict

from fastmcp_tasks.wire import (
    TASKS_EXTENSION_ID,
    CreateTaskResult,
    TaskIdParams,
    UpdateTaskParams,
)

StatusCallback = Callable[[dict[str, Any]], Awaitable[None] | None]
InputHandler = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any] | None]]

#: Poll interval used when the server gives none (the spec's default is the server's).
DEFAULT_POLL_SECONDS = 1.0


class GetTaskRequest(Request[TaskIdParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    name_param = "taskId"


class CancelTaskRequest(Request[TaskIdParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    name_param = "taskId"


class UpdateTaskRequest(Request[UpdateTaskParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    name_param = "taskId"


class TaskState(Result):
    """A `tasks/get` result, kept as the raw DetailedTask fields."""

    model_config = ConfigDict(extra="allow")


class TasksClientExtension(ClientExtension):
    """Transparent task support for `fastmcp.Client` (pass it in `extensions=[...]`).

    Args:
        on_status: called with each new task state (the DetailedTask dict) while
            waiting: its status and `statusMessage` changes. May be async.
        min_poll_interval: the shortest wait between polls, whatever the server says.
        on_input: answers one `inputRequests` entry: `await on_input(key, request)`
            returns the result (an `ElicitResult` dict for elicitations), or `None`
            to leave it unanswered.
        elicitation_handler: a FastMCP elicitation handler for in-task elicitations
            (used when `on_input` is not given).
    """

    identifier = TASKS_EXTENSION_ID

    def __init__(
        self,
        *,
        on_status: StatusCallback | None = None,
        min_poll_interval: float = 0.0,
        on_input: InputHandler | None = None,
        elicitation_handler: ElicitationHandler | None = None,
    ) -> None:
        self.on_status = on_status
        self.min_poll_interval = min_poll_interval
        self.on_input = on_input
        self._elicit = (
            create_elicitation_callback(elicitation_handler) if elicitation_handler else None
        )

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreateTaskResult, resolve=self._resolve)]

    async def _resolve(
        self, created: CreateTaskResult, ctx: ClaimContext
    ) -> mcp_types.CallToolResult:
        task_id = created.task_id
        state: dict[str, Any] = created.model_dump(by_alias=True, exclude_none=True)
        state.pop("resultType", None)
        handled: set[str] = set()
        try:
            await self._report(state)
            last_seen = (state.get("status"), state.get("statusMessage"))
            while True:
                if state.get("status") != "input_required":
                    await anyio.sleep(self._interval(state))
                state = await self._get(ctx, task_id)
                seen = (state.get("status"), state.get("statusMessage"))
                if seen != last_seen:
                    last_seen = seen
                    await self._report(state)
                status = state.get("status")
                if status == "input_required":
                    await self._answer(ctx, task_id, state.get("inputRequests") or {}, handled)
                    await anyio.sleep(self._interval(state))
                if status == "completed":
                    return mcp_types.CallToolResult.model_validate(state["result"])
                if status == "failed":
                    error = state.get("error") or {}
                    raise MCPError(
                        code=int(error.get("code", mcp_types.INTERNAL_ERROR)),
                        message=str(error.get("message", "Task failed")),
                        data=error.get("data"),
                    )
                if status == "cancelled":
                    raise MCPError(
                        code=mcp_types.INTERNAL_ERROR,
                        message=f"Task {task_id} was cancelled",
                        data={"taskId": task_id},
                    )
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await self._cancel(ctx, task_id)
            raise

    async def _answer(
        self, ctx: ClaimContext, task_id: str, requests: dict[str, Any], handled: set[str]
    ) -> None:
        answers: dict[str, Any] = {}
        for key, request in requests.items():
            if key in handled:
                continue
            handled.add(key)
            answer = await self._answer_one(ctx, key, request)
            if answer is not None:
                answers[key] = answer
        if answers:
            await ctx.session.send_request(
                UpdateTaskRequest(params=UpdateTaskParams(taskId=task_id, inputResponses=answers)),
                TaskState,
            )

    async def _answer_one(
        self, ctx: ClaimContext, key: str, request: dict[str, Any]
    ) -> dict[str, Any] | None:
        if self.on_input is not None:
            return await self.on_input(key, request)
        if request.get("method") != "elicitation/create":
            return None
        if self._elicit is None:
            return {"action": "cancel"}
        params = mcp_types.ElicitRequestFormParams.model_validate(request.get("params") or {})
        result = await self._elicit(ctx, params)  # type: ignore[arg-type]
        if isinstance(result, mcp_types.ErrorData):
            return {"action": "cancel"}
        return result.model_dump(by_alias=True, mode="json", exclude_none=True)

    def _interval(self, state: dict[str, Any]) -> float:
        poll_ms = state.get("pollIntervalMs")
        given = isinstance(poll_ms, int) and poll_ms > 0
        seconds = poll_ms / 1000 if given else DEFAULT_POLL_SECONDS
        return max(seconds, self.min_poll_interval)

    async def _report(self, state: dict[str, Any]) -> None:
        if self.on_status is None:
            return
        outcome = self.on_status(state)
        if outcome is not None:
            await outcome

    @staticmethod
    async def _get(ctx: ClaimContext, task_id: str) -> dict[str, Any]:
        timeout = ctx.read_timeout_seconds
        result = await ctx.session.send_request(
            GetTaskRequest(params=TaskIdParams(taskId=task_id)),
            TaskState,
            request_read_timeout_seconds=None if timeout in (None, math.inf) else timeout,
        )
        state = result.model_dump(by_alias=True, exclude_none=False)
        state.pop("resultType", None)
        return {k: v for k, v in state.items() if v is not None or k == "ttlMs"}

    @staticmethod
    async def _cancel(ctx: ClaimContext, task_id: str) -> None:
        try:
            await ctx.session.send_request(
                CancelTaskRequest(params=TaskIdParams(taskId=task_id)), TaskState
            )
        except Exception:  # best effort: the caller is already leaving
            return
