"""A plain modern-era `tasks/get` over HTTP answered at the SDK's entry, by the same steps.

`json_replies` has the SDK answer a `tasks/get` in JSON mode when nothing but FastMCP's
and the SDK's own handling would see it. For such a request the SDK then always does
the same: its transport's checks (the security settings, the JSON-RPC envelope, the
routing headers, the protocol ladder), a per-request connection, session and context,
the server's middleware list (the poll lane and the request-state boundary, which both
pass a `tasks/get` on untouched), the method's params model, `TaskMethods.get`, the
result's wire form and the reply. `DirectPolls` makes the same checks with the SDK's
own functions, calls the same bound `TaskMethods.get` (`modern_get`) with the request's
params, headers and protocol version and with the HTTP request the SDK would bind for
it (`set_http_request`: the caller's identity is read from that request's scope, as
through the SDK), and writes what it returns, or the error it raises, with the SDK's
own writer (`_compat.write_reply`, `wire_result`): the same status, headers and body,
for a fifth to a third fewer instructions a poll (`bench.instructions`). Polling is what
a client of tasks does most, so this is the request served most.

It answers only when all of this holds; otherwise the request goes on to the SDK as it
came (its body replayed), and is answered exactly as before:

- everything `JsonReplies` requires of a `tasks/get`;
- FastMCP's adapter could be skipped (`poll_lane.unobserved`: no middleware that would
  see it, no tracer, no trace context in its `_meta`);
- the body is one JSON object holding exactly `jsonrpc` "2.0", an integer or string
  `id`, `method` "tasks/get" and an object `params`, and the params validate
  (`TaskIdParams`);
- it is a POST, and the SDK's checks pass: the security settings
  (`TransportSecurityMiddleware.validate_request`), no routing header given twice
  (`find_duplicated_routing_header`), and the ladder's modern route
  (`classify_inbound_request`);
- the handler registered for `tasks/get` is FastMCP's wrapper of the extension's own
  binding (`_compat.method_binding`; one registered in its place, before or after the
  server started, runs through the SDK), and the method has no cache hint;
- the store is one of the package's own (`monitored_store.builtin_store`: a store of the
  author's may read FastMCP's request context, which this path does not make).

Once `TaskMethods.get` has run, the request is answered here whatever it raised (an
unknown task, a missing opt-in, an `Mcp-Name` naming another task, polling too fast, the
store unavailable), as the SDK maps it (`modern_error_data`): handing it on would run
the handler twice, and a paced poll must count once.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from fastmcp import FastMCP
from fastmcp.server.http import set_http_request
from mcp.server.runner import modern_error_data
from mcp.server.transport_security import TransportSecurityMiddleware
from mcp.shared.inbound import (
    InboundModernRoute,
    classify_inbound_request,
    find_duplicated_routing_header,
)
from mcp_types import JSONRPCError, JSONRPCResponse
from pydantic import ValidationError
from starlette.requests import Request
from starlette.types import Message, Receive, Scope

from fastmcp_tasks import _compat
from fastmcp_tasks.server.handlers import TaskMethods
from fastmcp_tasks.server.monitored_store import builtin_store
from fastmcp_tasks.server.poll_lane import unobserved
from fastmcp_tasks.wire.models import TaskIdParams
from fastmcp_tasks.wire.names import METHOD_GET

_ENVELOPE = frozenset({"jsonrpc", "id", "method", "params"})


@dataclass(frozen=True)
class _PollContext:
    """What `TaskMethods.get` reads of the SDK's request context: the raw params (its
    `_meta` holds the opt-in), the HTTP request (the `Mcp-Name` header) and the version."""

    params: Mapping[str, Any]
    request: Request
    protocol_version: str


class DirectPolls:
    """Answers a plain `tasks/get` itself (module doc). `answered` counts them."""

    def __init__(self, server: FastMCP, methods: TaskMethods) -> None:
        self._server = weakref.ref(server)
        self._methods = methods
        self.answered = 0

    async def answer(
        self, scope: Scope, message: Message, receive: Receive, exchange: _compat.Exchange
    ) -> bool:
        """Answer the request whose body is `message` through `exchange.send`; `False`
        (nothing sent) when the SDK must answer it. `receive` replays the body."""
        server = self._server()
        if server is None or scope.get("method") != "POST":
            return False
        if message.get("type") != "http.request" or message.get("more_body", False):
            return False
        try:
            decoded = json.loads(message.get("body", b""))
        except (ValueError, RecursionError):
            return False  # the SDK answers it (a parse error)
        if not _plain_envelope(decoded):
            return False
        request = Request(scope)
        verdict = await modern_route(request, exchange, decoded)
        params = decoded["params"]
        if verdict is None or not unobserved(server, verdict.protocol_version, params):
            return False
        low = _compat.low_level_server(server)
        entry = low.get_request_handler(METHOD_GET)
        binding = None if entry is None else _compat.method_binding(entry.handler)
        if binding is None or binding.handler is not self._methods.bound_get:
            return False  # another handler answers `tasks/get` now: the SDK runs it
        if METHOD_GET in low.cache_hints or not builtin_store(self._methods.store):
            return False  # (a store of the author's may read FastMCP's request context)
        try:
            typed = TaskIdParams.model_validate(params, by_name=False)
        except ValidationError:
            return False
        context = _PollContext(params, request, verdict.protocol_version)
        request_id = decoded["id"]
        reply: JSONRPCResponse | JSONRPCError
        try:
            with set_http_request(request):  # the request the SDK would bind for the handler
                result = await self._methods.modern_get(cast(Any, context), typed)
            wire = _compat.wire_result(low, verdict.protocol_version, result)
        except Exception as exc:  # as the SDK's entry answers a handler's error
            reply = JSONRPCError(jsonrpc="2.0", id=request_id, error=modern_error_data(exc))
        else:
            reply = JSONRPCResponse(jsonrpc="2.0", id=request_id, result=wire)
        self.answered += 1
        await _compat.write_reply(reply, scope, receive, exchange.send)
        return True


async def modern_route(
    request: Request, exchange: _compat.Exchange, decoded: Any
) -> InboundModernRoute | None:
    """The SDK entry's checks of a POST whose body is `decoded`, in its order (the security
    settings, no routing header given twice, the protocol ladder); its modern route when
    all pass, else `None` (the SDK answers the request)."""
    security = TransportSecurityMiddleware(exchange.security_settings)
    if await security.validate_request(request, is_post=True) is not None:
        return None
    if find_duplicated_routing_header(request.headers.items()) is not None:
        return None
    verdict = classify_inbound_request(decoded, headers=dict(request.headers))
    return verdict if isinstance(verdict, InboundModernRoute) else None


def _plain_envelope(decoded: Any) -> bool:
    """One JSON-RPC `tasks/get` request with nothing the SDK's envelope model might read
    otherwise: exactly the four members, an integer (not boolean) or string id."""
    if not isinstance(decoded, dict) or decoded.keys() != _ENVELOPE:
        return False
    request_id = decoded["id"]
    return (
        decoded["jsonrpc"] == "2.0"
        and decoded["method"] == METHOD_GET
        and isinstance(decoded["params"], dict)
        and isinstance(request_id, int | str)
        and not isinstance(request_id, bool)
    )


__all__ = ["DirectPolls", "modern_route"]
