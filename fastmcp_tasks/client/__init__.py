"""The client half: resolve tasks behind `fastmcp.Client.call_tool()`, or hold them.

`client.extension` owns `TasksClientExtension` (the transparent resolver);
`client.watch` follows one task (`tasks/get` with retries, pushed states);
`client.answers` answers a task's input requests; `client.handles` the explicit
`ToolTask` handles and `call_tool_task`, `client.drive` what a handle sends and
returns, `client.snapshot` the `TaskSnapshot` they report; `client.http` the
retrying Streamable HTTP transport (public as `fastmcp_tasks.client_http`);
`client.tasklog` the local log of task handles. This package exports what
`fastmcp_tasks.client` always has, plus `ToolTask`, `call_tool_task` and
`TaskSnapshot` where the official package has them
(`from fastmcp_tasks.client import ToolTask, call_tool_task`).
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
from fastmcp_tasks.client.handles import ToolTask, call_tool_task
from fastmcp_tasks.client.snapshot import TaskSnapshot

__all__ = [
    "DEFAULT_POLL_SECONDS",
    "LISTEN_TIMEOUT",
    "SAFETY_POLL",
    "CancelTaskRequest",
    "GetTaskRequest",
    "InputHandler",
    "StatusCallback",
    "TaskSnapshot",
    "TaskState",
    "TaskStateDict",
    "TasksClientExtension",
    "ToolTask",
    "UpdateTaskRequest",
    "call_tool_task",
    "register_transparent_client",
    "task_outcome",
]
