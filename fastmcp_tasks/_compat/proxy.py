"""The proxy seam: a FastMCP proxy's backend session resolves our task results.

See `fastmcp_tasks._compat` for what a seam is and how it is checked.
"""

from __future__ import annotations

from typing import Any

from fastmcp_tasks._compat.shape import Checks, _assigned, _callable_with, _raise_for, missing_of

# --- proxy seam (issue 14) -----------------------------------------------------------
# Used by `client.proxy`: a proxy's backend session is built from core's
# `PROXY_TRANSPORT_OPTIONS.session_class`, which the private
# `_with_proxy_transport_options` reads at connect time; `install_proxy_resolution()`
# replaces it with a session that resolves our claimed task results. Checked
# through `proxy_seams()` (in `checks.missing_seams()`) and by the installer itself.


def proxy_session_class() -> type[Any]:
    """The session class core builds every proxy backend connection with."""
    from fastmcp.server.providers import proxy as core_proxy

    session_class: type[Any] = core_proxy.PROXY_TRANSPORT_OPTIONS.session_class
    return session_class


def set_proxy_session_class(session_class: type[Any]) -> None:
    """Make core build every proxy backend connection from now on with `session_class`.

    `TransportOptions` is frozen, so the module constant is replaced; core reads
    it when each backend client is configured, never captures it earlier.
    """
    import dataclasses

    from fastmcp.server.providers import proxy as core_proxy

    core_proxy.PROXY_TRANSPORT_OPTIONS = dataclasses.replace(
        core_proxy.PROXY_TRANSPORT_OPTIONS, session_class=session_class
    )


def session_claim(session: Any, result_type: str) -> Any | None:
    """The `ResultClaim` active on a connected session for `resultType: result_type`.

    The claims the session's `Client` folded in (e.g. the transparent
    `TasksClientExtension`, built with the client's elicitation callback); the
    SDK keeps the negotiated ones only in `ClientSession._active_claims`.
    """
    claims = getattr(session, "_active_claims", None)
    return claims.get(result_type) if isinstance(claims, dict) else None


def session_read_timeout(session: Any) -> float | None:
    """The session-wide read timeout (`ClientSession._session_read_timeout_seconds`)."""
    timeout = getattr(session, "_session_read_timeout_seconds", None)
    return float(timeout) if isinstance(timeout, int | float) else None


def proxy_seams() -> Checks:
    from fastmcp.client.transports.base import TransportOptions
    from fastmcp.server.providers import proxy as core_proxy
    from mcp.client.session import ClientSession

    def options_read_at_call_time() -> bool:
        function = getattr(core_proxy, "_with_proxy_transport_options", None)
        code = getattr(function, "__code__", None)
        return (
            _callable_with(core_proxy, "_with_proxy_transport_options", {"options"})
            and code is not None
            and "PROXY_TRANSPORT_OPTIONS" in code.co_names
        )

    return {
        "fastmcp.server.providers.proxy.PROXY_TRANSPORT_OPTIONS.session_class": lambda: (
            isinstance(core_proxy.PROXY_TRANSPORT_OPTIONS, TransportOptions)
            and issubclass(core_proxy.PROXY_TRANSPORT_OPTIONS.session_class, ClientSession)
        ),
        "fastmcp.server.providers.proxy._with_proxy_transport_options(options) "
        "reads PROXY_TRANSPORT_OPTIONS": options_read_at_call_time,
        "mcp.client.session.ClientSession._active_claims": lambda: _assigned(
            ClientSession, "_active_claims"
        ),
        "mcp.client.session.ClientSession._session_read_timeout_seconds": lambda: _assigned(
            ClientSession, "_session_read_timeout_seconds"
        ),
        "mcp.client.session.ClientSession.call_tool(..., allow_claimed)": lambda: _callable_with(
            ClientSession,
            "call_tool",
            {"name", "arguments", "read_timeout_seconds", "progress_callback", "allow_claimed"},
        ),
    }


def check_proxy_seams() -> None:
    """Raise `IncompatibleFastMCP` unless the proxy seam has the shape we need."""
    _raise_for(missing_of(proxy_seams()))
