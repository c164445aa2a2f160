"""Task handles: start a tool as a task, hold on to it, and come back to it later.

    from fastmcp import Client
    from fastmcp_tasks.client.handles import ToolTask, call_tool_task

    async with Client(url) as client:
        task = await call_tool_task(client, "render", {"pages": 3})   # returns at once
        print(task.task_id, (await task.status())["status"])
        result = await task                                              # or task.wait(timeout=60)

    async with Client(url) as client:                                    # any process, later
        task = await ToolTask.resume(client, task_id)
        async for state in task.updates():
            print(state["status"], state.get("statusMessage"))

`call_tool_task()` sends `tools/call` with the tasks opt-in (the client's
`TasksClientExtension` claims `resultType: "task"`) and returns a `ToolTask`
without waiting. A server that answers synchronously yields a handle that is
already complete. The handle follows the task exactly as the transparent
resolver does (`client.watch.TaskWatch`): pushed states over
`subscriptions/listen` when the server offers it (through the client's
`TasksClientExtension`, with a slow safety poll), otherwise `tasks/get` no
faster than the latest `pollIntervalMs` (C62), retried when the transport
drops it. The first terminal state seen is final. It raises `MCPError` with
the task's error when it `failed`, and sends `tasks/cancel` once when a
`wait()` times out or its caller is cancelled (C69). With `log=TaskLog(...)`
the task is recorded durably as soon as it is created and dropped once it is
seen terminal.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Generator
from typing import TYPE_CHECKING, Any, cast

import anyio
import mcp_types
from mcp.client.extension import ClaimContext
from mcp.shared.exceptions import MCPError

from fastmcp_tasks import _compat
from fastmcp_tasks.client.extension import InputHandler, TasksClientExtension, task_outcome
from fastmcp_tasks.client.watch import TaskWatch
from fastmcp_tasks.wire.models import (
    CancelTaskRequest,
    CreateTaskResult,
    TaskIdParams,
    TaskState,
    TaskStateDict,
)
from fastmcp_tasks.wire.names import TERMINAL_STATUSES

if TYPE_CHECKING:
    from fastmcp import Client

    from fastmcp_tasks.client.tasklog import TaskLog

StatusChange = Callable[[TaskStateDict], Awaitable[None] | None]

#: How long the shielded `tasks/cancel` of an abandoned wait may take.
CANCEL_GRACE = 5.0


def server_name(client: Client[Any]) -> str:
    """A stable name for the server a client talks to: its URL when it has one."""
    transport = client.transport
    url = getattr(transport, "url", None)
    return str(url) if url else type(transport).__name__


def tasks_extension(client: Client[Any]) -> TasksClientExtension | None:
    """The `TasksClientExtension` folded into `client` (its own or the default one).

    Handles use it to receive pushed task states; `None` (polling only) when the
    client has none or FastMCP no longer exposes its result claims.
    """
    claim = _compat.result_claims(client).get(CreateTaskResult)
    owner = getattr(getattr(claim, "resolve", None), "__self__", None)
    return owner if isinstance(owner, TasksClientExtension) else None


class ToolTask:
    """A handle on one task created by `tools/call` (or on a synchronous answer).

    Awaiting the handle is `wait()`. The latest known DetailedTask is `state`.

    Args:
        client: a connected `fastmcp.Client` (`async with Client(...)`).
        task_id: the task's id, or `None` for a call the server answered synchronously.
        state: the latest known task state (the CreateTaskResult fields, or a DetailedTask).
        on_status_change: called with each new state (status, message or input requests
            changed) as the handle sees it. May be async.
        on_input: answers one `inputRequests` entry while waiting, as
            `TasksClientExtension(on_input=...)` does; without it, input is left unanswered.
        on_input_rejected: called with the `MCPError` when the server refuses the
            answers (`tasks/update`, e.g. -32602 naming the key); the handle then asks
            `on_input` again. Without it the error is raised from `updates()`/`wait()`.
            May be async.
        min_poll_interval: the shortest wait between polls, whatever the server says.
        log: a `TaskLog` to drop the task from once it is seen terminal.
        push: receive pushed states over `subscriptions/listen` when the server offers
            it and the client has a `TasksClientExtension` (the default); polls then
            only run as a slow safety net.
    """

    def __init__(
        self,
        client: Client[Any],
        task_id: str | None,
        *,
        state: TaskStateDict | None = None,
        on_status_change: StatusChange | None = None,
        on_input: InputHandler | None = None,
        on_input_rejected: Callable[[MCPError], Awaitable[None] | None] | None = None,
        min_poll_interval: float = 0.0,
        log: TaskLog | None = None,
        push: bool = True,
    ) -> None:
        self.client = client
        self.push = push
        self.task_id = task_id
        self.state: TaskStateDict = state.copy() if state else cast(TaskStateDict, {})
        self.on_status_change = on_status_change
        self.on_input = on_input
        self.on_input_rejected = on_input_rejected
        self.min_poll_interval = min_poll_interval
        self.log = log
        self._cancel_sent = False
        self._reported: tuple[Any, ...] | None = None
        self._answered: set[str] = set()

    def __repr__(self) -> str:
        return f"ToolTask({self.task_id!r}, status={self.state.get('status')!r})"

    @classmethod
    async def resume(cls, client: Client[Any], task_id: str, **options: Any) -> ToolTask:
        """Reattach to an existing task by id (one `tasks/get`; `MCPError` if it is unknown).

        Args:
            client: a connected `fastmcp.Client` for the server that owns the task.
            task_id: the id a `CreateTaskResult` carried (`task.task_id`).
            **options: the `ToolTask` keyword options (`on_status_change`, `log`, ...).
        """
        task = cls(client, task_id, **options)
        await task.status()
        return task

    @property
    def done(self) -> bool:
        """Whether the latest known state is terminal."""
        return self.state.get("status") in TERMINAL_STATUSES

    async def status(self) -> TaskStateDict:
        """Fetch the task's current DetailedTask with one `tasks/get`."""
        if self.task_id is None:
            return self.state.copy()
        await self._observe(await self._watch().get())
        return self.state.copy()

    async def updates(self) -> AsyncIterator[TaskStateDict]:
        """Yield the task's state each time it changes, ending with the terminal one.

        The latest known state comes first; later ones are pushed by the server when
        it serves `subscriptions/listen`, or polled no faster than its `pollIntervalMs`
        (and `min_poll_interval`).
        """
        last: tuple[Any, ...] | None = None
        state = self.state if self.state else await self.status()
        if _missing_outcome(state):  # C76: terminal at creation, fetch the outcome once
            state = await self.status()
        if self.task_id is None or state.get("status") in TERMINAL_STATUSES:
            yield state.copy()
            return
        watch = self._watch()
        watch.start()
        try:
            while True:
                key = _change_key(state)
                if key != last:
                    last = key
                    yield state.copy()
                if state.get("status") in TERMINAL_STATUSES:
                    return
                if state.get("status") == "input_required" and self.on_input is not None:
                    try:
                        await self.answer_input(state.get("inputRequests") or {})
                    except MCPError as exc:
                        if self.on_input_rejected is None:
                            raise
                        outcome = self.on_input_rejected(exc)
                        if outcome is not None:
                            await outcome
                        continue  # nothing was consumed: ask again
                await self._observe(await watch.next(state))
                state = self.state
        finally:
            await watch.close()

    async def wait(self, timeout: float | None = None) -> mcp_types.CallToolResult:  # noqa: ASYNC109
        """Wait for the task's outcome: its `CallToolResult` once `completed`.

        Args:
            timeout: seconds to wait at most; `None` waits as long as the task runs.

        Raises:
            MCPError: the task `failed` (its code, message and data) or was `cancelled`.
            TimeoutError: `timeout` passed; `tasks/cancel` was sent once first.
        """
        try:
            with anyio.fail_after(timeout):
                async for _ in self.updates():
                    pass
        except (TimeoutError, anyio.get_cancelled_exc_class()):
            with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_GRACE):
                try:
                    await self.cancel()
                except Exception:  # best effort: the caller is already leaving
                    pass
            raise
        return task_outcome(str(self.task_id), self.state)

    async def result(self) -> mcp_types.CallToolResult:
        """The task's outcome; the same as `wait()` without a timeout."""
        return await self.wait()

    def __await__(self) -> Generator[Any, None, mcp_types.CallToolResult]:
        return self.wait().__await__()

    async def cancel(self) -> None:
        """Ask the server to cancel the task (at most one `tasks/cancel` per handle).

        Nothing is sent for a task already known to be terminal or answered synchronously.
        """
        if self._cancel_sent or self.task_id is None or self.done:
            return
        self._cancel_sent = True
        await self.client.session.send_request(
            CancelTaskRequest(params=TaskIdParams(taskId=self.task_id)), TaskState
        )
        if self.log is not None:
            await self.log.finish(self.task_id)

    async def answer_input(self, requests: dict[str, Any]) -> dict[str, Any]:
        """Answer outstanding `inputRequests` with `on_input`, each key once, in one `tasks/update`.

        Returns:
            The answers sent (empty without `on_input` or when every key was answered before).
        """
        if self.on_input is None or self.task_id is None:
            return {}
        helper = TasksClientExtension(on_input=self.on_input)
        ctx = ClaimContext(session=self.client.session, tool_name="", read_timeout_seconds=None)
        return await helper.answer_input(ctx, self.task_id, requests, self._answered)

    def _watch(self) -> TaskWatch:
        return TaskWatch(
            self.client.session,
            str(self.task_id),
            extension=tasks_extension(self.client),
            push=self.push,
            min_poll_interval=self.min_poll_interval,
        )

    async def _observe(self, state: TaskStateDict) -> None:
        if self.done and not _missing_outcome(self.state):
            return  # the first terminal state seen is final
        self.state = state
        key = _change_key(state)
        if key != self._reported:
            self._reported = key
            if self.on_status_change is not None:
                outcome = self.on_status_change(state.copy())
                if outcome is not None:
                    await outcome
        if self.done and self.log is not None and self.task_id is not None:
            await self.log.finish(self.task_id)


