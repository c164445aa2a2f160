"""Who may see a task: the principal that created it (C14).

When the server authenticates requests, a task belongs to the principal of the
request that created it: the OAuth `client_id` together with the token's
subject (`sub`). Every later `tasks/get`, `tasks/update`, `tasks/cancel` and
`subscriptions/listen` from another principal, or from an unauthenticated
request, is answered exactly like an unknown id (-32602), so a task's existence
never leaks. Without authentication the unguessable task id is the bearer
credential (see SECURITY.md). Only this principal key is stored: never the
access token or request headers.
"""

from __future__ import annotations

from fastmcp.server.dependencies import get_access_token

from fastmcp_tasks.stores.base import TaskRecord


def current_principal() -> str | None:
    """The principal key of the request being served, or `None` without auth."""
    try:
        token = get_access_token()
    except Exception:  # no request, or an auth layer we do not know
        return None
    if token is None:
        return None
    subject = getattr(token, "subject", None) or (token.claims or {}).get("sub") or ""
    return f"{token.client_id}|{subject}"


def may_access(record: TaskRecord, principal: str | None) -> bool:
    """Whether `principal` may read or act on `record`."""
    return record.owner is None or record.owner == principal
