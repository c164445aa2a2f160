"""A FastMCP proxy in front of a tasks server: the proxied call returns the tool's result.

This module owns `install_proxy_resolution()` and the session class it installs.

The problem. Importing `fastmcp_tasks` registers the transparent
`TasksClientExtension` for every `fastmcp.Client` (see `client.extension`), so
the `Client(backend)` a user hands to `create_proxy(...)` declares the tasks
extension to the backend, and the backend answers a `tools/call` of a task tool
with a `CreateTaskResult`. FastMCP's `Client.call_tool()` would resolve that
claimed result through the extension; but the proxy's `ProxyTool.run` calls
`client.session.call_tool(...)` on the backend session directly, which raises
`UnexpectedClaimedResult` for any claimed result, and the proxy's client sees a
`ToolError` ("Server returned a claimed result (CreateTaskResult) ...") instead
of the tool's result. A `ProxyClient(...)` or URL target does not fold FastMCP's
internal client extensions in (`_auto_internal_extensions = False`), never
declares tasks, and so gets the synchronous result.

The fix. Every proxy backend connection is built from one session class, core's
`PROXY_TRANSPORT_OPTIONS.session_class`, read when each backend client is
configured. `install_proxy_resolution()` replaces it, once, with a subclass of
whatever class is installed (core's forwarding session) whose `call_tool`, when
its caller did not opt into claimed results (`allow_claimed=False`, which is how
`ProxyTool.run` calls it), drives our `CreateTaskResult` to its end with the
claim the session's own `Client` registered: the `TasksClientExtension` folded
into that client (the transparent one answers elicitations through the client's
elicitation callback, as `Client.call_tool()` would), in a
`ClaimContext(session=self, ...)`, exactly as `Client._resolve_claimed_result`
does. The caller then gets the task's `CallToolResult` (an `isError` one
included), or a plain `MCPError` with the JSON-RPC error a failed task ended
with, exactly what `ClientSession.call_tool` raises when a synchronous backend
answers with that error (so the proxy masks and relays it the same way); a
cancelled proxied call cancels the backend task.

Why this is the narrowest fix: it changes nothing the backend sees (the call is
still a task there, with its durability and limits), nothing for a caller that
handles claims itself (`allow_claimed=True`, e.g. `Client.call_tool()` on a
proxy client), nothing for any result other than our `CreateTaskResult` (other
claimed shapes still raise `UnexpectedClaimedResult`), nothing outside proxy
backend sessions, and it needs no change to `ProxyTool`, to the user's client, or
to what the client advertises (not advertising would make `task="required"`
tools unreachable through the proxy). Every private name it relies on is in
`fastmcp_tasks._compat.proxy`, checked at import and at installation.

What would make it unnecessary (a FastMCP change): `ProxyTool.run` finishing a
claimed result through the backend client, as `Client.call_tool()` does
(`await client._resolve_claimed_result(name, result, None)` when
`session.call_tool(..., allow_claimed=True)` returns a claimed model), or the
proxy's backend client not folding in internal client extensions
(`_auto_internal_extensions = False` for the copy `create_proxy` makes of a
`Client` target, as `ProxyClient` already does). Not covered: a target `Client`
that is already connected when passed to `create_proxy` (core reuses its session
as is, so no proxy session class applies).
"""

from __future__ import annotations

from typing import Any

import mcp_types
from mcp.client.extension import ClaimContext, UnexpectedClaimedResult
from mcp.client.session import ClientSession
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError

from fastmcp_tasks import _compat
from fastmcp_tasks.wire.models import CreateTaskResult

__all__ = ["TaskResolvingSession", "install_proxy_resolution"]

#: the `resultType` our `CreateTaskResult` is claimed under
TASK_RESULT_TYPE = "task"


class TaskResolvingSession(ClientSession):
    """Mixed in front of the proxy's backend session class: resolves our task results.

    Only `call_tool` changes, and only for a caller that did not opt into
    claimed results: a `CreateTaskResult` is followed to the task's final
    `CallToolResult` (or its error) through the claim the session's client
    registered. Every other result is returned, or refused, as before.
    """

    async def call_tool(  # type: ignore[override]  # the overloads collapse to one signature
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        read_timeout_seconds: float | None = None,
        progress_callback: ProgressFnT | None = None,
        *,
        allow_claimed: bool = False,
        **options: Any,
    ) -> mcp_types.CallToolResult | mcp_types.InputRequiredResult | mcp_types.Result:
        """`ClientSession.call_tool`, resolving a `CreateTaskResult` unless `allow_claimed`.

        Args:
            name: the tool.
            arguments: its arguments.
            read_timeout_seconds: the per-request timeout (the session's when None);
                also bounds each request the resolver sends.
            progress_callback: as for `ClientSession.call_tool`.
            allow_claimed: return a claimed result as is (the caller resolves it).
            **options: the keyword-only options of `ClientSession.call_tool`.

        Returns:
            What `ClientSession.call_tool` returns; for a task, its final result.

        Raises:
            UnexpectedClaimedResult: a claimed result other than our task, with
                `allow_claimed` False (as `ClientSession.call_tool` raises).
            MCPError: the task failed or was cancelled (its JSON-RPC error).
        """
        result = await super().call_tool(
            name,
            arguments,
            read_timeout_seconds,
            progress_callback,
            allow_claimed=True,
            **options,
        )
        if allow_claimed or isinstance(
            result, mcp_types.CallToolResult | mcp_types.InputRequiredResult
        ):
            return result
        if not isinstance(result, CreateTaskResult):
            raise UnexpectedClaimedResult(result)
        return await self._finish_task(name, result, read_timeout_seconds)

    async def _finish_task(
        self, name: str, created: CreateTaskResult, read_timeout_seconds: float | None
    ) -> mcp_types.CallToolResult:
        """Drive `created` to the end with the claim this session's client registered."""
        claim = _compat.session_claim(self, TASK_RESULT_TYPE)
        if claim is None or not isinstance(created, claim.model):
            raise UnexpectedClaimedResult(created)
        if read_timeout_seconds is None:  # as `Client._resolve_claimed_result` falls back
            read_timeout_seconds = _compat.session_read_timeout(self)
        context = ClaimContext(
            session=self, tool_name=name, read_timeout_seconds=read_timeout_seconds
        )
        try:
            final: mcp_types.CallToolResult = await claim.resolve(created, context)
        except MCPError as error:
            if type(error) is MCPError:
                raise
            # `TaskFailed` / `TaskCancelled` are also `ToolError`s, which core relays
            # verbatim even when masking; a backend's JSON-RPC error is a plain one.
            raise MCPError(error.error.code, error.error.message, error.error.data) from error
        if not final.is_error:
            await self.validate_tool_result(name, final)
        return final


def install_proxy_resolution() -> None:
    """Make every FastMCP proxy backend session resolve our task results (idempotent).

    Wraps the session class core's proxies currently build backend connections
    with (core's forwarding session, or one another layer installed), so its own
    behaviour (relaying results without output-schema policing) is kept.

    Raises:
        IncompatibleFastMCP: the installed FastMCP no longer has the proxy seam.
    """
    _compat.check_proxy_seams()
    current = _compat.proxy_session_class()
    if issubclass(current, TaskResolvingSession):
        return
    resolving = type(
        "TaskResolvingProxySession",
        (TaskResolvingSession, current),
        {"__module__": __name__, "__doc__": TaskResolvingSession.__doc__},
    )
    _compat.set_proxy_session_class(resolving)
