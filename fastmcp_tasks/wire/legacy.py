"""The 2025-11-25 ("V1") task surface on the wire: names, and one record projected onto it.

The store keeps one record per task with the raw outcome (a `CallToolResult`,
or a JSON-RPC error); this module shows it the way the 2025-11-25 text does
(`basic/utilities/tasks`), next to `wire.render` that shows it the 2026 way:

- the task nests under `task` in `CreateTaskResult`; times are `ttl` and
  `pollInterval` (milliseconds), and `ttl` is always present (`null` when
  unlimited: clients of that generation require the key);
- a tool result with `isError: true` is `failed` (on 2026 it is `completed`);
- `tasks/get` and `notifications/tasks/status` carry the task without its
  result; the result is read with `tasks/result`, tagged with the related-task
  `_meta`.
"""

from __future__ import annotations

import time
from typing import Any

from mcp_types import SERVER_INFO_META_KEY
from mcp_types import methods as mcp_methods

from fastmcp_tasks.wire.render import RenderableTask, rfc3339, ttl_ms

LEGACY_VERSION = "2025-11-25"
METHOD_RESULT = "tasks/result"
METHOD_LIST = "tasks/list"
NOTIFICATION_STATUS = "notifications/tasks/status"
RELATED_TASK = "io.modelcontextprotocol/related-task"

#: What a server serving V1 tasks advertises at `capabilities.tasks`.
CAPABILITY: dict[str, Any] = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}


def legacy_status(record: RenderableTask) -> str:
    """The V1 status: a completed task whose result is an error result is `failed`."""
    if record.status == "completed" and (record.result or {}).get("isError") is True:
        return "failed"
    return record.status


def legacy_task(record: RenderableTask, now: float | None = None) -> dict[str, Any]:
    """The V1 `Task` object (also the `tasks/get` and `tasks/cancel` result)."""
    task: dict[str, Any] = {
        "taskId": record.task_id,
        "status": legacy_status(record),
        "createdAt": rfc3339(record.created_at),
        "lastUpdatedAt": rfc3339(record.updated_at),
        "ttl": ttl_ms(record, time.time() if now is None else now),
    }
    if record.status_message is not None:
        task["statusMessage"] = record.status_message
    if record.poll_interval_ms is not None:
        task["pollInterval"] = record.poll_interval_ms
    return task


def legacy_create_result(record: RenderableTask) -> dict[str, Any]:
    """The V1 `CreateTaskResult`: the task, nested."""
    return {"task": legacy_task(record, record.created_at)}


def related(task_id: str) -> dict[str, Any]:
    """The related-task `_meta` entry every task message but get/list/cancel carries."""
    return {RELATED_TASK: {"taskId": task_id}}


def legacy_call_result(result: dict[str, Any], task_id: str) -> dict[str, Any]:
    """A task's stored `CallToolResult` as a 2025-11-25 `tools/call` would have answered it,
    with the related-task `_meta` (what `tasks/result` returns)."""
    shown = mcp_methods.serialize_server_result("tools/call", LEGACY_VERSION, result)
    meta = {k: v for k, v in (shown.get("_meta") or {}).items() if k != SERVER_INFO_META_KEY}
    shown["_meta"] = {**meta, **related(task_id)}  # serverInfo is a 2026 stamp
    return shown
