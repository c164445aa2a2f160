"""Rendering tasks for the wire: DetailedTask dicts, `CreateTaskResult`, timestamps, ids.

The hot paths (`tasks/get`, task creation, pushed notifications) render plain
dicts here; the test suite checks them against `wire.models` and the official
schema. A task is anything shaped like `RenderableTask` (a store's `TaskRecord`
is one), so the wire never imports the stores.
"""

from __future__ import annotations

import functools
import time
from typing import Any, Protocol

#: Longest id `could_be_task_id` accepts; ours are 32 characters.
MAX_TASK_ID_LENGTH = 256


def could_be_task_id(text: str) -> bool:
    """Whether `text` could name a task at all: printable ASCII, 1-256 characters.

    Ids are minted by the server (`secrets.token_urlsafe`), so anything else is
    answered "not found" without asking the store (a lone surrogate, say, could not
    even be sent to Redis or SQLite).
    """
    return 0 < len(text) <= MAX_TASK_ID_LENGTH and text.isascii() and text.isprintable()


class RenderableTask(Protocol):
    """The fields of a stored task the wire shows (`stores.base.TaskRecord` has them)."""

    @property
    def task_id(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def created_at(self) -> float: ...
    @property
    def updated_at(self) -> float: ...
    @property
    def status_message(self) -> str | None: ...
    @property
    def poll_interval_ms(self) -> int | None: ...
    @property
    def retention_ms(self) -> int | None: ...
    @property
    def terminal_at(self) -> float | None: ...
    @property
    def result(self) -> dict[str, Any] | None: ...
    @property
    def error(self) -> dict[str, Any] | None: ...
    @property
    def input_requests(self) -> dict[str, Any] | None: ...


@functools.lru_cache(maxsize=4096)
def _second(seconds: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))


def rfc3339(timestamp: float) -> str:
    """Epoch seconds as an RFC 3339 UTC timestamp with milliseconds."""
    seconds = int(timestamp)
    millis = int((timestamp - seconds) * 1000)
    return f"{_second(seconds)}.{millis:03d}Z"


def ttl_ms(record: RenderableTask, now: float) -> int | None:
    """`ttlMs` measured from `createdAt`: the time already lived plus the retention.

    A task never expires while it runs, so while active the value grows with
    the task; once terminal it is fixed at `(terminal time - createdAt) + retention`.
    `None` (unlimited) when the store keeps tasks forever.
    """
    if record.retention_ms is None:
        return None
    end = record.terminal_at if record.terminal_at is not None else now
    return max(0, int((end - record.created_at) * 1000)) + record.retention_ms


def render_task(record: RenderableTask, now: float | None = None) -> dict[str, Any]:
    """The DetailedTask for `record`, as `tasks/get` returns it (without `resultType`)."""
    if now is None:
        now = time.time()
    task: dict[str, Any] = {
        "taskId": record.task_id,
        "status": record.status,
        "createdAt": rfc3339(record.created_at),
        "lastUpdatedAt": rfc3339(record.updated_at),
        "ttlMs": ttl_ms(record, now),
    }
    if record.status_message is not None:
        task["statusMessage"] = record.status_message
    if record.poll_interval_ms is not None:
        task["pollIntervalMs"] = record.poll_interval_ms
    status = record.status
    if status == "completed":
        task["result"] = record.result
    elif status == "failed":
        task["error"] = record.error
    elif status == "input_required":
        task["inputRequests"] = record.input_requests or {}
    return task


def render_get_result(record: RenderableTask) -> dict[str, Any]:
    """The `tasks/get` result: the DetailedTask with `resultType: "complete"`."""
    task = render_task(record)
    task["resultType"] = "complete"
    return task


def render_create_result(record: RenderableTask) -> dict[str, Any]:
    """The `CreateTaskResult`: base task fields only, never a result or an error inline."""
    task: dict[str, Any] = {
        "resultType": "task",
        "taskId": record.task_id,
        "status": record.status,
        "createdAt": rfc3339(record.created_at),
        "lastUpdatedAt": rfc3339(record.updated_at),
        "ttlMs": ttl_ms(record, record.created_at),
    }
    if record.status_message is not None:
        task["statusMessage"] = record.status_message
    if record.poll_interval_ms is not None:
        task["pollIntervalMs"] = record.poll_interval_ms
    return task
