"""The SDK's entry for a 2026-07-28-era HTTP request, and a per-server choice of its reply mode.

The SDK's Streamable HTTP session manager
(`mcp.server.streamable_http_manager.StreamableHTTPSessionManager`) hands every request
at a modern protocol version to the module-level `handle_modern_request(app,
security_settings, json_response, lifespan_state, scope, receive, send)`, passing the
manager's `json_response`. With it off (FastMCP's default) that entry runs the handler
as a sibling task beside a disconnect watcher and defers choosing between
`application/json` and `text/event-stream` until the handler emits a notification or
`sse_deferral()` seconds pass; a handler that finishes first without emitting is answered
in JSON, the same bytes and status JSON mode gives. With it on, the entry awaits the
handler in the ASGI task and answers in JSON.

`choose_reply(app, chooser)` lets one SDK server pick JSON mode per request that the
manager would serve in SSE mode, and answer a request itself in either mode. At the
first call in a process the manager module's name is bound to `_entry`, once and for
good (never captured again, so never a wrapper of `_entry` that another library may
have put there since): for a server with a chooser it hands the chooser the request, a
continuation, `answer(json_response, receive)`, that runs the SDK's entry (the chooser
awaits it at most once, so it can hold a context variable for the request's handler),
and the rest of what the entry was handed (`Exchange`: the security settings, `send`,
the manager's mode), for a chooser that answers the request itself
(`server.direct_polls`, with `write_reply`, the entry's own writer of a JSON-RPC reply,
`wire_result`, the SDK runner's wire form of a result, and `method_binding`, the
extension binding a registered handler serves); for any other server it calls the SDK's
entry unchanged.
`forget_reply(app)` stops asking for that server. FastMCP builds its session manager
inside its HTTP app's lifespan and offers no seam to it, so the module name the manager
calls through is the one place to choose.

See `fastmcp_tasks._compat` for what a seam is and how it is checked.
"""

from __future__ import annotations

import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from fastmcp import FastMCP
from fastmcp.server.extensions import MethodBinding, build_method_handler
from fastmcp.server.mixins.mcp_operations import MCPOperationsMixin
from mcp.server import _streamable_http_modern as modern_module
from mcp.server import runner as runner_module
from mcp.server import streamable_http_manager as manager_module
from mcp_types import SERVER_INFO_META_KEY, JSONRPCError, JSONRPCResponse
from pydantic import BaseModel
from starlette.types import Receive, Scope, Send

from fastmcp_tasks._compat.shape import Checks, _params

#: `answer(json_response, receive)`: the SDK's entry for this request, in the mode
#: chosen, reading from `receive` (a chooser that read the body passes one replaying it).
Answer = Callable[[bool, Receive], Awaitable[None]]


@dataclass(frozen=True)
class Exchange:
    """What the SDK's entry was handed for one request besides the scope and `receive`."""

    security_settings: Any  # the manager's `TransportSecuritySettings`, or None
    send: Send
    json_response: bool  # the manager's mode: JSON (True) or SSE with its deferral


#: `chooser(scope, receive, answer, exchange)`: awaits `answer` at most once (in JSON mode
#: with `True`), and answers the request itself (through `exchange.send`) when it does not.
Chooser = Callable[[Scope, Receive, Answer, Exchange], Awaitable[None]]

_ENTRY_PARAMS = {
    "app",
    "security_settings",
    "json_response",
    "lifespan_state",
    "scope",
    "receive",
    "send",
}

_SERIALIZE_PARAMS = {"self", "method", "version", "result"}

_choosers: weakref.WeakKeyDictionary[Any, Chooser] = weakref.WeakKeyDictionary()
_sdk_entry: Any = None  # what the manager called before `_entry` (the SDK's function)


def sse_deferral() -> float:
    """Seconds the SDK's SSE mode waits for a handler's first notification before it
    commits to `text/event-stream` (and pings): a handler done sooner is answered in JSON."""
    interval: float = modern_module._SSE_PING_INTERVAL
    return interval


