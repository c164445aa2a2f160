"""The SEP-2663 names: extension id, method and notification names, statuses, the ACK.

Plain constants with no imports of this package, so every other module (errors,
stores, server, client) may depend on them without forming a cycle.
"""

from __future__ import annotations

from typing import Any, Final, Literal

#: Reverse-DNS identifier of the extension (same string as FastMCP core's).
TASKS_EXTENSION_ID = "io.modelcontextprotocol/tasks"

TaskStatus = Literal["working", "input_required", "completed", "failed", "cancelled"]
ACTIVE_STATUSES: frozenset[str] = frozenset({"working", "input_required"})
TERMINAL_STATUSES: frozenset[str] = frozenset({"completed", "failed", "cancelled"})

METHOD_GET = "tasks/get"
METHOD_UPDATE = "tasks/update"
METHOD_CANCEL = "tasks/cancel"
METHOD_LISTEN = "subscriptions/listen"
NOTIFICATION_TASKS: Final = "notifications/tasks"

#: `tools/call` `_meta` key: task ids the call relates to (draft; an advisory hint only).
RELATED_TASKS_META_KEY: Final = "io.modelcontextprotocol/relatedTaskIds"

ACK: dict[str, Any] = {"resultType": "complete"}
"""The empty acknowledgement of `tasks/update` and `tasks/cancel`."""
