"""The Context a tool sees while it runs as a task.

A task has no live request: core's `Context` would raise on logging (no
session), drop progress (no docket) and refuse `elicit`. `TaskContext` keeps
the tool's code unchanged in both modes:

- `report_progress(progress, total, message)` becomes the task's `statusMessage`
  (the message, or "3/10" when only numbers are given);
- `log()` and `debug/info/warning/error` go to the server's logger
  (`fastmcp_tasks.tool`), never to a client, and never fail the task.

`TaskReporter` is the narrow handle a running task uses to write its own
status; `current_task()` finds it from dependency code such as `Progress`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any

from fastmcp.server.context import Context

from fastmcp_tasks.stores.base import TaskStore

tool_logger = logging.getLogger("fastmcp_tasks.tool")

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


class TaskReporter:
    """Writes one running task's `statusMessage`, skipping writes that change nothing."""

    __slots__ = ("_last", "store", "task_id", "tool")

    def __init__(
        self, store: TaskStore, task_id: str, tool: str, message: str | None = None
    ) -> None:
        self.store = store
        self.task_id = task_id
        self.tool = tool
        self._last = message  # the statusMessage the task has now

    async def status(self, message: str | None) -> None:
        if message == self._last:
            return
        self._last = message
        await self.store.set_status_message(self.task_id, message)


_current_task: ContextVar[TaskReporter | None] = ContextVar("fastmcp_tasks_task", default=None)


def current_task() -> TaskReporter | None:
    """The task running in this coroutine, or `None` outside a task."""
    return _current_task.get()


def progress_message(progress: float, total: float | None, message: str | None) -> str:
    """The `statusMessage` for a progress report."""
    if message:
        return message
    if total is not None:
        return f"{progress:g}/{total:g}"
    return f"{progress:g}"


class TaskContext(Context):
    """The `Context` handed to a tool running as a task (`is_background_task` is True)."""

    def __init__(self, fastmcp: Any, reporter: TaskReporter) -> None:
        super().__init__(fastmcp, task_id=reporter.task_id)
        self._reporter = reporter

    async def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        await self._reporter.status(progress_message(progress, total, message))

    async def log(
        self,
        message: str,
        level: Any = None,
        logger_name: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        name = level or "info"
        logger = logging.getLogger(f"fastmcp_tasks.tool.{logger_name}") if logger_name else None
        (logger or tool_logger).log(
            _LEVELS.get(str(name), logging.INFO),
            "[task %s %s] %s",
            self._reporter.task_id,
            self._reporter.tool,
            message,
            extra={
                "task_id": self._reporter.task_id,
                "tool": self._reporter.tool,
                "mcp_extra": dict(extra) if extra else None,
            },
        )
