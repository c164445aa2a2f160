"""The client half: let `fastmcp.Client.call_tool()` resolve a task to its final result.

    from fastmcp import Client
    from fastmcp_tasks.client.extension import TasksClientExtension

    async with Client(url, extensions=[TasksClientExtension(on_status=print)]) as client:
        result = await client.call_tool("render", {"pages": 3})   # waits for the task

Importing `fastmcp_tasks` also registers a default `TasksClientExtension` with
FastMCP's client-extension hook, so any `fastmcp.Client` resolves tasks
transparently, answering in-task elicitations with its `elicitation_handler`.

`TasksClientExtension` declares the tasks extension on every request (C58) and
claims `resultType: "task"` on `tools/call` (C59). Its resolver follows the
task with `client.watch.TaskWatch` (shared with task handles): it polls
`tasks/get` no faster than the latest `pollIntervalMs` (C62; the server may
change it), retrying a poll the transport dropped (0.1 s doubling, a few tries;
never a JSON-RPC error), stops at the first terminal state it sees, reports
each new state to `on_status`, returns the inline `CallToolResult` when
`completed` (C71), and raises `TaskFailed` (an `MCPError` with the task's
JSON-RPC error, and a `ToolError`) when `failed`, `TaskCancelled` when
`cancelled`. `tasks/*` requests carry `Mcp-Name: <taskId>` through the request
types' `name_param` (C73). When the server serves `subscriptions/listen`, the
resolver subscribes to the task (C72) and waits for pushed states, polling only
as a slow safety net.

The call's timeout (`call_tool(timeout=T)`, else the client's) is one deadline
for the whole drive: polls, pushes and elicitation callbacks. Past it the
resolver sends `tasks/cancel` once (shielded, at most `CANCEL_GRACE` seconds)
and raises what a synchronous `call_tool(timeout=T)` raises: `MCPError` with
code `REQUEST_TIMEOUT` (-32001), "Request 'tools/call' timed out" (both over
memory and HTTP). A cancelled caller also sends `tasks/cancel` once (C69).

When a task waits in `input_required`, each outstanding request is handed
once to `on_input(key, request)` (keys are de-duplicated across polls, C67)
and all answers of one state go back in a single `tasks/update` (C65); see
`client.answers`. Elicitations can instead go to a FastMCP
`elicitation_handler` (the same function `Client(elicitation_handler=...)`
takes), treated exactly like a foreground elicitation (C66). A request nothing
can answer raises `NoInputHandler` (a `ToolError` saying what to pass) at once
and cancels the task: in transparent mode nobody else holds it.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, cast

import anyio
import mcp_types
from anyio.streams.memory import MemoryObjectSendStream
from fastmcp.client.elicitation import ElicitationHandler, create_elicitation_callback
from fastmcp.client.extension_hooks import register_internal_client_extension_factory
from mcp.client.extension import ClaimContext, ClientExtension, NotificationBinding, ResultClaim
from mcp.client.session import ClientSession, ElicitationFnT
from mcp.shared.exceptions import MCPError

from fastmcp_tasks.client.answers import InputAnswerer, InputHandler
from fastmcp_tasks.client.watch import (
    DEFAULT_POLL_SECONDS,
    DEFAULT_RECONNECT_TIMEOUT,
    DEFAULT_RETRY,
    LISTEN_TIMEOUT,
    SAFETY_POLL,
    RetryPolicy,
    TaskWatch,
)
from fastmcp_tasks.errors import NoInputHandler, TaskCancelled, TaskFailed
from fastmcp_tasks.wire.models import (
    CancelTaskRequest,
    CreateTaskResult,
    GetTaskRequest,
    TaskIdParams,
    TaskState,
    TaskStateDict,
    UpdateTaskRequest,
    _TaskNotificationParams,
)
from fastmcp_tasks.wire.names import TASKS_EXTENSION_ID

__all__ = [
    "DEFAULT_POLL_SECONDS",
    "LISTEN_TIMEOUT",
    "SAFETY_POLL",
    "CancelTaskRequest",
    "GetTaskRequest",
    "InputHandler",
    "StatusCallback",
    "TaskState",
    "TasksClientExtension",
    "UpdateTaskRequest",
    "register_transparent_client",
    "task_outcome",
]

StatusCallback = Callable[[TaskStateDict], Awaitable[None] | None]

TERMINAL = frozenset({"completed", "failed", "cancelled"})
#: How long the shielded `tasks/cancel` sent on the way out may take.
CANCEL_GRACE = 5.0
#: What a synchronous `call_tool(timeout=...)` raises when it times out (memory and HTTP).
TIMED_OUT_MESSAGE = "Request 'tools/call' timed out"


def task_error(task_id: str, state: TaskStateDict) -> TaskFailed | None:
    """The error a terminal state ends with: `TaskFailed`, `TaskCancelled`, or `None`."""
    status = state.get("status")
    if status == "failed":
        error = state.get("error") or {}
        return TaskFailed(
            int(error.get("code", mcp_types.INTERNAL_ERROR)),
            str(error.get("message") or state.get("statusMessage") or f"Task {task_id} failed"),
            error.get("data"),
            task_id=task_id,
        )
    if status == "cancelled":
        return TaskCancelled(
            mcp_types.INTERNAL_ERROR,
            f"Task {task_id} was cancelled",
            {"taskId": task_id},
            task_id=task_id,
        )
    return None


def task_outcome(task_id: str, state: TaskStateDict) -> mcp_types.CallToolResult:
    """The final result of a terminal task, or the error it ended with (C71).

    Raises:
        TaskFailed: the task `failed` (an `MCPError` with its code, message and data).
        TaskCancelled: the task was `cancelled`.
    """
    error = task_error(task_id, state)
    if error is not None:
        raise error
    return mcp_types.CallToolResult.model_validate(state["result"])


def deadline_seconds(timeout: float | None) -> float:
    """A resolver's time budget: `read_timeout_seconds`, with `None` (or <= 0) unbounded."""
    return math.inf if timeout is None or timeout <= 0 else timeout


