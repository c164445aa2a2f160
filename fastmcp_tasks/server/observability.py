"""What operators see: a span per task run, task metrics, a log line per transition.

Everything goes through the OpenTelemetry API (a FastMCP dependency), so it
costs next to nothing until the application installs an OpenTelemetry SDK and
exporters (until then a run makes no span at all: `task_span`); spans come from
FastMCP's own tracer and so honour its telemetry settings.

- Span `task <tool>` around each run, with `mcp.task.id`, `mcp.tool.name`,
  `mcp.task.attempt`, `fastmcp_tasks.store` (the store's description, masked:
  `stores.urls.describe`) and, when it ends, `mcp.task.status`.
- Metrics (meter `fastmcp_tasks`): counter `fastmcp_tasks.tasks.created`,
  counter `fastmcp_tasks.tasks.finished` (attribute `status`: completed,
  failed, cancelled), histogram `fastmcp_tasks.task.duration` (seconds, from
  start of run to its end), up-down counters `fastmcp_tasks.tasks.queued`
  and `fastmcp_tasks.tasks.parked` (waiting for a slot, waiting for input).
- Logger `fastmcp_tasks.transitions`: one INFO line per status change, with
  `task_id`, `tool`, `status` and `attempt` as record attributes.

Task ids in logs and spans. On a server without authentication a task id is the
bearer credential of its task (SECURITY.md), and logs travel further than the
id should. There every log line and span attribute of this package carries
`shown_id(task_id)`: a short fingerprint (`#` and 12 hex digits of SHA-256, not
reversible) that still tells tasks apart and can be matched to an id the
operator has (`fingerprint(id)`). With authentication on (the extension sees
`server.auth`), where a task id alone grants nothing, the full id is logged.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fastmcp.telemetry import get_tracer
from opentelemetry import metrics, trace
from opentelemetry.trace import NonRecordingSpan, ProxyTracerProvider, Span

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


_full_ids = False


def log_full_ids(enabled: bool) -> None:
    """Whether logs and spans carry full task ids (authenticated servers) or fingerprints."""
    global _full_ids
    _full_ids = enabled


def fingerprint(task_id: str) -> str:
    """A short, non-reversible stand-in for a task id in logs: `#` + 12 hex digits."""
    return "#" + hashlib.sha256(task_id.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def shown_id(task_id: str) -> str:
    """The task id as logs and spans show it (see the module docstring)."""
    return task_id if _full_ids else fingerprint(task_id)


def tracing_installed() -> bool:
    """Whether spans can be recorded: an OpenTelemetry SDK (or another tracer provider) is
    installed, in code or by `OTEL_PYTHON_TRACER_PROVIDER`. Until then the API answers
    with its proxy provider, whose spans carry the current span's context and record
    nothing."""
    return not isinstance(trace.get_tracer_provider(), ProxyTracerProvider)


@contextmanager
def task_span(task_id: str, tool: str, attempt: int, store: str = "") -> Iterator[Span]:
    """The span of one run of a task; `store` is the store's (masked) description.

    Without a tracer provider (`tracing_installed`) nothing is made or attached (no
    attributes, no fingerprint, no context switch): the run keeps the current context and
    gets the span the API's no-op tracer would give it, one that records nothing and
    carries the current span's context (never the current span itself: one recording in
    an application's own provider must not get this run's attributes)."""
    if not tracing_installed():
        current = trace.get_current_span()
        if isinstance(current, NonRecordingSpan):
            yield current
        else:
            yield NonRecordingSpan(current.get_span_context())
        return
    attributes: dict[str, Any] = {
        "mcp.task.id": shown_id(task_id),
        "mcp.tool.name": tool,
        "mcp.task.attempt": attempt,
    }
    if store:
        attributes["fastmcp_tasks.store"] = store
    with get_tracer().start_as_current_span(f"task {tool}", attributes=attributes) as span:
        yield span


def transition(task_id: str, tool: str, status: str, attempt: int = 1, **details: Any) -> None:
    """Record one status change: the log line, and `finished` for terminal ones."""
    if transition_logger.isEnabledFor(logging.INFO):  # else no fingerprint to compute
        shown = shown_id(task_id)
        transition_logger.info(
            "task %s (%s) -> %s",
            shown,
            tool,
            status,
            extra={"task_id": shown, "tool": tool, "status": status, "attempt": attempt, **details},
        )
    if status in ("completed", "failed", "cancelled"):
        finished.add(1, {"status": status, "tool": tool})
