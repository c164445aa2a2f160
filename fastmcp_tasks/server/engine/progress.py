"""The `Progress` dependency: a tool's progress becomes its task's `statusMessage`.

`fastmcp_tasks.Progress` subclasses core's `fastmcp.dependencies.Progress`, so
a tool written against either import type-checks and behaves the same. Inside
a task it writes through `TaskProgress` to the task's status; outside a task it
falls back to core's behaviour (in-memory tracking that reports nowhere). For a
2025-11-25 call with a `progressToken`, each `increment` is also one
`notifications/progress` (current, total, message) to it, as `ctx.report_progress`
sends: a progress value must grow from one notification to the next, so
`set_total` and `set_message` move only the status.

Core's `Progress.__aenter__` has no hook for a task engine other than docket,
so `install_core_progress_adapter()` wraps that one method (through the
`_compat` seam): inside a task the wrapped method returns a `TaskProgress`-backed
instance, anywhere else it calls the original unchanged. The wrap is idempotent
and installed at import of `fastmcp_tasks`, so core's `Progress` reports into
tasks whatever is built first; `_compat.check_seams()` refuses a FastMCP that
moved the method.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from fastmcp_tasks import _compat
from fastmcp_tasks.server.engine.context import RunningTask, current_task

logger = logging.getLogger("fastmcp_tasks.progress")

CoreProgress = _compat.CoreProgress


class TaskProgress:
    """A `ProgressLike` that reports into a running task's `statusMessage`.

    The message wins when one is set; otherwise the counts show as "3/10".
    """

    def __init__(self, running: RunningTask) -> None:
        self._running = running
        self._current: int | None = None
        self._total: int = 1
        self._message: str | None = None

    @property
    def current(self) -> int | None:
        return self._current

    @property
    def total(self) -> int:
        return self._total

    @property
    def message(self) -> str | None:
        return self._message

    async def set_total(self, total: int) -> None:
        if total < 1:
            raise ValueError("Total must be at least 1")
        self._total = total
        await self._publish()

    async def increment(self, amount: int = 1) -> None:
        if amount < 1:
            raise ValueError("Amount must be at least 1")
        self._current = (self._current or 0) + amount
        await self._running.report(self._current, self._total, self._message, self._shown())

    async def set_message(self, message: str | None) -> None:
        self._message = message
        await self._publish()

    def _shown(self) -> str:
        return self._message or f"{self._current or 0}/{self._total}"

    async def _publish(self) -> None:
        await self._running.status(self._shown())


def _task_bound(cls: type[CoreProgress]) -> CoreProgress | None:
    """A fresh `cls` instance reporting into the current task, or None outside one."""
    running = current_task()
    if running is None:
        return None
    instance = cls()
    _compat.bind_progress(instance, TaskProgress(running))
    return instance


class Progress(CoreProgress):
    """Progress dependency for tools: `progress: Progress = Progress()`.

    Inside a task, `set_total`, `increment` and `set_message` update the task's
    `statusMessage`; outside a task it behaves like core's `Progress`.
    """

    async def __aenter__(self) -> Progress:
        bound = _task_bound(type(self))
        if bound is not None:
            return bound  # type: ignore[return-value]
        return await super().__aenter__()  # type: ignore[return-value]


_ADAPTED = "__fastmcp_tasks_adapted__"


def install_core_progress_adapter() -> bool:
    """Make core's `fastmcp.dependencies.Progress` report into tasks. Idempotent.

    Returns False (and logs a warning) when core's `Progress` no longer has the
    shape this adapter relies on; our own `Progress` keeps working either way.
    """
    original = _compat.core_progress_aenter()
    if original is None:
        logger.warning(
            "fastmcp.dependencies.Progress has no __aenter__ of its own; core Progress "
            "will not feed task statusMessage (use fastmcp_tasks.Progress)"
        )
        return False
    if getattr(original, _ADAPTED, False):
        return True

    @functools.wraps(original)
    async def __aenter__(self: Any) -> Any:
        bound = _task_bound(type(self))
        if bound is not None:
            return bound
        return await original(self)

    setattr(__aenter__, _ADAPTED, True)
    _compat.set_core_progress_aenter(__aenter__)
    return True


def core_progress_adapted() -> bool:
    """Whether core's `Progress` currently reports into tasks."""
    return bool(getattr(_compat.core_progress_aenter(), _ADAPTED, False))
