"""The caller context sealed into the store, so any process that runs a task sees it.

With encryption keys (`server.sealing`), the accepting process seals what the
foreground call had (`caller.Caller`: the access token with its claims, the HTTP
headers, the session id) into `record.context["caller"]` (`durable`), and the
process that rebuilds the job from the record (a worker, recovery, a retry, a gated
claim: `jobs.Job.resumed`) opens it, so `get_access_token()`, `CurrentAccessToken()`
and `get_http_headers()` inside the tool equal the foreground's.

A process that cannot open it (no key, a wrong key) fails the task with the reason
instead of running it anonymously. A restored token already expired when the run
starts is dropped (`unexpired`): a tool that needs it then fails saying so. Without
keys nothing is sealed, and a task run elsewhere sees no caller (`caller`).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from fastmcp.server.auth import AccessToken
from mcp_types import INTERNAL_ERROR

from fastmcp_tasks.server.engine.caller import Caller
from fastmcp_tasks.server.sealing import Sealer, SealError, open_with


def seal_caller(sealer: Sealer | None, task_id: str, caller: Caller) -> str | None:
    """`caller`'s token, headers and session id sealed for `task_id`; `None` without keys
    or when the call had none of them."""
    if sealer is None:
        return None
    token = caller.access_token
    if token is None and not caller.headers and caller.session_id is None:
        return None
    payload: dict[str, Any] = {"headers": caller.headers, "session": caller.session_id}
    if token is not None:
        payload["token"] = token.model_dump(mode="json")
    return sealer.seal(task_id, payload)


def open_caller(
    sealer: Sealer | None, task_id: str, sealed: str | None
) -> tuple[Caller | None, str | None]:
    """The caller sealed for `task_id` and `None`, or `None` and why it cannot be opened."""
    if sealed is None:
        return None, None
    try:
        payload = open_with(sealer, task_id, sealed)
    except SealError as error:
        return None, str(error)
    stored = payload.get("token")
    token = None if stored is None else AccessToken.model_validate(stored)
    caller = Caller(
        access_token=token,
        headers=payload.get("headers"),
        session_id=payload.get("session"),
        restored=True,
    )
    return caller, None


def unexpired(caller: Caller | None) -> Caller | None:
    """A restored `caller` without its token when that expired before this run."""
    if caller is None or not caller.restored or caller.access_token is None:
        return caller
    expires = caller.access_token.expires_at
    if expires is None or expires > time.time():
        return caller
    return dataclasses.replace(caller, access_token=None, expired=True)


def unopened_error(reason: str) -> dict[str, Any]:
    """The JSON-RPC error of a task whose sealed caller context this process cannot open."""
    return {"code": INTERNAL_ERROR, "message": f"Task not run: {reason}"}
