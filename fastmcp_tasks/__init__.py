"""fastmcp-tasks: durable background tasks for FastMCP 4 servers (MCP tasks extension, SEP-2663).

from fastmcp import FastMCP
from fastmcp_tasks import TasksExtension

mcp = FastMCP("Reports")
mcp.add_extension(TasksExtension())

@mcp.tool(task=True)
async def render(pages: int) -> str: ...
"""

from __future__ import annotations

from fastmcp_tasks._compat import check_seams
from fastmcp_tasks.client.extension import register_transparent_client
from fastmcp_tasks.client.handles import ToolTask, call_tool_task
from fastmcp_tasks.client.http import install_as_default as install_default_http_client
from fastmcp_tasks.client.proxy import install_proxy_resolution
from fastmcp_tasks.client.snapshot import TaskSnapshot
from fastmcp_tasks.client.tasklog import TaskLog
from fastmcp_tasks.errors import (
    ConfigurationError,
    NotATask,
    StepLimitExceeded,
    StoreError,
    TaskCancelled,
    TaskFailed,
    TaskLimitExceeded,
    TasksError,
    TaskUnreachable,
)
from fastmcp_tasks.server.engine.context import install_core_hooks
from fastmcp_tasks.server.engine.progress import Progress, install_core_progress_adapter
from fastmcp_tasks.server.extension import TasksExtension
from fastmcp_tasks.server.flow import Retry
from fastmcp_tasks.server.health import EngineHealth
from fastmcp_tasks.server.limits import Limits
from fastmcp_tasks.server.options import task_options
from fastmcp_tasks.server.related import RelatedTask, RelatedTasks, related_tasks
from fastmcp_tasks.steps import StepNotRecorded, step
from fastmcp_tasks.stores import (
    MemoryTaskStore,
    SQLiteTaskStore,
    TaskRecord,
    TaskStore,
    store_from_url,
)
from fastmcp_tasks.wire.names import TASKS_EXTENSION_ID

__version__ = "0.1.0.dev0"

check_seams()  # before any seam is used: fail loudly on an incompatible FastMCP
register_transparent_client()
install_default_http_client()  # a failed POST fails its request, never the client's session
install_proxy_resolution()  # a FastMCP proxy in front of a tasks server returns the result
install_core_progress_adapter()  # core's `Progress` reports into tasks from import on
install_core_hooks()  # core's background-task hooks answer from the running task

__all__ = [
    "TASKS_EXTENSION_ID",
    "ConfigurationError",
    "EngineHealth",
    "Limits",
    "MemoryTaskStore",
    "NotATask",
    "Progress",
    "RelatedTask",
    "RelatedTasks",
    "Retry",
    "SQLiteTaskStore",
    "StepLimitExceeded",
    "StepNotRecorded",
    "StoreError",
    "TaskCancelled",
    "TaskFailed",
    "TaskLimitExceeded",
    "TaskLog",
    "TaskRecord",
    "TaskSnapshot",
    "TaskStore",
    "TaskUnreachable",
    "TasksError",
    "TasksExtension",
    "ToolTask",
    "__version__",
    "call_tool_task",
    "related_tasks",
    "step",
    "store_from_url",
    "task_options",
]