async def _entry(
    app: Any,
    security_settings: Any,
    json_response: bool,
    lifespan_state: Any,
    scope: Scope,
    receive: Receive,
    send: Send,
) -> None:
    sdk = _sdk_entry or modern_module.handle_modern_request
    chooser = _choosers.get(app)
    if chooser is None:
        await sdk(app, security_settings, json_response, lifespan_state, scope, receive, send)
        return

    async def answer(json_mode: bool, replay: Receive) -> None:
        await sdk(app, security_settings, json_mode, lifespan_state, scope, replay, send)

    await chooser(scope, receive, answer, Exchange(security_settings, send, json_response))


async def write_reply(
    reply: JSONRPCResponse | JSONRPCError, scope: Scope, receive: Receive, send: Send
) -> None:
    """Send `reply` as the SDK's modern entry sends one in JSON mode: its serialisation,
    the HTTP status its error code maps to, `application/json`."""
    await modern_module._write(reply, scope, receive, send)


def wire_result(server: Any, protocol_version: str, result: dict[str, Any]) -> dict[str, Any]:
    """A modern-era handler's result as the SDK runner puts it on the wire for a method
    outside the spec's own (`ServerRunner._serialize`) that has no cache hint: a copy,
    `resultType` "complete" when it has none, and `server`'s `serverInfo` stamp in its
    `_meta` unless the handler set one (a `_meta` that is not a dict is left as it is)."""
    dumped = dict(result)
    if dumped.get("resultType") is None:
        dumped["resultType"] = "complete"
    meta = dumped.get("_meta")
    if meta is None:
        dumped["_meta"] = {SERVER_INFO_META_KEY: server.server_info_stamp}
    elif isinstance(meta, dict) and meta.get(SERVER_INFO_META_KEY) is None:
        dumped["_meta"] = {**meta, SERVER_INFO_META_KEY: server.server_info_stamp}
    return dumped


class _Shaper:
    """What `ServerRunner._serialize` reads of its runner: the SDK server, and the stamp."""

    _stamp_server_info = runner_module.ServerRunner._stamp_server_info

    def __init__(self, server: Any) -> None:
        self.server = server


def serialize_result(
    server: Any, method: str, protocol_version: str, result: Any
) -> dict[str, Any]:
    """`result` of a `method` handler in its wire form, by the SDK runner's own code
    (`ServerRunner._serialize`: cache hints, the per-version sieve of a core result, the
    `resultType` and the `serverInfo` stamp), for the SDK server `server`."""
    shaper: Any = _Shaper(server)
    shaped: dict[str, Any] = runner_module.ServerRunner._serialize(
        shaper, method, protocol_version, result
    )
    return shaped


async def mcp_param_rejection(server: Any, request: Any, envelope: Any, verdict: Any) -> Any:
    """What the SDK's modern entry answers a `tools/call` whose `Mcp-Param-*` headers do
    not match its arguments (`_mcp_param_rejection`), or `None` when they match. FastMCP
    serves the tool schemas through `get_tool_input_schema`, so no `lifespan_state` is
    read; without that hook this returns `NotImplemented` (the SDK must decide)."""
    if getattr(server, "get_tool_input_schema", None) is None:
        return NotImplemented
    return await modern_module._mcp_param_rejection(server, request, envelope, verdict, None)


#: What FastMCP runs of its own between the SDK and an extension's tool-call interceptor,
#: as it was at import (a class patched since counts as changed, as a subclass's does).
_CORE_CALL_PATH = {
    name: getattr(FastMCP, name)
    for name in (
        "_on_call_tool",
        "call_tool",
        "_dispatch_component_middleware",
        "_run_middleware",
        "_compose_tool_call_interceptors",
        "_rebind_prefab_tool_names",
    )
}


#: What a subclass of FastMCP may define without changing how FastMCP serves a request.
_HARMLESS = frozenset(
    {"__init__", "__repr__", "__str__", "__doc__", "__module__", "__qualname__", "__dict__"}
    | {"__weakref__", "__annotations__", "__orig_bases__", "__parameters__"}
    | {"__firstlineno__", "__static_attributes__"}
)
#: Every name FastMCP's classes define: a subclass that redefines one may change the path.
_FASTMCP_NAMES = frozenset(n for c in FastMCP.__mro__ for n in vars(c)) - _HARMLESS


