"""The Context a tool sees while it runs as a task.

A task has no live request: core's `Context` would raise on logging (no
session), drop progress (no docket) and refuse `elicit`. `TaskContext` keeps
the tool's code unchanged in both modes:

- `report_progress(progress, total, message)` becomes the task's `statusMessage`
  (the message, or "3/10" when only numbers are given) and, for a 2025-11-25 call
  with a `progressToken` taken in this process, a `notifications/progress` to it
  (`caller.Caller.report_progress`);
- `log()` and `debug/info/warning/error` go to the server's logger
  (`fastmcp_tasks.tool`), never to a client, and never fail the task;
- `elicit(message, response_type)` sends the same `elicitation/create` params a
  foreground call would, as an `inputRequests` entry: the task waits in
  `input_required` (the coroutine is parked, nothing re-runs) and the call
  returns the same `AcceptedElicitation` / `DeclinedElicitation` /
  `CancelledElicitation` once the client answers with `tasks/update`.

`RunningTask` is the narrow handle a running task uses to write its own status
and ask for input; `current_task()` finds it from dependency code (`Progress`).

A `TaskContext` is entered for the server the tool lives on (a mounted child's
own server, one per mount level), so `ctx.fastmcp`, `get_server()` and
`CurrentFastMCP()` resolve there as in the foreground. `install_core_hooks()`
gives core's background hooks the same answers: `get_server()` inside a task
and a `ctx: Context` resolved where no Context is current get the task's.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from typing import Any

import mcp_types
from fastmcp.exceptions import ToolError
from fastmcp.server.context import Context
from fastmcp.server.dependencies import set_background_context_factory, set_worker_server_resolver
from fastmcp.server.elicitation import (
    CancelledElicitation,
    DeclinedElicitation,
    handle_elicit_accept,
    parse_elicit_response_type,
)

from fastmcp_tasks import _compat
from fastmcp_tasks.errors import StoreError
from fastmcp_tasks.server import observability
from fastmcp_tasks.server.engine.caller import Caller
from fastmcp_tasks.server.engine.history import HistoryWriter
from fastmcp_tasks.server.engine.inputs import InputBroker, elicitation_request, new_key
from fastmcp_tasks.server.engine.steps import StepRun
from fastmcp_tasks.stores.base import TaskStore
from fastmcp_tasks.stores.settling import settle_message

tool_logger = logging.getLogger("fastmcp_tasks.tool")
logger = logging.getLogger("fastmcp_tasks.runner")

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "notice": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
    "alert": logging.CRITICAL,
    "emergency": logging.CRITICAL,
}


@dataclass(eq=False)
class RunningTask:
    """One task while its tool runs: writes its `statusMessage`, asks for input.

    `message` is the status message the task has now; writes that would not
    change it are skipped. `input_kinds` are the capabilities (`elicitation`,
    `sampling`, `roots`) the creating request declared (C31).
    """

    store: TaskStore
    task_id: str
    tool: str
    message: str | None = None
    broker: InputBroker | None = None
    input_timeout: float | None = None
    input_kinds: frozenset[str] = field(default_factory=frozenset)
    #: where progress also goes (a 2025-11-25 caller's `progressToken`), in this process
    caller: Caller | None = None
    #: the related task ids its call named, checked at creation (`server.related`)
    related: tuple[str, ...] = ()
    #: where its status messages are noted (coalesced: `history`)
    history: HistoryWriter | None = None
    #: this run's durable steps (`steps`): recorded before, and used so far
    steps: StepRun = field(default_factory=StepRun)

    async def status(self, message: str | None) -> None:
        """Set the task's `statusMessage`; best effort: a store failure never fails the tool.

        A message the store did not take is not remembered, so the next report retries.
        """
        if message == self.message:
            return
        try:
            await settle_message(self.store, self.task_id, message)  # reads nothing back
        except StoreError as exc:
            logger.debug(
                "Status of task %s not written (%s); the next one retries",
                observability.shown_id(self.task_id),
                exc,
            )
            return
        self.message = message
        if self.history is not None:
            self.history.message(self.task_id, message)

    async def report(
        self, progress: float, total: float | None, message: str | None, shown: str | None = None
    ) -> None:
        """One progress report: the `statusMessage` (`shown`, else `progress_message`), then
        the caller's `notifications/progress` (a 2025-11-25 call's `progressToken`, in this
        process; none otherwise)."""
        await self.status(progress_message(progress, total, message) if shown is None else shown)
        if self.caller is not None:
            await self.caller.report_progress(self.task_id, progress, total, message)

    async def ask(self, requests: dict[str, dict[str, Any]], status: str | None) -> dict[str, Any]:
        """Park the task on `requests`; the answers that arrived before the timeout."""
        if self.broker is None:  # pragma: no cover - the runner always sets one
            raise ToolError("This task cannot ask for input")
        self.message = status
        observability.parked.add(1)
        try:
            return await self.broker.ask(
                self.task_id, requests, wait_seconds=self.input_timeout, status_message=status
            )
        except LookupError as exc:
            raise ToolError(str(exc)) from None
        finally:
            observability.parked.add(-1)
            self.message = None  # answered: the store cleared the message


_current_task: ContextVar[RunningTask | None] = ContextVar("fastmcp_tasks_task", default=None)
#: the server the running task's tool lives on (the innermost `TaskContext`'s)
_task_server: ContextVar[Any] = ContextVar("fastmcp_tasks_server", default=None)


def current_task() -> RunningTask | None:
    """The task running in this coroutine, or `None` outside a task."""
    return _current_task.get()


def progress_message(progress: float, total: float | None, message: str | None) -> str:
    """The `statusMessage` for a progress report."""
    if message:
        return message
    if total is not None:
        return f"{progress:g}/{total:g}"
    return f"{progress:g}"


#: What a client that cannot answer input lacks, as a fastmcp `Client` sees it: the words
#: code written for the official package matches (`match="no elicitation handler"`).
NO_HANDLER_HINT = (
    "a client with no elicitation handler declares none: pass elicitation_handler= to Client(...)"
)
NO_ELICITATION = (
    "ctx.elicit() inside this task needs a client that can answer it: the tools/call "
    f"that created the task did not declare the elicitation capability ({NO_HANDLER_HINT})"
)


class TaskContext(Context):
    """The `Context` handed to a tool running as a task (`is_background_task` is True)."""

    def __init__(
        self,
        fastmcp: Any,
        running: RunningTask,
        input_responses: mcp_types.InputResponses | None = None,
        request_state: str | None = None,
        *,
        scoped_state: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(fastmcp, task_id=running.task_id)
        self._running = running
        self._guard_responses = input_responses
        self._guard_state = request_state
        self._server_tokens: list[Token[Any]] = []
        if scoped_state is not None:  # the creating request's, in the accepting process
            _compat.adopt_request_state(self, scoped_state)

    async def __aenter__(self) -> TaskContext:
        await super().__aenter__()
        self._server_tokens.append(_task_server.set(self.fastmcp))
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        if self._server_tokens:
            _task_server.reset(self._server_tokens.pop())
        await super().__aexit__(*exc_info)

    @property
    def input_responses(self) -> mcp_types.InputResponses | None:
        """The answers of the guard round before (or gathered in the foreground, C11)."""
        return self._guard_responses

    @property
    def request_state(self) -> str | None:
        """The `requestState` the tool returned with its last `InputRequiredResult`."""
        return self._guard_state

    async def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        await self._running.report(progress, total, message)

    async def log(
        self,
        message: str,
        level: Any = None,
        logger_name: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        name = level or "info"
        logger = logging.getLogger(f"fastmcp_tasks.tool.{logger_name}") if logger_name else None
        shown = observability.shown_id(self._running.task_id)
        (logger or tool_logger).log(
            _LEVELS.get(str(name), logging.INFO),
            "[task %s %s] %s",
            shown,
            self._running.tool,
            message,
            extra={
                "task_id": shown,
                "tool": self._running.tool,
                "mcp_extra": dict(extra) if extra else None,
            },
        )

    async def elicit(
        self,
        message: str,
        response_type: Any = None,
        *,
        response_title: str | None = None,
        response_description: str | None = None,
    ) -> Any:
        config = parse_elicit_response_type(
            response_type,
            response_title=response_title,
            response_description=response_description,
        )
        if "elicitation" not in self._running.input_kinds:
            raise ToolError(NO_ELICITATION)
        key = new_key("elicit")
        answers = await self._running.ask(
            {key: elicitation_request(message, config.schema)}, status=message
        )
        answer = answers.get(key)
        if answer is None:  # no answer within the input timeout
            return CancelledElicitation()
        action = answer.get("action")
        if action == "accept":
            return handle_elicit_accept(config, answer.get("content") or {})
        if action == "decline":
            return DeclinedElicitation()
        return CancelledElicitation()


async def _background_context() -> Context | None:
    """Core's fallback for a `ctx: Context` resolved where no Context is current."""
    running, server = _current_task.get(), _task_server.get()
    if running is None or server is None:
        return None
    context = TaskContext(server, running)
    await context.__aenter__()
    return context


def install_core_hooks() -> None:
    """Answer core's background-task hooks from the running task (idempotent)."""
    set_worker_server_resolver(_task_server.get)
    set_background_context_factory(_background_context)