def _missing_outcome(state: TaskStateDict) -> bool:
    status = state.get("status")
    return (status == "completed" and "result" not in state) or (
        status == "failed" and "error" not in state
    )


def _change_key(state: TaskStateDict) -> tuple[Any, ...]:
    return (state.get("status"), state.get("statusMessage"), state.get("inputRequests"))


async def call_tool_task(
    client: Client[Any],
    name: str,
    arguments: dict[str, Any] | None = None,
    *,
    log: TaskLog | None = None,
    on_status_change: StatusChange | None = None,
    on_input: InputHandler | None = None,
    on_input_rejected: Callable[[MCPError], Awaitable[None] | None] | None = None,
    min_poll_interval: float = 0.0,
    server: str | None = None,
    push: bool = True,
) -> ToolTask:
    """Call a tool as a task and return its handle without waiting for the outcome.

    Args:
        client: a connected `fastmcp.Client` (importing `fastmcp_tasks` gives every client
            the tasks extension; a `TasksClientExtension` of your own works too).
        name: the tool.
        arguments: the tool's arguments.
        log: a `TaskLog`: the task is recorded as soon as it is created, and dropped
            once the handle sees it terminal.
        on_status_change: called with each new state the handle sees. May be async.
        on_input: answers `inputRequests` entries while waiting (see `ToolTask`).
        on_input_rejected: called when the server refuses answers (see `ToolTask`).
        min_poll_interval: the shortest wait between polls.
        server: the server's name in the log (default: the client's URL).
        push: follow the task over `subscriptions/listen` when offered (see `ToolTask`).

    Returns:
        The task's handle; already complete when the server answered synchronously.

    Raises:
        MCPError: the server refused the call.
    """
    created = await client.session.call_tool(name, arguments, allow_claimed=True)
    options: dict[str, Any] = {
        "on_status_change": on_status_change,
        "on_input": on_input,
        "on_input_rejected": on_input_rejected,
        "min_poll_interval": min_poll_interval,
        "push": push,
    }
    if isinstance(created, mcp_types.CallToolResult):
        done = cast(
            TaskStateDict,
            {
                "status": "completed",
                "result": created.model_dump(by_alias=True, mode="json", exclude_none=True),
            },
        )
        return ToolTask(client, None, state=done, **options)
    if not isinstance(created, CreateTaskResult):
        raise MCPError(
            code=mcp_types.INTERNAL_ERROR,
            message=f"tools/call answered with an unexpected result: {type(created).__name__}",
        )
    raw = created.model_dump(by_alias=True, exclude_none=True)
    for extra in ("resultType", "_meta"):
        raw.pop(extra, None)
    state = cast(TaskStateDict, raw)
    if log is not None:
        await log.record(server or server_name(client), name, created.task_id, arguments)
    task = ToolTask(client, created.task_id, log=log, **options)
    await task._observe(state)
    return task
