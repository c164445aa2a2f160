"""A plain task-creating `tools/call` over HTTP answered at the SDK's entry, by the same steps.

`json_replies` chooses a modern-era `tools/call` that the tasks interceptor will turn
into a task, and whose handling nobody but FastMCP and the SDK sees (no middleware that
would, no other interceptor, an unauthenticated caller, a tool resolved from the
server's own tools with no `foreground_input` hook). For such a call the SDK then always
does the same: its transport's checks (the security settings, the JSON-RPC envelope, the
routing headers, the protocol ladder, the `Mcp-Param-*` headers against the tool's
schema), a per-request connection, session and context, the server's middleware list
(FastMCP's seam, the request-state boundary), the method's surface check and params
model, FastMCP's `tools/call` handler and `call_tool`, which bind a request context, open
a FastMCP `Context` and reach the interceptor, and the interceptor, which reads the
idempotency key, checks the arguments (`validation.task_arguments`) and creates the task
(`creation.create_task`); then the result's wire form and the reply.

`DirectCalls` makes the same checks with the SDK's own functions and runs the
interceptor's steps itself, with what they read of the request: its `_meta`, its
protocol version, its HTTP request (bound as the SDK binds it, so the caller's headers
are kept as before) and a session id made as FastMCP makes one for a modern request
(the `Mcp-Session-Id` header, else a new random one). Its reply is written with the
SDK's own writer and wire form (`_compat.write_reply`, `serialize_result`): the same
status, headers and body; the task's record is the same record.

It answers only when all of this holds; otherwise the request goes on to the SDK as it
came (its body replayed), and is answered exactly as before:

- everything `JsonReplies` requires of a call it chooses (its tool resolved before);
- FastMCP's adapter could be skipped (`poll_lane.unobserved`: no middleware that would
  see it, no tracer, no trace context in its `_meta`);
- the body is one JSON object holding exactly `jsonrpc` "2.0", an integer or string
  `id`, `method` "tools/call" and an object `params` with nothing but `name`,
  `arguments` and `_meta` (a continuation's `inputResponses` or `requestState` goes to
  the SDK), and the params pass the SDK's surface check and FastMCP's params model;
- it is a POST, and the SDK's checks pass: security, no routing header given twice,
  the ladder's modern route, the `Mcp-Param-*` headers (checked against the schema
  FastMCP serves the SDK through `get_tool_input_schema`, as FastMCP 4.2 and later do;
  without that hook every call goes to the SDK, which reads the schemas another way);
- the handler registered for `tools/call` is FastMCP's own, and so is what it runs before
  the interceptors (`_compat.is_core_call_path`: no subclass, instance attribute or patch
  of it), with no cache hint; the extension is the server's tasks extension, intercepting
  with the extension's own code (`TasksExtension` itself, not a subclass or patch of its
  interceptor), and its runner has started;
- no code of the author's that may read FastMCP's request context or `Context` (which
  this path does not make) would run: the tool has no `concurrency_key`, the store is
  one of the package's own (`monitored_store.builtin_store`), and checking the arguments
  meets nothing but a validation error (a validator that raised anything else hands the
  call on: `validation.task_arguments(strict=True)`; one that catches such an error
  itself cannot be told apart);
- the arguments are valid (else the synchronous path reports them).

Once the interceptor's first step has run, the request is answered here whatever it
raised (an idempotency key refused, arguments over the limit, a cap, the store
unavailable), as the SDK and FastMCP map it: handing it on would create the task twice.
"""

from __future__ import annotations

import uuid
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from fastmcp import FastMCP
from fastmcp.exceptions import DisabledError, FastMCPError, NotFoundError
from fastmcp.server.http import set_http_request
from fastmcp.tools.base import Tool
from mcp.server.runner import modern_error_data
from mcp_types import CallToolResult, JSONRPCError, JSONRPCRequest, JSONRPCResponse, TextContent
from mcp_types import methods as spec_methods
from pydantic import ValidationError
from starlette.requests import Request
from starlette.types import Receive, Scope

from fastmcp_tasks import _compat
from fastmcp_tasks.server.creation import Admission, create_task
from fastmcp_tasks.server.direct_polls import modern_route
from fastmcp_tasks.server.engine.call import leaf_of
from fastmcp_tasks.server.engine.jobs import CreatingRunner
from fastmcp_tasks.server.idempotency import read as read_idempotency
from fastmcp_tasks.server.limits import Limits
from fastmcp_tasks.server.monitored_store import builtin_store
from fastmcp_tasks.server.options import options_of
from fastmcp_tasks.server.poll_lane import unobserved
from fastmcp_tasks.server.validation import task_arguments
from fastmcp_tasks.wire.names import TASKS_EXTENSION_ID
from fastmcp_tasks.wire.render import render_create_result


class Creating(Protocol):
    """What answering a call needs of the tasks extension (`TasksExtension` has it)."""

    @property
    def runner(self) -> CreatingRunner | None: ...

    @property
    def limits(self) -> Limits: ...

    @property
    def admission(self) -> Admission: ...

    async def intercept_tool_call(self, params: Any, context: Any, call_next: Any) -> Any: ...


CALL = "tools/call"
_ENVELOPE = frozenset({"jsonrpc", "id", "method", "params"})
_PARAMS = frozenset({"name", "arguments", "_meta"})


