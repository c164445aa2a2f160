"""Import names for code written against the official package's `fastmcp_tasks.client_models`.

    from fastmcp_tasks.client_models import ClientCreateTaskResult, ClientGetTaskResult

- `ClientCreateTaskResult` is our `CreateTaskResult` (`fastmcp_tasks.wire.models`): the
  same fields (`task_id`, `status`, `created_at`, ..., `result_type="task"`), what
  `ToolTask.create_result` holds.
- `ClientGetTaskResult` is our `TaskSnapshot` (`fastmcp_tasks.client.snapshot`): what
  `ToolTask.status()` and `ToolTask.wait()` return, with the same attribute names
  (`task_id`, `status`, `status_message`, `result`, `error`, `input_requests`, ...).
  It is a read-only mapping, not a pydantic model: `model_validate(dict)` and
  `model_dump()` exist, other pydantic methods do not.
- `TaskStatus` is the status literal; the request types are ours (`GetTaskRequest`,
  `UpdateTaskRequest`, `CancelTaskRequest`, with `TaskIdParams` / `UpdateTaskParams`
  as their params, which accept `task_id=` / `input_responses=` by field name).
"""

from __future__ import annotations

from fastmcp_tasks.client.snapshot import TaskSnapshot
from fastmcp_tasks.wire.models import (
    CancelTaskRequest,
    CreateTaskResult,
    GetTaskRequest,
    TaskIdParams,
    UpdateTaskParams,
    UpdateTaskRequest,
)
from fastmcp_tasks.wire.names import TaskStatus

ClientCreateTaskResult = CreateTaskResult
ClientGetTaskResult = TaskSnapshot
GetTaskRequestParams = TaskIdParams
CancelTaskRequestParams = TaskIdParams
UpdateTaskRequestParams = UpdateTaskParams

__all__ = [
    "CancelTaskRequest",
    "CancelTaskRequestParams",
    "ClientCreateTaskResult",
    "ClientGetTaskResult",
    "GetTaskRequest",
    "GetTaskRequestParams",
    "TaskStatus",
    "UpdateTaskRequest",
    "UpdateTaskRequestParams",
]
