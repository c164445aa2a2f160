"""The SEP-2663 wire: what every message of the tasks extension looks like.

`wire.names` owns the names (extension id, methods, statuses, the ACK),
`wire.models` the pydantic shapes (params, results, typed requests and the
pushed notification), `wire.render` the hot-path dict renderer. This package
imports nothing else of `fastmcp_tasks`, so anything may depend on it.
"""

from __future__ import annotations

from fastmcp_tasks.wire.models import (
    CancelTaskRequest,
    CreateTaskResult,
    DetailedTaskModel,
    GetTaskRequest,
    GetTaskResult,
    TaskIdParams,
    TaskModel,
    TaskState,
    TaskStateDict,
    TaskStatusNotification,
    UpdateTaskParams,
    UpdateTaskRequest,
    _WireModel,
    task_notification,
)
from fastmcp_tasks.wire.names import (
    ACK,
    ACTIVE_STATUSES,
    METHOD_CANCEL,
    METHOD_GET,
    METHOD_LISTEN,
    METHOD_UPDATE,
    NOTIFICATION_TASKS,
    TASKS_EXTENSION_ID,
    TERMINAL_STATUSES,
    TaskStatus,
)
from fastmcp_tasks.wire.render import (
    MAX_TASK_ID_LENGTH,
    RenderableTask,
    _second,
    could_be_task_id,
    render_create_result,
    render_get_result,
    render_task,
    rfc3339,
    ttl_ms,
)

__all__ = [
    "ACK",
    "ACTIVE_STATUSES",
    "MAX_TASK_ID_LENGTH",
    "METHOD_CANCEL",
    "METHOD_GET",
    "METHOD_LISTEN",
    "METHOD_UPDATE",
    "NOTIFICATION_TASKS",
    "TASKS_EXTENSION_ID",
    "TERMINAL_STATUSES",
    "CancelTaskRequest",
    "CreateTaskResult",
    "DetailedTaskModel",
    "GetTaskRequest",
    "GetTaskResult",
    "RenderableTask",
    "TaskIdParams",
    "TaskModel",
    "TaskState",
    "TaskStateDict",
    "TaskStatus",
    "TaskStatusNotification",
    "UpdateTaskParams",
    "UpdateTaskRequest",
    "_WireModel",
    "_second",
    "could_be_task_id",
    "render_create_result",
    "render_get_result",
    "render_task",
    "rfc3339",
    "task_notification",
    "ttl_ms",
]
