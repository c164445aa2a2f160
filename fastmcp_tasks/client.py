"""The client half: let `fastmcp.Client.call_tool()` resolve a task to its final result.

    from fastmcp import Client
    from fastmcp_tasks.client import TasksClientExtension

    async with Client(url, extensions=[TasksClientExtension(on_status=print)]) as client:
        result = await client.call_tool("render", {"pages": 3})   # waits for the task

Importing `fastmcp_tasks` also registers a default `TasksClientExtension` with
FastMCP's client-extension hook, so any `fastmcp.Client` resolves tasks
transparently, answering in-task elicitations with its `elicitation_handler`.

`TasksClientExtension` declares the tasks extension on every request (C58) and
claims `resultType: "task"` on `tools/call` (C59). Its resolver polls
`tasks/get` no faster than the latest `pollIntervalMs` (C62; the server may
change it), reports each new state to `on_status`, returns the inline
`CallToolResult` when `completed` (C71), raises `MCPError` with the task's
JSON-RPC error when `failed`, and sends `tasks/cancel` once if the caller is
cancelled or times out while waiting (C69). `tasks/*` requests carry
`Mcp-Name: <taskId>` through the request types' `name_param` (C73). When the
server serves `subscriptions/listen`, the resolver subscribes to the task
(C72) and waits for pushed states, polling only as a slow safety net.

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
from anyio.streams.memory import MemoryObjectSendStream
from fastmcp.client.elicitation import ElicitationHandler, create_elicitation_callback
from fastmcp.client.extension_hooks import register_internal_client_extension_factory
from mcp.client.extension import ClaimContext, ClientExtension, NotificationBinding, ResultClaim
from mcp.client.session import ElicitationFnT
from mcp.shared.exceptions import MCPError
from mcp_types import (
    NotificationParams,
    Request,
    Result,
    SubscriptionFilter,
    SubscriptionsListenRequest,
    SubscriptionsListenRequestParams,
    SubscriptionsListenResult,
)
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
#: While push works, polls still happen at least this far apart, as a safety net.
SAFETY_POLL = 30.0
#: How long one listen stream may stay open.
LISTEN_TIMEOUT = 24 * 3600.0
TERMINAL = frozenset({"completed", "failed", "cancelled"})


class GetTaskRequest(Request[TaskIdParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    name_param = "taskId"


class CancelTaskRequest(Request[TaskIdParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    name_param = "taskId"


class UpdateTaskRequest(Request[UpdateTaskParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    name_param = "taskId"


def task_outcome(task_id: str, state: dict[str, Any]) -> mcp_types.CallToolResult:
    """The final result of a terminal task, or the error it ended with (C71)."""
    status = state.get("status")
    if status == "completed":
        return mcp_types.CallToolResult.model_validate(state["result"])
    if status == "failed":
        error = state.get("error") or {}
        raise MCPError(
            code=int(error.get("code", mcp_types.INTERNAL_ERROR)),
            message=str(error.get("message", "Task failed")),
            data=error.get("data"),
        )
    raise MCPError(
        code=mcp_types.INTERNAL_ERROR,
        message=f"Task {task_id} was cancelled",
        data={"taskId": task_id},
    )


class _TaskNotificationParams(NotificationParams):
    model_config = ConfigDict(extra="allow")


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
        push: follow the task over `subscriptions/listen` when the server offers it,
            polling only as a slow safety net (every `SAFETY_POLL` seconds at most).
        elicitation_callback: the SDK-level elicitation callback (what a `Client`
            builds from its `elicitation_handler`); used by the transparent mode.
    """

    identifier = TASKS_EXTENSION_ID

    def __init__(
        self,
        *,
        on_status: StatusCallback | None = None,
        min_poll_interval: float = 0.0,
        on_input: InputHandler | None = None,
        elicitation_handler: ElicitationHandler | None = None,
        push: bool = True,
        elicitation_callback: ElicitationFnT | None = None,
    ) -> None:
        self.push = push
        self._watchers: dict[str, MemoryObjectSendStream[dict[str, Any]]] = {}
        self.on_status = on_status
        self.min_poll_interval = min_poll_interval
        self.on_input = on_input
        self._elicit = (
            create_elicitation_callback(elicitation_handler)
            if elicitation_handler
            else elicitation_callback
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
        pushes_in, pushes = anyio.create_memory_object_stream[dict[str, Any]](math.inf)
        self._watchers[task_id] = pushes_in
        try:
            async with anyio.create_task_group() as group:
                if self.push:
                    group.start_soon(self._listen, ctx, task_id)
                await self._report(state)
                if state.get("status") in TERMINAL:  # C76: fetch the outcome once
                    state = await self._get(ctx, task_id)
                pushed = False
                while state.get("status") not in TERMINAL:
                    if state.get("status") == "input_required":
                        await self._answer(ctx, task_id, state.get("inputRequests") or {}, handled)
                    wait = self._interval(state)
                    fresh: dict[str, Any] | None = None
                    with anyio.move_on_after(max(wait, SAFETY_POLL) if pushed else wait):
                        fresh = await pushes.receive()
                        pushed = True
                    if fresh is None:
                        fresh = await self._get(ctx, task_id)
                    if (fresh.get("status"), fresh.get("statusMessage")) != (
                        state.get("status"),
                        state.get("statusMessage"),
                    ) or fresh.get("inputRequests") != state.get("inputRequests"):
                        await self._report(fresh)
                    state = fresh
                group.cancel_scope.cancel()
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await self._cancel(ctx, task_id)
            raise
        finally:
            self._watchers.pop(task_id, None)
            pushes_in.close()
        return task_outcome(task_id, state)

    async def _listen(self, ctx: ClaimContext, task_id: str) -> None:
        """Subscribe to the task's changes; on any refusal, polling carries on alone."""
        notifications = SubscriptionFilter.model_validate({"taskIds": [task_id]})
        request = SubscriptionsListenRequest(
            params=SubscriptionsListenRequestParams(notifications=notifications)
        )
        try:
            await ctx.session.send_request(
                request, SubscriptionsListenResult, request_read_timeout_seconds=LISTEN_TIMEOUT
            )
        except Exception:  # -32601 from a server without push, a dropped stream, ...
            return

    async def _on_task_notification(self, params: _TaskNotificationParams) -> None:
        state = params.model_dump(by_alias=True, exclude_none=True)
        state.pop("_meta", None)
        stream = self._watchers.get(str(state.get("taskId")))
        if stream is not None:
            try:
                stream.send_nowait(state)
            except anyio.ClosedResourceError:
                pass

    def notifications(self) -> Sequence[NotificationBinding[Any]]:
        return [
            NotificationBinding(
                method="notifications/tasks",
                params_type=_TaskNotificationParams,
                handler=self._on_task_notification,
            )
        ]

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


def _transparent(elicitation_callback: ElicitationFnT | None) -> ClientExtension:
    """The extension every `fastmcp.Client` folds in once `fastmcp_tasks` is imported."""
    return TasksClientExtension(elicitation_callback=elicitation_callback)


def register_transparent_client() -> None:
    """Make every `fastmcp.Client` resolve tasks in `call_tool()` (idempotent).

    Called when `fastmcp_tasks` is imported. A `Client(extensions=[TasksClientExtension(...)])`
    of your own takes precedence over this default one.
    """
    register_internal_client_extension_factory(_transparent)
