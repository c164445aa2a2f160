"""The SEP-2663 wire shapes: request params, result models, request and notification types.

The pydantic models (camelCase aliases) document and validate the shapes; the
hot paths render plain dicts with `wire.render`, which the test suite checks
against these models and against the official schema. The typed requests
(`GetTaskRequest`, `UpdateTaskRequest`, `CancelTaskRequest`) are what the client
sends; `TaskStatusNotification` is what the server pushes on a listen stream.
"""

from __future__ import annotations

from typing import Any, Literal, Required, TypedDict

from mcp_types import Notification, NotificationParams, Request, RequestParams, Result
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_serializer
from pydantic.alias_generators import to_camel

from fastmcp_tasks.wire.names import NOTIFICATION_TASKS, TaskStatus

# --- request params -------------------------------------------------------------


class TaskStateDict(TypedDict, total=False):
    """A task as the client sees it: the DetailedTask fields of `tasks/get` or of a
    `notifications/tasks` push (`resultType` and `_meta` left out).

    `result` is the completed `CallToolResult` and `error` the JSON-RPC error of a
    failed task, both as JSON objects; `inputRequests` maps keys to the requests of a
    task in `input_required`.
    """

    taskId: Required[str]
    status: Required[str]
    createdAt: str
    lastUpdatedAt: str
    ttlMs: int | None
    pollIntervalMs: int
    statusMessage: str
    result: dict[str, Any]
    error: dict[str, Any]
    inputRequests: dict[str, dict[str, Any]]


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

    result_type: Literal["task"] = "task"


class GetTaskResult(Result, DetailedTaskModel):
    """`tasks/get`: a DetailedTask with `resultType: "complete"`."""

    result_type: Literal["complete"] = "complete"


# --- requests and notifications -------------------------------------------------


class GetTaskRequest(Request[TaskIdParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    name_param = "taskId"


class CancelTaskRequest(Request[TaskIdParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    name_param = "taskId"


class UpdateTaskRequest(Request[UpdateTaskParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    name_param = "taskId"


class TaskState(Result):
    """A `tasks/get` result, kept as the raw DetailedTask fields."""

    model_config = ConfigDict(extra="allow")


class _TaskNotificationParams(NotificationParams):
    """`notifications/tasks` params as the client receives them (any task fields)."""

    model_config = ConfigDict(extra="allow")


class _Verbatim(NotificationParams):
    """Notification params dumped exactly as rendered (keeps `ttlMs: null`)."""

    _payload: dict[str, Any] = PrivateAttr(default_factory=dict)

    @model_serializer
    def _dump(self) -> dict[str, Any]:
        return self._payload


class TaskStatusNotification(Notification[_Verbatim, Literal["notifications/tasks"]]):
    method: Literal["notifications/tasks"] = NOTIFICATION_TASKS


def task_notification(task: dict[str, Any], meta: dict[str, Any]) -> TaskStatusNotification:
    """The `notifications/tasks` message carrying a rendered task, verbatim."""
    params = _Verbatim()
    params._payload = {"_meta": meta, **task}
    return TaskStatusNotification(params=params)