@dataclass
class _CallContext:
    """What creating a task reads of FastMCP's `Context` and request context for a modern
    initial call: `_meta`, the version, the HTTP request, no input responses or state, an
    empty request-scoped state, and the session id FastMCP would make."""

    meta: dict[str, Any]
    request: Request
    protocol_version: str
    session: Any = None
    input_responses: Any = None
    request_state: Any = None
    _request_state: dict[str, Any] = field(default_factory=dict)
    _session_id: str | None = None

    @property
    def request_context(self) -> _CallContext:
        return self

    @property
    def session_id(self) -> str:
        """As FastMCP's `Context.session_id` for a modern request (its connection has
        none): the `Mcp-Session-Id` header, else a random id, the same for the request."""
        if self._session_id is None:
            given = self.request.headers.get("mcp-session-id")
            self._session_id = given if given is not None else str(uuid.uuid4())
        return self._session_id


class DirectCalls:
    """Answers a plain task-creating `tools/call` itself (module doc); `answered` counts."""

    def __init__(self, server: FastMCP, extension: Creating) -> None:
        self._server = weakref.ref(server)
        self._extension = weakref.ref(extension)
        #: the interceptor whose steps `answer` runs (the extension's own: `install`)
        self._intercept = type(extension).intercept_tool_call
        self.answered = 0

    def _intercepts(self, server: FastMCP, extension: Creating) -> bool:
        """Whether `extension` is `server`'s tasks extension and still intercepts with the
        code it had when this was made (not replaced on the instance or its class)."""
        registered = _compat.server_extensions(server).get(TASKS_EXTENSION_ID)
        return (
            registered is extension
            and "intercept_tool_call" not in vars(extension)
            and type(extension).intercept_tool_call is self._intercept
        )

    async def answer(
        self,
        scope: Scope,
        decoded: Any,
        receive: Receive,
        exchange: _compat.Exchange,
        tool: Tool,
        name: str,
        version: str | None,
    ) -> bool:
        """Answer the call whose whole body, decoded, is `decoded` (chosen for `tool`,
        resolved from `name` at `version`) through `exchange.send`; `False` (nothing sent)
        when the SDK must answer it. `receive` replays the body."""
        server, extension = self._server(), self._extension()
        if server is None or extension is None or scope.get("method") != "POST":
            return False
        runner = extension.runner
        if runner is None or not runner.started:
            return False  # the interceptor's own error, through the SDK
        if not _plain_envelope(decoded):
            return False
        params = decoded["params"]
        request = Request(scope)
        verdict = await modern_route(request, exchange, decoded)
        if verdict is None or not unobserved(server, verdict.protocol_version, params):
            return False
        low = _compat.low_level_server(server)
        entry = low.get_request_handler(CALL)
        if entry is None or not _compat.is_core_call_path(server, entry.handler):
            return False
        if CALL in low.cache_hints or not self._intercepts(server, extension):
            return False
        if not builtin_store(extension.admission.store):
            return False  # a store of the author's may read FastMCP's request context
        protocol_version = verdict.protocol_version
        try:
            spec_methods.validate_client_request(CALL, protocol_version, params)
            typed = entry.params_type.model_validate(params, by_name=False)
            envelope = JSONRPCRequest.model_validate(decoded)
        except (ValidationError, KeyError):
            return False
        meta = params.get("_meta")
        if typed.name != name or not isinstance(meta, Mapping):
            return False
        if await _compat.mcp_param_rejection(low, request, envelope, verdict) is not None:
            return False
        options = options_of(await leaf_of(tool))
        if options.foreground_input is not None or options.concurrency_key is not None:
            return False  # the author's code that may read FastMCP's request context
        context = _CallContext(dict(meta), request, protocol_version)
        result: Any = None
        failure: Exception | None = None
        with set_http_request(request):  # the request the SDK would bind for the handler
            try:
                idempotency = read_idempotency(context.meta)  # the interceptor's first step
                arguments = task_arguments(extension.limits, tool, typed.arguments, strict=True)
                if arguments is None:
                    return False  # the synchronous path reports them: nothing was done
                record = await create_task(
                    extension.admission,
                    runner,
                    tool,
                    name,
                    arguments,
                    cast(Any, context),
                    options,
                    version,
                    idempotency_key=idempotency.key,
                )
                result = render_create_result(record)
            except (DisabledError, NotFoundError):  # as FastMCP's `tools/call` handler
                result = _error_result(f"Unknown tool: {name!r}")
            except FastMCPError as error:
                result = _error_result(str(error))
            except Exception as error:  # as the SDK's entry answers a handler's error
                failure = error
        reply: JSONRPCResponse | JSONRPCError
        try:
            if failure is not None:
                raise failure
            wire = _compat.serialize_result(low, CALL, protocol_version, result)
        except Exception as error:
            reply = JSONRPCError(jsonrpc="2.0", id=envelope.id, error=modern_error_data(error))
        else:
            reply = JSONRPCResponse(jsonrpc="2.0", id=envelope.id, result=wire)
        self.answered += 1
        await _compat.write_reply(reply, scope, receive, exchange.send)
        return True


def _error_result(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


def _plain_envelope(decoded: Any) -> bool:
    """One JSON-RPC `tools/call` request with nothing the SDK's envelope model might read
    otherwise, and params holding only a name, arguments and `_meta`."""
    if not isinstance(decoded, dict) or decoded.keys() != _ENVELOPE:
        return False
    request_id, params = decoded["id"], decoded["params"]
    return (
        decoded["jsonrpc"] == "2.0"
        and decoded["method"] == CALL
        and isinstance(params, dict)
        and params.keys() <= _PARAMS
        and isinstance(request_id, int | str)
        and not isinstance(request_id, bool)
    )


__all__ = ["CALL", "Creating", "DirectCalls"]
