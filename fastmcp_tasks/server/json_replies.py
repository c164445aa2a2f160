"""A task's own requests answered in one JSON body, without the SDK's SSE deferral.

In SSE mode (FastMCP's default) the SDK serves a modern-era request by running its
handler as a sibling task beside a disconnect watcher and deferring the choice between
`application/json` and `text/event-stream` until the handler emits a notification or
`_compat.sse_deferral()` seconds (15) pass (`_compat.modern_entry`). A handler that ends
sooner without emitting is answered in JSON: the bytes and status JSON mode sends. That
machinery (a task group, two tasks, a memory stream, a cancel scope) costs about as many
instructions as a poll's own work, and two requests of a task never need it:

- `tasks/get`: its handler sends no notification;
- a `tools/call` that creates a task: the tool runs later, in the engine, never inside
  the request, so nothing of it can emit there.

Both are bounded by `store_timeout`. `JsonReplies` has the SDK answer them in JSON mode
when all of this holds, and leaves every other request to SSE mode (a `tasks/get` that
qualifies is answered at the entry itself when it is plain enough: `direct_polls`, and so
is a call: `direct_calls`; on a server in JSON mode already, those direct answers are the
only requests it takes):

- `store_timeout` is set and at most half the deferral (7.5 s; the default is 5 s), so
  the SDK could not have committed to SSE before the handler ended, even with the
  request's own handling added to its store calls;
- the request accepts `application/json` and `text/event-stream` (else SSE mode's `406`
  stands);
- nothing but FastMCP and the SDK's own handling sees it: the SDK server's middleware
  list holds only FastMCP's seam (or `poll_lane`'s lane in its place) and the SDK's
  request-state boundary, no FastMCP middleware would see it
  (`poll_lane.observing_middleware`, with `on_call_tool` for a call), and for a call no
  other extension intercepts tool calls;
- a call is unauthenticated, its `_meta` declares the tasks extension (C2, read as the
  interceptor reads it), the server resolves names from its own tools only (no mounted
  server, proxy, or provider or transform other than FastMCP's visibility rules: their
  answers could depend on the request), and the tool it names, resolved as core
  resolves it at the version asked, is a task tool with no `foreground_input` hook
  (the one hook of the tool's author before a task exists that is handed the request's
  `Context`; a `concurrency_key` and the arguments' validators are handed the arguments,
  and have no way to emit). The interceptor then creates a task, refuses with an error,
  or lets core report invalid arguments: none of them emits.

An unauthenticated modern-era call has no client identity for per-client visibility
rules to hang on, so its tool resolves inside the request exactly as it did before:
the interceptor takes that resolution (`call_tool_of`, through a context variable set
only while the SDK answers the call) instead of resolving it a second time: no code of
the server's author runs between the two. (A change another request makes to the tools
in those microseconds is the race there already is between the interceptor's lookup and
the task's run.) An authenticated call keeps SSE mode: inside the request its
principal's rules could make the name another tool than the one resolved before.

The one difference left is a client that closes the connection before the answer. In
SSE mode that cancels the handler; here the bounded work goes on: a poll's answer is
dropped, and a call's task is created and runs, as it also does in SSE mode when the
close comes after the store has committed it. A client that must not start work twice
sends an idempotency key and calls again with it. A call's body is read once here (the
SDK's body limit has already buffered it) and replayed to the SDK.
"""

from __future__ import annotations

import json
import logging
import weakref
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from fastmcp import FastMCP
from fastmcp.server.dependencies import extract_version_spec
from fastmcp.server.extensions import ServerExtension
from fastmcp.server.sessions import current_principal
from fastmcp.server.transforms import Visibility
from fastmcp.tools.base import Tool
from mcp.server.request_state import RequestStateBoundary
from mcp.server.streamable_http import check_accept_headers
from mcp_types import CLIENT_CAPABILITIES_META_KEY
from starlette.requests import Request
from starlette.types import Message, Receive, Scope

from fastmcp_tasks import _compat
from fastmcp_tasks.server.direct_calls import Creating, DirectCalls
from fastmcp_tasks.server.direct_polls import DirectPolls
from fastmcp_tasks.server.engine.call import leaf_of, resolve_tool
from fastmcp_tasks.server.handlers import TaskMethods
from fastmcp_tasks.server.options import options_of
from fastmcp_tasks.server.poll_lane import PASS_HOOKS, PollLane, observing_middleware
from fastmcp_tasks.wire.names import METHOD_GET, TASKS_EXTENSION_ID

