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

#: `tools/call` `_meta` key of this package (not the spec's namespace): the caller's
#: idempotency key. A resend with the same key, by the same principal (or, without
#: authentication, by whoever holds the key), gets the task the first send created.
IDEMPOTENCY_META_KEY: Final = "fastmcp-tasks/idempotencyKey"
#: `tools/call` `_meta` key: `true` on a resend after a lost reply. A server that would
#: answer such a call synchronously refuses it instead of running the tool a second time.
RESENT_META_KEY: Final = "fastmcp-tasks/resent"
#: `capabilities.experimental` entry a server of this package advertises, so a client
#: knows its idempotency keys are honoured before it resends a `tools/call`.
EXPERIMENTAL_CAPABILITY: Final = "fastmcp-tasks"
