"""Following one task from a handle: its states, its input, its cancellation.

`TaskFollower` is the part of `client.handles.ToolTask` that observes a task:
the latest known state (`state`, a DetailedTask dict), one `tasks/get`
(`status()`), each change (`updates()`, pushed over `subscriptions/listen` when
the client's `TasksClientExtension` can receive it, else polled no faster than
the latest `pollIntervalMs`, C62), answering `inputRequests` (`answer_input()`,
and while following when given an `InputAnswerer`), and `cancel()` (at most one
`tasks/cancel`). The first terminal state seen is final; a `TaskLog` drops the
task once it is seen terminal. `ToolTask` adds waiting and the result.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from typing import TYPE_CHECKING, Any, cast

import anyio
from mcp.shared.exceptions import MCPError

from fastmcp_tasks import _compat
from fastmcp_tasks.client.answers import InputAnswerer, InputHandler
from fastmcp_tasks.client.extension import CANCEL_GRACE, TasksClientExtension
from fastmcp_tasks.client.snapshot import TaskSnapshot
from fastmcp_tasks.client.watch import DEFAULT_RECONNECT_TIMEOUT, TaskWatch
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
    from fastmcp.client.client import CallToolResult

    from fastmcp_tasks.client.tasklog import TaskLog


class Default:
    """The type of `DEFAULT`: an option left to the client's `TasksClientExtension`."""

    def __repr__(self) -> str:
        return "DEFAULT"


#: `reconnect_timeout=DEFAULT`: the client's `TasksClientExtension(reconnect_timeout=)`.
DEFAULT = Default()

StatusChange = Callable[[TaskSnapshot], Awaitable[None] | None]
InputRejected = Callable[[MCPError], Awaitable[None] | None]


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


def reconnect_window(client: Client[Any], given: float | Default | None) -> float | None:
    """`given`, or for `DEFAULT` the client's `TasksClientExtension(reconnect_timeout=)`."""
    if not isinstance(given, Default):
        return given
    extension = tasks_extension(client)
    return DEFAULT_RECONNECT_TIMEOUT if extension is None else extension.reconnect_timeout


class TaskFollower:
    """The observing half of a task handle (see `client.handles.ToolTask` for the options)."""

    def __init__(
        self,
        client: Client[Any],
        task_id: str | None,
        *,
        state: TaskStateDict | None = None,
        tool_name: str | None = None,
        create_result: CreateTaskResult | None = None,
        raise_on_error: bool = True,
        version: str | None = None,
        on_status_change: StatusChange | None = None,
        on_input: InputHandler | None = None,
        on_input_rejected: InputRejected | None = None,
        min_poll_interval: float = 0.0,
        log: TaskLog | None = None,
        push: bool = True,
        reconnect_timeout: float | Default | None = DEFAULT,
    ) -> None:
        self.client = client
        self.task_id = task_id
        self.tool_name = tool_name
        self.raise_on_error = raise_on_error
        self.version = version
        self.push = push
        self.reconnect_timeout = reconnect_timeout
        self.state: TaskStateDict = state.copy() if state else cast(TaskStateDict, {})
        self.on_status_change = on_status_change
        self.on_input = on_input
        self.on_input_rejected = on_input_rejected
        self.min_poll_interval = min_poll_interval
        self.log = log
        self._create_result = create_result
        self._cancel_sent = False
        self._reported: tuple[Any, ...] | None = None
        self._answered: set[str] = set()
        self._result: CallToolResult | None = None
        self._driving = anyio.Lock()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.task_id!r}, status={self.state.get('status')!r})"

    @property
    def done(self) -> bool:
        """Whether the latest known state is terminal."""
        return self.state.get("status") in TERMINAL_STATUSES

    async def status(self) -> TaskSnapshot:
        """The task's current state, with one `tasks/get`."""
        if self.task_id is not None:
            await self._observe(await self._watch().get())
        return TaskSnapshot(self.state)

    async def updates(self) -> AsyncIterator[TaskSnapshot]:
        """Yield the task's state each time it changes, ending with the terminal one.

        The latest known state comes first; later ones are pushed by the server when
        it serves `subscriptions/listen`, or polled no faster than its `pollIntervalMs`
        (and `min_poll_interval`). With `on_input`, input requests are answered on the
        way (the client's `elicitation_handler` is not used here: see `result()`).
        """
        answerer = InputAnswerer(self.on_input, strict=False) if self.on_input else None
        async with aclosing(self._follow(answerer)) as states:
            async for state in states:
                yield TaskSnapshot(state)

    async def cancel(self) -> None:
        """Ask the server to cancel the task (at most one `tasks/cancel` per handle).

        Nothing is sent for a task already known to be terminal or answered synchronously.
        Cancellation is cooperative: the task may still finish first.
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
        answerer = InputAnswerer(self.on_input, strict=False)
        return await answerer.answer(self.client.session, self.task_id, requests, self._answered)

    async def _cancel_on_the_way_out(self) -> None:
        with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_GRACE):
            try:
                await self.cancel()
            except Exception:  # best effort: the caller is already leaving
                pass

    async def _follow(self, answerer: InputAnswerer | None) -> AsyncGenerator[TaskStateDict, None]:
        """Each new state (a copy), the latest known first, ending with the terminal one."""
        last: tuple[Any, ...] | None = None
        if not self.state or _missing_outcome(self.state):  # C76: fetch the outcome once
            await self.status()
        state = self.state
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
                if state.get("status") == "input_required" and answerer is not None:
                    requests = state.get("inputRequests") or {}
                    try:
                        await answerer.answer(
                            self.client.session, self.task_id, requests, self._answered
                        )
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
            with anyio.CancelScope(shield=True):
                await watch.close()

    def _final(self) -> bool:
        return self.done and not _missing_outcome(self.state)

    def _watch(self) -> TaskWatch:
        extension = tasks_extension(self.client)
        reconnect = reconnect_window(self.client, self.reconnect_timeout)
        return TaskWatch(
            self.client.session,
            str(self.task_id),
            extension=extension,
            push=self.push,
            min_poll_interval=self.min_poll_interval,
            reconnect_timeout=reconnect,
            server=str(url) if (url := getattr(self.client.transport, "url", None)) else None,
        )

    async def _observe(self, state: TaskStateDict) -> None:
        if self._final():
            return  # the first terminal state seen is final
        self.state = state
        key = _change_key(state)
        if key != self._reported:
            self._reported = key
            if self.on_status_change is not None:
                outcome = self.on_status_change(TaskSnapshot(state))
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
