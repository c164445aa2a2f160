"""What operators see: a span per task run, task metrics, a log line per transition.

Everything goes through the OpenTelemetry API (a FastMCP dependency), so it
costs next to nothing until the application installs an OpenTelemetry SDK and
exporters; spans come from FastMCP's own tracer and so honour its telemetry
settings.

- Span `task <tool>` around each run, with `mcp.task.id`, `mcp.tool.name`,
  `mcp.task.attempt` and, when it ends, `mcp.task.status`.
- Metrics (meter `fastmcp_tasks`): counter `fastmcp_tasks.tasks.created`,
  counter `fastmcp_tasks.tasks.finished` (attribute `status`: completed,
  failed, cancelled), histogram `fastmcp_tasks.task.duration` (seconds, from
  start of run to its end), up-down counters `fastmcp_tasks.tasks.queued`
  and `fastmcp_tasks.tasks.parked` (waiting for a slot, waiting for input).
- Logger `fastmcp_tasks.transitions`: one INFO line per status change, with
  `task_id`, `tool`, `status` and `attempt` as record attributes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fastmcp.telemetry import get_tracer
from opentelemetry import metrics
from opentelemetry.trace import Span

transition_logger = logging.getLogger("fastmcp_tasks.transitions")

_meter = metrics.get_meter("fastmcp_tasks")
created = _meter.create_counter("fastmcp_tasks.tasks.created", description="tasks created")
finished = _meter.create_counter(
    "fastmcp_tasks.tasks.finished", description="tasks that reached a terminal status"
)
duration = _meter.create_histogram(
    "fastmcp_tasks.task.duration", unit="s", description="run time of a task, start to end"
)
queued = _meter.create_up_down_counter(
    "fastmcp_tasks.tasks.queued", description="tasks waiting for a worker slot in this process"
)
parked = _meter.create_up_down_counter(
    "fastmcp_tasks.tasks.parked", description="tasks waiting in input_required"
)


@contextmanager
def task_span(task_id: str, tool: str, attempt: int) -> Iterator[Span]:
    """The span of one run of a task."""
    attributes: dict[str, Any] = {
        "mcp.task.id": task_id,
        "mcp.tool.name": tool,
        "mcp.task.attempt": attempt,
    }
    with get_tracer().start_as_current_span(f"task {tool}", attributes=attributes) as span:
        yield span


def transition(task_id: str, tool: str, status: str, attempt: int = 1, **details: Any) -> None:
    """Record one status change: the log line, and `finished` for terminal ones."""
    transition_logger.info(
        "task %s (%s) -> %s",
        task_id,
        tool,
        status,
        extra={"task_id": task_id, "tool": tool, "status": status, "attempt": attempt, **details},
    )
    if status in ("completed", "failed", "cancelled"):
        finished.add(1, {"status": status, "tool": tool})
