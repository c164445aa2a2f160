"""What a task keeps of the request that created it: in memory, in the accepting process only.

A tool does not know it runs as a task, so it must find what the foreground
call gives it: the caller's access token (`get_access_token()`,
`CurrentAccessToken()`, `TokenClaim(...)`, a mounted child's `AuthMiddleware`),
the HTTP headers (`get_http_headers()`), the session id (`ctx.session_id`,
session-scoped `get_state`/`set_state`) and the request-scoped state
(`set_state(..., serializable=False)` by middleware before the tool).

`Caller.of(context)` captures them when the task is created; `carried(caller)`
sets them around the run through the hooks FastMCP keeps for a tasks
extension (`_background_task_headers`, `_background_task_session_id`) and the
SDK's `auth_context_var`, which `get_access_token()` reads when there is no
live HTTP request.

A 2025-11-25 call's `progressToken` stays valid for the task's life: the caller
also keeps it, the session, and the register of waiting `tasks/result` requests,
so `report_progress` reaches the caller on a stream it reads (`engine.streams`).

None of it is written to the store in the clear (SECURITY.md: nothing secret at
rest: tokens, cookies and custom headers often are secrets, and a session id can be
a bearer credential). With encryption keys the token, headers and session id are
sealed into the record and restored where the task runs (`sealed`); without keys
nothing is stored, so a task run by another process (a worker behind a
`concurrency=0` front end, recovery after a crash, a task handed back at
shutdown) sees no token, no headers and no session. A tool that declares it
needs the token (`CurrentAccessToken()`, `TokenClaim(...)`, `auth=` or
`task_options(needs_access_token=True)`) fails there at once with
`TOKEN_UNAVAILABLE`, rather than running with a silent `None`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import mcp_types
from fastmcp.server.context import Context
from fastmcp.server.dependencies import get_access_token, get_http_request
from mcp.server.auth.middleware.auth_context import auth_context_var
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp_types import INTERNAL_ERROR

from fastmcp_tasks import _compat
from fastmcp_tasks.server.engine.streams import ResultStreams
from fastmcp_tasks.server.options import options_of
from fastmcp_tasks.wire.legacy import RELATED_TASK

TOKEN_UNAVAILABLE = (
    "Tool {tool!r} needs the caller's access token, which fastmcp-tasks never stores: "
    "this task ran in a process that did not accept its tools/call (a worker, a task "
    "recovered after a crash, or one handed back at shutdown), where the token does not "
    "exist. Run this tool's tasks in the process that accepts the call (concurrency > 0 "
    "on the front end), or make it work without the token."
)
TOKEN_EXPIRED = (
    "Tool {tool!r} needs the caller's access token, which had expired when this task's "
    "run began in a process that did not accept its tools/call, so it was not restored: "
    "call the tool again with a fresh token."
)


@dataclass(frozen=True, slots=True)
class Caller:
    """The creating request's identity and per-request state (never stored)."""

    access_token: AccessToken | None = None
    headers: dict[str, str] | None = None
    session_id: str | None = None
    request_state: dict[str, Any] | None = None
    #: 2025-11-25 only: the session and the `progressToken` progress goes to for the
    #: task's life (2026 has no progress for tasks), and the `tasks/result` requests
    #: waiting on tasks, whose streams carry it while the session waits there
    session: Any = None
    progress_token: Any = None
    streams: ResultStreams | None = None
    #: opened from the sealed context by a process that did not take the call (`sealed`)
    restored: bool = False
    #: its restored token had expired when the run began, so it was dropped (`sealed`)
    expired: bool = False

    @classmethod
    def of(cls, context: Context, *, streams: ResultStreams | None = None) -> Caller:
        """Capture what the request being served has; missing parts are None.

        `streams` is given for a 2025-11-25 call only: its `progressToken` is kept.
        """
        try:
            headers: dict[str, str] | None = {
                name.lower(): value for name, value in get_http_request().headers.items()
            }
        except RuntimeError:
            headers = None  # not HTTP (in-memory, stdio): get_http_headers() is {} there too
        try:
            session_id: str | None = context.session_id
        except RuntimeError:
            session_id = None
        request = context.request_context
        legacy = streams is not None and request is not None  # a 2025-11-25 call
        token = (request.meta or {}).get("progressToken") if legacy and request else None
        return cls(
            access_token=get_access_token(),
            headers=headers,
            session_id=session_id,
            request_state=_compat.request_scoped_state(context),
            session=request.session if token is not None and request is not None else None,
            progress_token=token,
            streams=streams if token is not None else None,
        )

    async def report_progress(
        self, task_id: str, progress: float, total: float | None, message: str | None
    ) -> None:
        """Send `notifications/progress` to the original `progressToken`, when there is one:
        on the stream of the session's `tasks/result` waiting on the task, else on the
        session's own (best effort: a session that went away loses it, the task goes on)."""
        if self.session is None or self.progress_token is None:
            return
        params = mcp_types.ProgressNotificationParams(
            progress_token=self.progress_token,
            progress=progress,
            total=total,
            message=message,
            _meta={RELATED_TASK: {"taskId": task_id}},
        )
        notification = mcp_types.ProgressNotification(params=params)
        waiting = None
        if self.streams is not None and self.session_id is not None:
            waiting = self.streams.of(task_id, self.session_id)
        if waiting is not None:
            try:
                await waiting.session.send_notification(
                    notification, related_request_id=waiting.request_id
                )
                return
            except Exception:  # that request just ended: the session's own stream
                pass
        try:
            await self.session.send_notification(notification)
        except Exception:
            return


@contextmanager
def carried(caller: Caller | None) -> Iterator[None]:
    """Inside, the running task sees `caller`'s token, headers and session id (or none)."""
    token = caller.access_token if caller is not None else None
    user = AuthenticatedUser(token) if token is not None else None
    auth = auth_context_var.set(user)  # also hides any token leaked into the lifespan
    carried_tokens = _compat.carry_into_task(
        caller.headers if caller is not None else None,
        caller.session_id if caller is not None else None,
    )
    try:
        yield
    finally:
        _compat.uncarry(carried_tokens)
        auth_context_var.reset(auth)


def needs_access_token(tool: Any) -> bool:
    """Whether `tool` cannot run without the caller's token (see the module docstring)."""
    return options_of(tool).needs_access_token or _compat.needs_access_token(tool)


def token_error(name: str, caller: Caller | None = None) -> dict[str, Any]:
    """The JSON-RPC error a task fails with when its tool needs a token it cannot have."""
    why = TOKEN_EXPIRED if caller is not None and caller.expired else TOKEN_UNAVAILABLE
    return {"code": INTERNAL_ERROR, "message": why.format(tool=name)}
