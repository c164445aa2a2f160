"""`tasks/get` past FastMCP's request seam when nothing there would see it.

FastMCP puts one adapter at the head of the SDK server's middleware
(`Server.middleware`: `_compat.request_seam_chain`, `_compat.is_request_seam`). For a
request with no component behind it, `tasks/get` included, that adapter applies the
app's shared context, opens the request's SERVER span and runs the method-agnostic pass
of FastMCP middleware (`on_message`, `on_request`, a middleware's own `__call__`) around
the SDK's dispatch. That dispatch (params validation, the handler `methods()` bound, the
result's wire form) is what answers; the pass only lets middleware and tracing watch it.

`tasks/get` is what clients repeat while they wait, so `PollLane` takes the adapter's
place and sends a modern-era `tasks/get` straight on to that same dispatch when the pass
would be unobservable:

- no middleware on the server would see it (`observing_middleware`: none overrides,
  on its class or on the instance, a hook the pass calls);
- no tracer provider is installed (`observability.tracing_installed`), so the seam's
  SERVER span would record nothing;
- the request carries no trace context in its `_meta` (`traceparent`, `tracestate`),
  which the seam would make current for the handler even without a provider.

The answer is the same either way; 11-16 % of the request's instructions are saved (by
`bench.instructions`, per store). Every other request, and any `tasks/get` something
could watch, goes through the adapter as before. The condition is read per request, so
middleware added or a provider installed after startup is honoured at once (no verdict
is kept between requests). The 2025-11-25 `tasks/get` always takes the adapter.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Mapping
from typing import Any

from fastmcp import FastMCP
from fastmcp.server.middleware import Middleware
from fastmcp.telemetry import TRACE_PARENT_KEY, TRACE_STATE_KEY
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from fastmcp_tasks import _compat
from fastmcp_tasks.server.observability import tracing_installed
from fastmcp_tasks.wire.names import METHOD_GET

logger = logging.getLogger("fastmcp_tasks.configuration")

_MODERN = frozenset(MODERN_PROTOCOL_VERSIONS)
#: What FastMCP's method-agnostic pass calls on a middleware (`_dispatch_handler` builds
#: the chain of hooks).
PASS_HOOKS = ("__call__", "on_message", "on_request", "_dispatch_handler")
#: The `_meta` keys of a trace context the seam would make current.
_TRACE_KEYS = (TRACE_PARENT_KEY, TRACE_STATE_KEY)


def observing_middleware(middleware: Any, hooks: tuple[str, ...] = PASS_HOOKS) -> bool:
    """Whether `middleware` would see a request whose pass calls `hooks` (by default a
    `tasks/get`'s, the method-agnostic ones): its class overrides one of them, or the
    instance holds one of its own, or it is not a FastMCP `Middleware` at all (a plain
    callable sees every message)."""
    if not isinstance(middleware, Middleware):
        return True
    own = getattr(middleware, "__dict__", None)
    if own and not own.keys().isdisjoint(hooks):
        return True
    kind = type(middleware)
    # against the base's hooks as they were at import: a base patched since (by an
    # instrumentation library, say) counts as watching, whatever the subclass does
    return any(getattr(kind, hook, None) is not _BASE_HOOKS[hook] for hook in hooks)


#: `Middleware`'s own hooks, kept at import (see `observing_middleware`).
_BASE_HOOKS = {hook: getattr(Middleware, hook) for hook in (*PASS_HOOKS, "on_call_tool")}


class PollLane:
    """Stands in the SDK server's middleware list where FastMCP's adapter was (module doc).

    `taken` counts the `tasks/get` requests that went past the adapter.
    """

    def __init__(self, server: FastMCP, seam: Any) -> None:
        self._server = weakref.ref(server)  # as the adapter holds it: no cycle through us
        self.seam = seam  # FastMCP's adapter: everything else goes through it
        self.taken = 0

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        if ctx.method == METHOD_GET and self._unobserved(ctx):
            self.taken += 1
            return await call_next(ctx)
        return await self.seam(ctx, call_next)

    def _unobserved(self, ctx: Any) -> bool:
        if ctx.request_id is None:
            return False
        return unobserved(self._server(), ctx.protocol_version, ctx.params)


def unobserved(server: FastMCP | None, protocol_version: str, params: Any) -> bool:
    """Whether FastMCP's adapter could be skipped for a `tasks/get` at `protocol_version`
    with `params` (module doc): modern, no trace context, no middleware, no tracer."""
    if server is None or protocol_version not in _MODERN:
        return False
    meta = params.get("_meta") if isinstance(params, Mapping) else None
    if isinstance(meta, Mapping) and any(key in meta for key in _TRACE_KEYS):
        return False
    if any(observing_middleware(m) for m in server.middleware):
        return False
    return not tracing_installed()


def install(server: FastMCP) -> PollLane | None:
    """Put a `PollLane` in place of FastMCP's adapter; `None` (logged) when the adapter is
    not where this FastMCP version keeps it, and then nothing changes."""
    chain = _compat.request_seam_chain(server)
    for index, entry in enumerate(chain):
        if isinstance(entry, PollLane):  # a lifespan that did not end cleanly
            return entry
        if _compat.is_request_seam(entry):
            lane = PollLane(server, entry)
            chain[index] = lane
            return lane
    logger.info("FastMCP's request seam was not found: tasks/get takes the usual path")
    return None


def uninstall(server: FastMCP, lane: PollLane | None) -> None:
    """Put FastMCP's adapter back where `lane` stood."""
    if lane is None:
        return
    chain = _compat.request_seam_chain(server)
    for index, entry in enumerate(chain):
        if entry is lane:
            chain[index] = lane.seam
            return


__all__ = [
    "PASS_HOOKS",
    "PollLane",
    "install",
    "observing_middleware",
    "uninstall",
    "unobserved",
]
