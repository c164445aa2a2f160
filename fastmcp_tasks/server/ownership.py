"""Who may see a task: the principal that created it (C14).

When the server authenticates requests, a task belongs to the principal of the
request that created it: the OAuth `client_id` together with the token's
subject (`sub`). Every later `tasks/get`, `tasks/update`, `tasks/cancel` and
`subscriptions/listen` from another principal, or from an unauthenticated
request, is answered exactly like an unknown id (-32602), so a task's existence
never leaks. Without authentication the unguessable task id is the bearer
credential (see SECURITY.md). Only this principal key is stored: never the
access token or request headers.

A removed task's tombstone (`stores.flow`) keeps its owner too, so `missing()`
tells that owner (or anyone, for a task created without authentication) that the
task expired or was purged, and everyone else exactly what an unknown id gets.

Fail closed: when the auth layer fails while the caller is identified, or hands
over a token naming neither a client nor a subject, the request is refused
(-32603) rather than served as "no owner", which would make the task visible to
anyone holding its id.
"""

from __future__ import annotations

import logging

from fastmcp.server.dependencies import get_access_token
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR

from fastmcp_tasks.errors import task_expired, task_not_found
from fastmcp_tasks.stores.base import TaskRecord, TaskStore
from fastmcp_tasks.stores.flow import tombstone_of
from fastmcp_tasks.wire.render import could_be_task_id

logger = logging.getLogger("fastmcp_tasks.ownership")

UNKNOWN_PRINCIPAL = "Could not determine the caller's identity; the request was refused"


def current_principal() -> str | None:
    """The principal key of the request being served, or `None` without auth.

    Raises:
        MCPError: -32603 when the caller is authenticated but cannot be identified.
    """
    try:
        token = get_access_token()
    except Exception:
        logger.exception("Reading the caller's access token failed; refusing the request")
        raise MCPError(code=INTERNAL_ERROR, message=UNKNOWN_PRINCIPAL) from None
    if token is None:
        return None
    try:
        claims = token.claims or {}
        subject = getattr(token, "subject", None) or claims.get("sub") or ""
        client = token.client_id or ""
    except Exception:
        logger.exception("The caller's access token has no usable identity; refusing")
        raise MCPError(code=INTERNAL_ERROR, message=UNKNOWN_PRINCIPAL) from None
    if not client and not subject:
        logger.error("An access token names neither a client nor a subject; refusing")
        raise MCPError(code=INTERNAL_ERROR, message=UNKNOWN_PRINCIPAL)
    return f"{client}|{subject}"


def may_access(record: TaskRecord, principal: str | None) -> bool:
    """Whether `principal` may read or act on `record`."""
    return record.owner is None or record.owner == principal


async def missing(store: TaskStore, task_id: str) -> MCPError:
    """The -32602 for a task id the store has no live task for (the miss path only).

    `task_expired` when the task left a tombstone its owner may see (`may_access`'s
    rule: no owner, or the caller's principal); otherwise `task_not_found`, the very
    same answer an id that never existed gets.
    """
    stone = await tombstone_of(store, task_id) if could_be_task_id(task_id) else None
    if stone is not None and (stone.owner is None or stone.owner == current_principal()):
        return task_expired(task_id, stone)
    return task_not_found(task_id)
