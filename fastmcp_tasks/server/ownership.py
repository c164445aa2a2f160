"""Who may see a task: the principal that created it (C14).

When the server authenticates requests, a task belongs to the principal of the
request that created it: the OAuth `client_id` together with the token's
subject (`sub`). Every later `tasks/get`, `tasks/update`, `tasks/cancel` and
`subscriptions/listen` from another principal, or from an unauthenticated
request, is answered exactly like an unknown id (-32602), so a task's existence
never leaks. Without authentication the unguessable task id is the bearer
credential (see SECURITY.md). Only this principal key is stored: never the
access token or request headers.

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

from fastmcp_tasks.stores.base import TaskRecord

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