logger = logging.getLogger("fastmcp_tasks.execution")  # where a failed tool lookup goes

_METHOD_HEADER = b"mcp-method"
_CALL = "tools/call"
_CALL_HOOKS = (*PASS_HOOKS, "on_call_tool")
#: In the body of every call that declares the tasks extension (unless JSON-escaped:
#: then the call takes SSE mode, as it would have anyway).
_OPT_IN = TASKS_EXTENSION_ID.encode()


@dataclass(frozen=True)
class _Resolved:
    """The tool a chosen call's name resolved to, for that call's interceptor."""

    server: FastMCP
    name: str
    version: str | None
    tool: Tool
    body: Any  # the request's body, decoded once


#: Set only while the SDK answers a call `JsonReplies` chose (module doc).
_resolved: ContextVar[_Resolved | None] = ContextVar("fastmcp_tasks_resolved", default=None)


class JsonReplies:
    """The chooser `_compat.choose_reply` asks for one server (module doc).

    `taken` counts, per method, the requests of an SSE-mode server chosen for a JSON
    answer: handed to the SDK's JSON mode (one the SDK then rejects, a header that does
    not match the body say, is counted too) or answered at the entry (`polls`, `calls`).
    """

    def __init__(
        self,
        server: FastMCP,
        store_timeout: float | None,
        polls: DirectPolls | None = None,
        calls: DirectCalls | None = None,
    ) -> None:
        self._server = weakref.ref(server)
        self.bounded = store_timeout is not None and store_timeout <= _compat.sse_deferral() / 2
        self.taken = {METHOD_GET: 0, _CALL: 0}
        self.polls = polls  # answers a plain `tasks/get` itself (`direct_polls`)
        self.calls = calls  # answers a plain task-creating call itself (`direct_calls`)

    async def __call__(
        self, scope: Scope, receive: Receive, answer: _compat.Answer, exchange: _compat.Exchange
    ) -> None:
        method = _header(scope, _METHOD_HEADER)
        json_mode = exchange.json_response  # JSON mode already: only the direct answers
        if method not in self.taken or not (self.bounded or json_mode):
            await answer(json_mode, receive)
            return
        message: Message = {}
        if method == _CALL:  # most calls run in the foreground: the cheapest test first
            if json_mode and self.calls is None:
                await answer(True, receive)
                return
            message = await receive()
            receive = _replaying(message, receive)
            if _OPT_IN not in message.get("body", b"") or _authenticated(scope):
                await answer(json_mode, receive)
                return
        server = self._server()
        if server is None or not self._plain(scope, server, method, sse=not json_mode):
            await answer(json_mode, receive)
            return
        if method == METHOD_GET:
            if not json_mode:
                self.taken[method] += 1
            replay = await self._poll(scope, receive, exchange)
            if replay is not None:
                await answer(True, replay)
            return
        resolved = await self._task_tool(server, message)
        if resolved is None:
            await answer(json_mode, receive)
            return
        if not json_mode:
            self.taken[method] += 1
        if self.calls is not None and await self.calls.answer(
            scope, resolved.body, receive, exchange, resolved.tool, resolved.name, resolved.version
        ):
            return
        token = _resolved.set(resolved)
        try:
            await answer(True, receive)
        finally:
            _resolved.reset(token)

    async def _poll(
        self, scope: Scope, receive: Receive, exchange: _compat.Exchange
    ) -> Receive | None:
        """A plain `tasks/get` answered here (`direct_polls`): `None`; else what replays its
        body for the SDK."""
        if self.polls is None:
            return receive
        message = await receive()
        replay = _replaying(message, receive)
        return None if await self.polls.answer(scope, message, replay, exchange) else replay

    @staticmethod
    def _plain(scope: Scope, server: FastMCP, method: str, *, sse: bool = True) -> bool:
        """Nothing but FastMCP's and the SDK's own handling would see the request, and its
        mode (`sse`: SSE's, which needs both kinds accepted) would not 406 it."""
        has_json, has_sse = check_accept_headers(Request(scope))
        hooks = PASS_HOOKS if method == METHOD_GET else _CALL_HOOKS
        return (
            has_json
            and (has_sse or not sse)
            and all(_known(entry) for entry in _compat.request_seam_chain(server))
            and not any(observing_middleware(m, hooks) for m in server.middleware)
        )

    async def _task_tool(self, server: FastMCP, message: Message) -> _Resolved | None:
        """The call's tool, when the interceptor will make it a task (module doc)."""
        if message.get("type") != "http.request" or message.get("more_body", False):
            return None
        try:
            decoded = json.loads(message["body"])
            params = decoded.get("params")
        except (ValueError, RecursionError, AttributeError):
            return None  # the SDK answers it
        if not isinstance(params, Mapping) or not _opted_in(params.get("_meta")):
            return None
        name = params.get("name")
        if not isinstance(name, str) or _other_interceptors(server) or not _own_tools(server):
            return None
        version = extract_version_spec(params["_meta"])
        try:
            tool = await resolve_tool(server, name, version)
            if tool is None or tool.task_config.mode == "forbidden":
                return None
            if options_of(await leaf_of(tool)).foreground_input is not None:
                return None
        except Exception:  # the request itself will meet whatever this was
            logger.debug("could not resolve %r before its call", name, exc_info=True)
            return None
        return _Resolved(server, name, version, tool, decoded)


