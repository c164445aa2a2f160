"""Task handles: start a tool as a task, hold on to it, and come back to it later.

    from fastmcp import Client
    from fastmcp_tasks import ToolTask, call_tool_task

    async with Client(url) as client:
        task = await call_tool_task(client, "render", {"pages": 3})   # returns at once
        snap = await task.status()                                       # a TaskSnapshot
        print(task.task_id, snap.status, snap.status_message)
        await task.wait(state="input_required", timeout=30)             # observe only
        result = await task.result()                                     # or: await task
        print(result.data)

    async with Client(url) as client:                                    # any process, later
        task = await ToolTask.resume(client, task_id)
        async for snap in task.updates():
            print(snap.status, snap.status_message)

`call_tool_task()` sends `tools/call` through `Client.call_tool_mcp()` (so
`timeout=`, `version=` and `meta=` act exactly as in `Client.call_tool()`) and
returns a `ToolTask` without waiting; a synchronous answer raises `NotATask`
unless `allow_synchronous=True` (then the handle is already complete).

The handle follows the task as the transparent resolver does
(`client.watch.TaskWatch`): pushed states over `subscriptions/listen` when the
server offers it (through the client's `TasksClientExtension`, with a slow
safety poll), otherwise `tasks/get` no faster than the latest
`pollIntervalMs` (C62), retried when the transport drops it. The first
terminal state seen is final.

- `status()`, `updates()` and `wait()` return `TaskSnapshot`s; `wait()` only
  observes: it never answers input and its timeout never cancels.
- `result()` (and `await task`) drives the task to its end, answering input
  with `on_input`, else the client's `elicitation_handler` (`NoInputHandler`
  at once when neither can), and returns FastMCP's `CallToolResult` as
  `call_tool()` would (the same object on every call). A failed task raises
  `TaskFailed`, a cancelled one `TaskCancelled` (both `ToolError`s), unless
  `raise_on_error=False`. Its timeout, or its caller being cancelled, sends
  `tasks/cancel` once (C69).

With `log=TaskLog(...)` the task is recorded durably as soon as it is created
and dropped once it is seen terminal.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Generator, Sequence
from contextlib import aclosing
from typing import TYPE_CHECKING, Any, cast

import anyio

from fastmcp_tasks import _compat
from fastmcp_tasks.client.answers import InputAnswerer, InputHandler
from fastmcp_tasks.client.creating import send_with_key
from fastmcp_tasks.client.drive import finished_result, not_a_task, request_meta
from fastmcp_tasks.client.extension import TaskCreated, handing_back_tasks
from fastmcp_tasks.client.following import (
    DEFAULT,
    Default,
    InputRejected,
    StatusChange,
    TaskFollower,
    reconnect_window,
    server_name,
    tasks_extension,
)
from fastmcp_tasks.client.snapshot import TaskSnapshot
from fastmcp_tasks.wire.models import CreateTaskResult, TaskStateDict
from fastmcp_tasks.wire.names import ACTIVE_STATUSES, TERMINAL_STATUSES

if TYPE_CHECKING:
    from fastmcp import Client
    from fastmcp.client.client import CallToolResult

    from fastmcp_tasks.client.tasklog import TaskLog

__all__ = ["StatusChange", "ToolTask", "call_tool_task", "server_name", "tasks_extension"]


class ToolTask(TaskFollower):
    """A handle on one task created by `tools/call` (or on a synchronous answer).

    Awaiting the handle is `result()`. The latest known DetailedTask (a dict) is `state`.

    Args:
        client: a connected `fastmcp.Client` (`async with Client(...)`).
        task_id: the task's id, or `None` for a call the server answered synchronously.
        state: the latest known task state (the CreateTaskResult fields, or a DetailedTask).
        tool_name: the tool, so `result()` types `.data` with its output schema
            (without it, `.data` is the structured content as sent).
        create_result: the `CreateTaskResult` the call answered, when known.
        raise_on_error: `result()` raises for a failed/cancelled task or an error result;
            `False` returns an error `CallToolResult` instead.
        version: the tool version the call pinned (as `call_tool(version=)`).
        on_status_change: called with a `TaskSnapshot` of each new state (status,
            message or input requests changed) as the handle sees it. May be async.
        on_input: answers one `inputRequests` entry (`await on_input(key, request)`)
            in `updates()` and `result()`, before the client's `elicitation_handler`.
        on_input_rejected: called with the `MCPError` when the server refuses the
            answers (`tasks/update`, e.g. -32602 naming the key); the handle then asks
            again. Without it the error is raised from `updates()`/`result()`. May be async.
        min_poll_interval: the shortest wait between polls, whatever the server says.
        log: a `TaskLog` to drop the task from once it is seen terminal.
        push: receive pushed states over `subscriptions/listen` when the server offers
            it and the client has a `TasksClientExtension` (the default); polls then
            only run as a slow safety net.
        reconnect_timeout: how long to keep following the task while its server cannot
            be reached (restarts, deploys, a proxy's 502/503/504, "Task store
            unavailable"): seconds after the first failed try, `None` for no limit; by
            default the client's `TasksClientExtension(reconnect_timeout=)`, 10
            minutes. Then `status()`, `wait()`, `updates()` and `result()` raise
            `TaskUnreachable` (the task is not cancelled: resume it by id).
    """

    @classmethod
    async def resume(cls, client: Client[Any], task_id: str, **options: Any) -> ToolTask:
        """Reattach to an existing task by id (one `tasks/get`; `MCPError` if it is unknown).

        Args:
            client: a connected `fastmcp.Client` for the server that owns the task.
            task_id: the id a `CreateTaskResult` carried (`task.task_id`).
            **options: the `ToolTask` keyword options (`tool_name`, `on_status_change`,
                `log`, ...). Pass `tool_name` to have `result()` type `.data`.
        """
        task = cls(client, task_id, **options)
        await task.status()
        return task

    @property
    def create_result(self) -> CreateTaskResult | None:
        """The `CreateTaskResult` `tools/call` answered (`None` for resumed or synchronous)."""
        return self._create_result

    async def wait(
        self,
        *,
        state: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the official package's signature
    ) -> TaskSnapshot:
        """Wait until the task is terminal, or in `state`, and return that state.

        Only observes: input requests are never answered (not even with `on_input`),
        and a timeout does not cancel the task.

        Args:
            state: a status to wait for (`"input_required"`, `"working"`, ...); also
                returns at once if the task is in it now. A terminal state other than
                `state` is returned too: `state` can no longer come.
            timeout: seconds to wait at most; `None` waits as long as it takes.

        Raises:
            TimeoutError: `timeout` passed first (the task keeps running).
            ValueError: `state` is not a task status.
        """
        if state is not None and state not in ACTIVE_STATUSES | TERMINAL_STATUSES:
            raise ValueError(f"state must be a task status, not {state!r}")
        with anyio.move_on_after(math.inf if timeout is None else timeout):
            if self.task_id is not None and not self._final():
                await self.status()  # a stale state must not satisfy the wait
            async with aclosing(self._follow(None)) as states:
                async for current in states:
                    status = current.get("status")
                    if status == state or status in TERMINAL_STATUSES:
                        return TaskSnapshot(current)
        raise TimeoutError(
            f"Task {self.task_id} did not reach {state or 'a terminal state'} "
            f"within {timeout}s (it keeps running)"
        )

    async def result(self, timeout: float | None = None) -> CallToolResult:  # noqa: ASYNC109
        """Drive the task to its end and return its result, as `client.call_tool()` would.

        Input requests are answered with `on_input`, else with the client's
        `elicitation_handler`. The result is FastMCP's client `CallToolResult`
        (`.data` typed by the tool's output schema when `tool_name` is known; a
        resumed handle without one leaves `.data` as the structured content sent),
        and every later call returns the same object.

        Args:
            timeout: seconds to wait at most; `None` waits as long as the task runs.

        Raises:
            TaskFailed: the task failed (code, message, data of its error); also a
                `ToolError`. `raise_on_error=False` returns an error result instead.
            TaskCancelled: the task was cancelled (likewise).
            ToolError: the result is an error (`isError`), unless `raise_on_error=False`.
            NoInputHandler: the task asks for input nothing here can answer (a
                `ToolError`; the task is left waiting, `answer_input()` may answer it).
            TimeoutError: `timeout` passed; `tasks/cancel` was sent once first.
        """
        if self._result is not None:
            return self._result
        async with self._driving:
            if self._result is None:
                await self._drive(timeout)
                self._result = await finished_result(
                    self.client,
                    self.tool_name,
                    self.task_id,
                    self.state,
                    raise_on_error=self.raise_on_error,
                    version=self.version,
                )
            return self._result

    def __await__(self) -> Generator[Any, None, CallToolResult]:
        return self.result().__await__()

    async def _drive(self, limit: float | None) -> None:
        """Follow the task to its end, answering input; cancel it on timeout or cancellation."""
        answerer = InputAnswerer(self.on_input, _compat.elicitation_callback(self.client))
        try:
            with anyio.move_on_after(math.inf if limit is None else limit) as budget:
                async with aclosing(self._follow(answerer)) as states:
                    async for _ in states:
                        pass
        except anyio.get_cancelled_exc_class():
            await self._cancel_on_the_way_out()
            raise
        if budget.cancelled_caught and not self.done:
            await self._cancel_on_the_way_out()
            raise TimeoutError(
                f"Task {self.task_id} did not finish within {limit}s; it was asked to cancel"
            )


async def call_tool_task(
    client: Client[Any],
    name: str,
    arguments: dict[str, Any] | None = None,
    *,
    timeout: datetime.timedelta | float | int | None = None,  # noqa: ASYNC109
    raise_on_error: bool = True,
    version: str | None = None,
    meta: dict[str, Any] | None = None,
    related: Sequence[str] | None = None,
    log: TaskLog | None = None,
    on_status_change: StatusChange | None = None,
    on_input: InputHandler | None = None,
    on_input_rejected: InputRejected | None = None,
    min_poll_interval: float = 0.0,
    server: str | None = None,
    push: bool = True,
    allow_synchronous: bool = False,
    reconnect_timeout: float | Default | None = DEFAULT,
) -> ToolTask:
    """Call a tool as a task and return its handle without waiting for the outcome.

    Args:
        client: a connected `fastmcp.Client` (importing `fastmcp_tasks` gives every client
            the tasks extension; a `TasksClientExtension` of your own works too).
        name: the tool.
        arguments: the tool's arguments.
        timeout: bounds the `tools/call` request, as `Client.call_tool(timeout=)` does
            (not the task: see `ToolTask.result(timeout=)`).
        raise_on_error: how `result()` reports a failed or cancelled task or an error
            result: raise (`TaskFailed`, `TaskCancelled`, `ToolError`), or return an error
            `CallToolResult` with `False`.
        version: the tool version to run, sent as `Client.call_tool(version=)` sends it.
        meta: request `_meta`, merged as `Client.call_tool(meta=)` merges it.
        related: ids of tasks this call relates to, sent in the request `_meta` under
            `io.modelcontextprotocol/relatedTaskIds` (after any in `meta`): a hint the
            tool reads with `related_tasks()`; ids the server finds unknown or not
            yours are dropped silently.
        log: a `TaskLog`: the task is recorded as soon as it is created, and dropped
            once the handle sees it terminal.
        on_status_change: called with a `TaskSnapshot` of each new state. May be async.
        on_input: answers `inputRequests` entries (see `ToolTask`).
        on_input_rejected: called when the server refuses answers (see `ToolTask`).
        min_poll_interval: the shortest wait between polls.
        server: the server's name in the log (default: the client's URL).
        push: follow the task over `subscriptions/listen` when offered (see `ToolTask`).
        allow_synchronous: accept a synchronous answer as an already complete handle
            (`task_id` `None`) instead of raising `NotATask`.
        reconnect_timeout: how long the call and the handle keep trying while the server
            cannot be reached (see `ToolTask`); by default the client's
            `TasksClientExtension(reconnect_timeout=)`, 10 minutes.

    The call carries an idempotency key (`client.creating`): when its reply is lost
    it is sent again with the same key and answered with the same task.

    Returns:
        The task's handle.

    Raises:
        NotATask: the server answered synchronously (the tool ran; the result is on
            `.result`): a tool without `task=True`, a server without the tasks
            extension, or a legacy (2025-11-25) connection. A `ToolError`.
        MCPError: the server refused the call, or `timeout` passed (code -32001).
    """
    options: dict[str, Any] = {
        "tool_name": name,
        "raise_on_error": raise_on_error,
        "version": version,
        "on_status_change": on_status_change,
        "on_input": on_input,
        "on_input_rejected": on_input_rejected,
        "min_poll_interval": min_poll_interval,
        "push": push,
        "reconnect_timeout": reconnect_timeout,
    }

    async def send(sent: dict[str, Any]) -> Any:
        with handing_back_tasks(client.session):
            return await client.call_tool_mcp(name, arguments or {}, timeout=timeout, meta=sent)

    reconnect = reconnect_window(client, reconnect_timeout)
    try:
        answer = await send_with_key(
            client, send, request_meta(meta, version, related), reconnect_timeout=reconnect
        )
    except TaskCreated as handed_back:
        created = handed_back.created
    else:
        if not allow_synchronous:
            raise await not_a_task(client, name, answer, version)
        result = answer.model_dump(by_alias=True, mode="json", exclude_none=True)
        done = cast(TaskStateDict, {"status": "completed", "result": result})
        return ToolTask(client, None, state=done, **options)
    raw = created.model_dump(by_alias=True, exclude_none=True)
    for extra in ("resultType", "_meta"):
        raw.pop(extra, None)
    if log is not None:
        await log.record(server or server_name(client), name, created.task_id, arguments)
    task = ToolTask(client, created.task_id, create_result=created, log=log, **options)
    await task._observe(cast(TaskStateDict, raw))
    return task