#: The session whose `tools/call` should hand its task back (see `handing_back_tasks`).
_hand_back: ContextVar[ClientSession | None] = ContextVar("fastmcp_tasks_hand_back", default=None)


class TaskCreated(BaseException):
    """A `tools/call` made under `handing_back_tasks()` created this task (not driven).

    A `BaseException`, as `KeyboardInterrupt` is: it is a signal to
    `call_tool_task()`, not an error, so FastMCP's `except Exception` around the
    call (its telemetry span) neither swallows it nor marks the span failed.
    """

    def __init__(self, created: CreateTaskResult) -> None:
        super().__init__(created.task_id)
        self.created = created


@contextmanager
def handing_back_tasks(session: ClientSession) -> Iterator[None]:
    """While active, the resolver raises `TaskCreated` for a task `session` creates.

    `call_tool_task()` sends its `tools/call` through `Client.call_tool_mcp()` (so
    meta, version pins, trace context and timeouts are exactly `call_tool()`'s)
    and gets the task back this way instead of driving it.
    """
    token = _hand_back.set(session)
    try:
        yield
    finally:
        _hand_back.reset(token)


def changed(old: TaskStateDict, new: TaskStateDict) -> bool:
    """Whether a state is news to report: its status, message or input requests differ."""
    return (old.get("status"), old.get("statusMessage"), old.get("inputRequests")) != (
        new.get("status"),
        new.get("statusMessage"),
        new.get("inputRequests"),
    )


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
            (used when `on_input` is not given). With neither, a task that asks for
            input raises `NoInputHandler` (a `ToolError`) and is cancelled.
        push: follow the task over `subscriptions/listen` when the server offers it,
            polling only as a slow safety net (every `SAFETY_POLL` seconds at most).
        elicitation_callback: the SDK-level elicitation callback (what a `Client`
            builds from its `elicitation_handler`); used by the transparent mode.
        retry: how a `tasks/get` that fails in the transport is retried
            (`RetryPolicy`: 0.1 s doubling up to 2 s, at least 5 tries by default).
        reconnect_timeout: how long to keep following a task while its server cannot
            be reached (restarted, deployed, behind a failing proxy, its store down):
            seconds after the first failed try, 10 minutes by default, `None` for no
            limit. Then the call raises `TaskUnreachable`, which names the task and
            how to resume it; the task itself is not cancelled.
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
        retry: RetryPolicy = DEFAULT_RETRY,
        reconnect_timeout: float | None = DEFAULT_RECONNECT_TIMEOUT,
    ) -> None:
        self.push = push
        self.retry = retry
        self.reconnect_timeout = reconnect_timeout
        self._watchers: dict[str, list[MemoryObjectSendStream[TaskStateDict]]] = {}
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
        if _hand_back.get() is ctx.session:
            raise TaskCreated(created)
        task_id = created.task_id
        raw = created.model_dump(by_alias=True, exclude_none=True)
        raw.pop("resultType", None)
        latest = [cast(TaskStateDict, raw)]
        try:
            with anyio.move_on_after(deadline_seconds(ctx.read_timeout_seconds)) as budget:
                await self._drive(created, ctx, latest)
        except (NoInputHandler, anyio.get_cancelled_exc_class()):
            await cancel_on_the_way_out(ctx.session, task_id)
            raise
        if budget.cancelled_caught and latest[0].get("status") not in TERMINAL:
            await cancel_on_the_way_out(ctx.session, task_id)
            raise MCPError(
                code=mcp_types.REQUEST_TIMEOUT, message=TIMED_OUT_MESSAGE, data={"taskId": task_id}
            )
        return task_outcome(task_id, latest[0])

    async def _drive(
        self, created: CreateTaskResult, ctx: ClaimContext, latest: list[TaskStateDict]
    ) -> None:
        """Follow the task to its first terminal state, keeping the latest in `latest[0]`."""
        task_id = created.task_id
        answerer = InputAnswerer(self.on_input, self._elicit)
        answered: set[str] = set()
        watch = TaskWatch(
            ctx.session,
            task_id,
            extension=self,
            push=self.push,
            min_poll_interval=self.min_poll_interval,
            read_timeout=ctx.read_timeout_seconds,
            retry=self.retry,
            reconnect_timeout=self.reconnect_timeout,
        )
        async with watch:
            state = latest[0]
            await self._report(state)
            if state.get("status") in TERMINAL:  # C76: fetch the outcome once
                latest[0] = state = await watch.get()
            while state.get("status") not in TERMINAL:  # the first terminal state is final
                if state.get("status") == "input_required":
                    requests = state.get("inputRequests") or {}
                    await answerer.answer(ctx.session, task_id, requests, answered)
                fresh = await watch.next(state)
                if changed(state, fresh):
                    await self._report(fresh)
                latest[0] = state = fresh

    def add_watcher(self, task_id: str, inbox: MemoryObjectSendStream[TaskStateDict]) -> None:
        """Deliver the task's pushed `notifications/tasks` states to `inbox` (see `TaskWatch`)."""
        self._watchers.setdefault(task_id, []).append(inbox)

    def remove_watcher(self, task_id: str, inbox: MemoryObjectSendStream[TaskStateDict]) -> None:
        """Stop delivering the task's pushed states to `inbox`."""
        inboxes = self._watchers.get(task_id, [])
        if inbox in inboxes:
            inboxes.remove(inbox)
        if not inboxes:
            self._watchers.pop(task_id, None)

    async def _on_task_notification(self, params: _TaskNotificationParams) -> None:
        state = params.model_dump(by_alias=True, exclude_none=True)
        state.pop("_meta", None)
        for inbox in list(self._watchers.get(str(state.get("taskId")), ())):
            try:
                inbox.send_nowait(cast(TaskStateDict, dict(state)))
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                pass

    def notifications(self) -> Sequence[NotificationBinding[Any]]:
        return [
            NotificationBinding(
                method="notifications/tasks",
                params_type=_TaskNotificationParams,
                handler=self._on_task_notification,
            )
        ]

    async def answer_input(
        self,
        ctx: ClaimContext,
        task_id: str,
        requests: dict[str, Any],
        answered: set[str],
    ) -> dict[str, Any]:
        """Answer a task's outstanding `inputRequests` in one `tasks/update` (C65-C68).

        Each key not yet in `answered` is handed once to `on_input` (or, for an
        elicitation, to the elicitation handler) and added to `answered`, so a key
        seen again in a later poll or push is never answered twice (C67).

        Args:
            ctx: the session to send on (`ClaimContext(session=client.session, ...)`).
            task_id: the task waiting in `input_required`.
            requests: its `inputRequests` (key to request).
            answered: the keys already handled for this task; updated in place.

        Returns:
            The answers sent (none sent when empty).

        Raises:
            NoInputHandler: a request neither `on_input` nor the elicitation handler can
                answer (nothing was asked or sent).
            MCPError: the server refused the `tasks/update` (e.g. -32602 naming a key
                whose answer does not fit its request). Nothing was consumed, so the
                keys sent leave `answered` again and may be answered anew.
        """
        answerer = InputAnswerer(self.on_input, self._elicit)
        return await answerer.answer(ctx.session, task_id, requests, answered)

    async def _report(self, state: TaskStateDict) -> None:
        if self.on_status is None:
            return
        outcome = self.on_status(state)
        if outcome is not None:
            await outcome


async def send_cancel(session: ClientSession, task_id: str) -> None:
    """Best effort `tasks/cancel` (C69): errors are swallowed, the caller is leaving."""
    try:
        request = CancelTaskRequest(params=TaskIdParams(taskId=task_id))
        await session.send_request(request, TaskState)
    except Exception:
        return


async def cancel_on_the_way_out(session: ClientSession, task_id: str) -> None:
    """`send_cancel`, shielded from the caller's cancellation and bounded by `CANCEL_GRACE`."""
    with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_GRACE):
        await send_cancel(session, task_id)


def _transparent(elicitation_callback: ElicitationFnT | None) -> ClientExtension:
    """The extension every `fastmcp.Client` folds in once `fastmcp_tasks` is imported."""
    return TasksClientExtension(elicitation_callback=elicitation_callback)


def register_transparent_client() -> None:
    """Make every `fastmcp.Client` resolve tasks in `call_tool()` (idempotent).

    Called when `fastmcp_tasks` is imported. A `Client(extensions=[TasksClientExtension(...)])`
    of your own takes precedence over this default one.
    """
    register_internal_client_extension_factory(_transparent)
