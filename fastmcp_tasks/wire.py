"""The SEP-2663 wire: names, request params, result models and the task renderer.

Everything that decides what a message looks like on the wire lives here. The
pydantic models (camelCase aliases) document and validate the shapes; the hot
paths (`tasks/get`, task creation) render plain dicts with `render_task`, which
the test suite checks against these models and against the official schema.
"""

from __future__ import annotations

import functools
import time
from typing import TYPE_CHECKING, Any, Literal

from mcp_types import RequestParams, Result
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

if TYPE_CHECKING:
    from fastmcp_tasks.stores.base import TaskRecord

#: Reverse-DNS identifier of the extension (same string as FastMCP core's).
TASKS_EXTENSION_ID = "io.modelcontextprotocol/tasks"

TaskStatus = Literal["working", "input_required", "completed", "failed", "cancelled"]
ACTIVE_STATUSES: frozenset[str] = frozenset({"working", "input_required"})
TERMINAL_STATUSES: frozenset[str] = frozenset({"completed", "failed", "cancelled"})

METHOD_GET = "tasks/get"
METHOD_UPDATE = "tasks/update"
METHOD_CANCEL = "tasks/cancel"
NOTIFICATION_TASKS = "notifications/tasks"


# --- request params -------------------------------------------------------------


#: Longest id `could_be_task_id` accepts; ours are 32 characters.
MAX_TASK_ID_LENGTH = 256


def could_be_task_id(text: str) -> bool:
    """Whether `text` could name a task at all: printable ASCII, 1-256 characters.

    Ids are minted by the server (`secrets.token_urlsafe`), so anything else is
    answered "not found" without asking the store (a lone surrogate, say, could not
    even be sent to Redis or SQLite).
    """
    return 0 < len(text) <= MAX_TASK_ID_LENGTH and text.isascii() and text.isprintable()


class TaskIdParams(RequestParams):
    """`tasks/get` and `tasks/cancel` params: `{taskId, _meta}`."""

    task_id: str = Field(alias="taskId")


class UpdateTaskParams(TaskIdParams):
    """`tasks/update` params: `{taskId, inputResponses, _meta}`.

    Answers stay raw JSON objects here: keys that are not outstanding must be
    acked and ignored (C35) whatever their shape, so shape checks belong to the
    keys the task is actually waiting on.
    """

    input_responses: dict[str, Any] = Field(alias="inputResponses")


# --- result models (documentation and tests; the hot path renders dicts) --------


class _WireModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")


class TaskModel(_WireModel):
    """The common task fields ("T" in the spec)."""

    task_id: str
    status: TaskStatus
    status_message: str | None = None
    created_at: str
    last_updated_at: str
    ttl_ms: int | None
    poll_interval_ms: int | None = None


class DetailedTaskModel(TaskModel):
    """A task with its status payload inline, as `tasks/get` and notifications carry it."""

    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    input_requests: dict[str, Any] | None = None


class CreateTaskResult(Result, TaskModel):
    """`tools/call` answered with a task: flat `Result & Task`, `resultType: "task"`."""

    result_type: Literal["task"] = "task"  # type: ignore[assignment]


class GetTaskResult(Result, DetailedTaskModel):
    """`tasks/get`: a DetailedTask with `resultType: "complete"`."""

    result_type: Literal["complete"] = "complete"  # type: ignore[assignment]


ACK: dict[str, Any] = {"resultType": "complete"}
"""The empty acknowledgement of `tasks/update` and `tasks/cancel`."""


# --- rendering ---------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def _second(seconds: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))


def rfc3339(timestamp: float) -> str:
    """Epoch seconds as an RFC 3339 UTC timestamp with milliseconds."""
    seconds = int(timestamp)
    millis = int((timestamp - seconds) * 1000)
    return f"{_second(seconds)}.{millis:03d}Z"


def ttl_ms(record: TaskRecord, now: float) -> int | None:
    """`ttlMs` measured from `createdAt`: the time already lived plus the retention.

    A task never expires while it runs, so while active the value grows with
    the task; once terminal it is fixed at `(terminal time - createdAt) + retention`.
    `None` (unlimited) when the store keeps tasks forever.
    """
    if record.retention_ms is None:
        return None
    end = record.terminal_at if record.terminal_at is not None else now
    return max(0, int((end - record.created_at) * 1000)) + record.retention_ms


def render_task(record: TaskRecord, now: float | None = None) -> dict[str, Any]:
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


def render_get_result(record: TaskRecord) -> dict[str, Any]:
    """The `tasks/get` result: the DetailedTask with `resultType: "complete"`."""
    task = render_task(record)
    task["resultType"] = "complete"
    return task


def render_create_result(record: TaskRecord) -> dict[str, Any]:
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