def is_core_call_path(server: FastMCP, handler: Any) -> bool:
    """Whether `handler` is FastMCP's own `tools/call` handler of `server` (the bound
    `_on_call_tool` it registers), and everything it runs before the interceptors is
    FastMCP's own: no class of `server`'s between it and FastMCP redefines anything of
    FastMCP's (but `__init__` and the like), and what it calls is not set on the instance
    or patched on FastMCP."""
    if getattr(handler, "__self__", None) is not server:
        return False
    if getattr(handler, "__func__", None) is not MCPOperationsMixin._on_call_tool:
        return False
    kind = type(server)
    for cls in kind.__mro__:
        if cls is FastMCP:
            break
        if not _FASTMCP_NAMES.isdisjoint(vars(cls)):
            return False
    own = vars(server)
    return all(
        name not in own and getattr(kind, name, None) is function
        for name, function in _CORE_CALL_PATH.items()
    )


def choose_reply(app: Any, chooser: Chooser) -> None:
    """Ask `chooser` for each modern request the SDK server `app` answers, in either mode."""
    global _sdk_entry
    if _sdk_entry is None:
        _sdk_entry = manager_module.handle_modern_request
        manager_module.handle_modern_request = _entry
    _choosers[app] = chooser


def forget_reply(app: Any) -> None:
    """Stop asking for `app`: its requests go to the SDK's entry unchanged."""
    _choosers.pop(app, None)


async def _probe_handler(ctx: Any, params: Any) -> None:
    return None


_PROBE = MethodBinding("fastmcp-tasks/probe", BaseModel, _probe_handler)
#: The code of the wrapper FastMCP's `build_method_handler` makes (shared by every one).
_WRAPPER_CODE = build_method_handler(_PROBE).__code__


def method_binding(handler: Any) -> MethodBinding | None:
    """The extension method binding `handler` serves when it is the wrapper FastMCP
    registers for one (`build_method_handler`: protocol gating and the request context
    around `binding.handler`), else `None` (a handler registered some other way)."""
    code = getattr(handler, "__code__", None)
    if code is not _WRAPPER_CODE or "binding" not in code.co_freevars:
        return None
    binding = handler.__closure__[code.co_freevars.index("binding")].cell_contents
    return binding if isinstance(binding, MethodBinding) else None


def modern_entry_seams() -> Checks:
    """The checks of the seams in this module."""
    return {
        "mcp.server.streamable_http_manager.handle_modern_request(app, security_settings, "
        "json_response, lifespan_state, scope, receive, send)": lambda: (
            _params(manager_module.handle_modern_request) == _ENTRY_PARAMS
        ),
        "mcp.server._streamable_http_modern._SSE_PING_INTERVAL": lambda: isinstance(
            modern_module._SSE_PING_INTERVAL, int | float
        ),
        "mcp.server._streamable_http_modern._write(msg, scope, receive, send)": lambda: (
            _params(modern_module._write) == {"msg", "scope", "receive", "send"}
        ),
        "mcp.server.runner.ServerRunner._serialize(self, method, version, result)": lambda: (
            _params(runner_module.ServerRunner._serialize) == _SERIALIZE_PARAMS
        ),
        "mcp.server.runner.ServerRunner._stamp_server_info(self, version, result)": lambda: (
            _params(runner_module.ServerRunner._stamp_server_info) == {"self", "version", "result"}
        ),
        "mcp.server._streamable_http_modern._mcp_param_rejection(app, request, req, verdict, "
        "lifespan_state)": lambda: (
            _params(modern_module._mcp_param_rejection)
            == {"app", "request", "req", "verdict", "lifespan_state"}
        ),
        "fastmcp.server.mixins.mcp_operations.MCPOperationsMixin._on_call_tool(self, ctx, "
        "params)": lambda: _params(MCPOperationsMixin._on_call_tool) == {"self", "ctx", "params"},
        "fastmcp.server.extensions.build_method_handler's `binding` cell": lambda: (
            method_binding(build_method_handler(_PROBE)) is _PROBE
        ),
    }