async def call_tool_of(server: FastMCP, name: str, version: str | None) -> Tool | None:
    """The tool a `tools/call` of `name` at `version` runs, resolved as core resolves it
    (`engine.call.resolve_tool`), or the one this call resolved to before its handler ran
    when `JsonReplies` chose it: an unauthenticated modern-era call, so no per-client
    visibility rule applies and the resolution inside the request is the same."""
    stash = _resolved.get()
    if stash is not None and stash.server is server:
        if stash.name == name and stash.version == version:
            return stash.tool
    return await resolve_tool(server, name, version)


def _known(entry: Any) -> bool:
    """An entry of the SDK server's middleware list that emits nothing and leaves the
    request as it is: FastMCP's seam, the lane in its place, the request-state boundary."""
    return isinstance(entry, PollLane | RequestStateBoundary) or _compat.is_request_seam(entry)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None


def _authenticated(scope: Scope) -> bool:
    """Whether the request carries a principal: per-client visibility rules could then
    make its tool another inside the request than before it (module doc)."""
    user = scope.get("user")
    return bool(getattr(user, "is_authenticated", False)) or current_principal() is not None


def _opted_in(meta: Any) -> bool:
    """Whether `_meta` declares the tasks extension, as FastMCP's reading of it says."""
    if not isinstance(meta, Mapping):
        return False
    capabilities = meta.get(CLIENT_CAPABILITIES_META_KEY)
    extensions = capabilities.get("extensions") if isinstance(capabilities, Mapping) else None
    return isinstance(extensions, Mapping) and isinstance(
        extensions.get(TASKS_EXTENSION_ID), Mapping
    )


def _other_interceptors(server: FastMCP) -> bool:
    """Whether an extension other than ours wraps tool calls (it might emit)."""
    base = ServerExtension.intercept_tool_call
    return any(
        identifier != TASKS_EXTENSION_ID and type(extension).intercept_tool_call is not base
        for identifier, extension in _compat.server_extensions(server).items()
    )


def _own_tools(server: FastMCP) -> bool:
    """Whether `server` resolves a name from its own tools only, through FastMCP's own
    visibility rules: nothing in that depends on the request (a mounted server, a proxy
    or a provider or transform of the author's own might)."""
    local = server.local_provider
    transforms = (*server.transforms, *local.transforms)
    return server.providers == [local] and all(type(t) is Visibility for t in transforms)


def _replaying(message: Message, receive: Receive) -> Receive:
    pending = [message]

    async def replay() -> Message:
        return pending.pop() if pending else await receive()

    return replay


def install(
    server: FastMCP,
    store_timeout: float | None,
    methods: TaskMethods | None = None,
    extension: Creating | None = None,
) -> JsonReplies:
    """Have the SDK ask a new `JsonReplies` for `server`'s modern requests; with `methods`
    (the task methods bound), a plain poll is answered without the SDK (`direct_polls`),
    and with the `extension`, a plain task-creating call (`direct_calls`)."""
    polls = None if methods is None else DirectPolls(server, methods)
    calls = None if extension is None else DirectCalls(server, extension)
    replies = JsonReplies(server, store_timeout, polls, calls)
    _compat.choose_reply(_compat.low_level_server(server), replies)
    return replies


def uninstall(server: FastMCP) -> None:
    """Stop asking for `server`: SSE mode for all its requests again."""
    _compat.forget_reply(_compat.low_level_server(server))


__all__ = ["JsonReplies", "call_tool_of", "install", "uninstall"]
