"""The client half: resolve tasks behind `fastmcp.Client.call_tool()`, or hold them.

`client.extension` owns `TasksClientExtension` (the transparent resolver);
`client.watch` follows one task (`tasks/get` with retries, pushed states);
`client.handles` the explicit `ToolTask` handles; `client.http` the retrying
Streamable HTTP transport (public as `fastmcp_tasks.client_http`);
`client.tasklog` the local log of task handles. This package exports what
`fastmcp_tasks.client` always has.
"""

from __future__ import annotations

from fastmcp_tasks.client.extension import (
    DEFAULT_POLL_SECONDS,
    LISTEN_TIMEOUT,
    SAFETY_POLL,
    CancelTaskRequest,
    GetTaskRequest,
    InputHandler,
    StatusCallback,
    TasksClientExtension,
    TaskState,
    TaskStateDict,
    UpdateTaskRequest,
    register_transparent_client,
    task_outcome,
)

__all__ = [
    "DEFAULT_POLL_SECONDS",
    "LISTEN_TIMEOUT",
    "SAFETY_POLL",
    "CancelTaskRequest",
    "GetTaskRequest",
    "InputHandler",
    "StatusCallback",
    "TaskState",
    "TaskStateDict",
    "TasksClientExtension",
    "UpdateTaskRequest",
    "register_transparent_client",
    "task_outcome",
]
