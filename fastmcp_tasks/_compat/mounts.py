"""Seams of a task's run: mounted servers and what the caller's request carries in.

See `fastmcp_tasks._compat` for what a seam is and how it is checked.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import mcp_types
from fastmcp import FastMCP
from fastmcp.server import dependencies as core_dependencies

from fastmcp_tasks._compat.shape import Checks, _assigned, _callable_with

# --- task runs: mounted servers and the caller (issue 14) ---------------------------
#
# A mounted tool reaches the parent as a `FastMCPProviderTool` whose `_run` calls
# the child's public `call_tool`, which opens a plain `Context` (hiding the task's)
# around the child's middleware and the body. A task re-enacts that dispatch with
# its own Context at every level; these seams are the pieces of it.


def mounted_target(tool: Any) -> tuple[FastMCP, str, str | None] | None:
    """`(child server, the tool's name there, its version)` for a mounted tool, else None."""
    from fastmcp.server.providers.fastmcp_provider import FastMCPProviderTool

    if not isinstance(tool, FastMCPProviderTool) or tool._server is None:
        return None
    return tool._server, tool._original_name or tool.name, tool.version


async def child_middleware(
    child: FastMCP,
    name: str,
    arguments: dict[str, Any],
    version: str | None,
    task_context: Any,
    call_next: Callable[[str, dict[str, Any]], Any],
) -> Any:
    """Run `child`'s middleware chain around `call_next` exactly as `child.call_tool` would.

    `task_context` is the Context middleware sees (`fastmcp_context`); `call_next`
    receives the (possibly rewritten) name and arguments.
    """
    from fastmcp.server.middleware.middleware import MiddlewareContext
    from fastmcp.server.server import _version_request_meta
    from fastmcp.utilities.versions import VersionSpec

    spec = VersionSpec(eq=version) if version else None
    message = mcp_types.CallToolRequestParams(
        name=name,
        arguments=arguments,
        input_responses=task_context.input_responses,
        request_state=task_context.request_state,
        _meta=_version_request_meta(spec),
    )
    middleware_context = MiddlewareContext[mcp_types.CallToolRequestParams](
        message=message,
        source="client",
        type="request",
        method="tools/call",
        fastmcp_context=task_context,
    )

    async def below(context: MiddlewareContext[mcp_types.CallToolRequestParams]) -> Any:
        return await call_next(context.message.name, context.message.arguments or {})

    result = await child._dispatch_component_middleware(context=middleware_context, call_next=below)
    return await child._rebind_prefab_tool_names(result)


def request_scoped_state(context: Any) -> dict[str, Any] | None:
    """The creating request's `set_state(..., serializable=False)` values (the same dict)."""
    state = getattr(context, "_request_state", None)
    return state if isinstance(state, dict) else None


def adopt_request_state(context: Any, state: dict[str, Any]) -> None:
    """Give a task's Context the creating request's request-scoped state dict."""
    context._request_state = state


def carry_into_task(headers: dict[str, str] | None, session_id: str | None) -> Any:
    """Set core's background-task headers and session id; returns the tokens to reset."""
    return (
        core_dependencies._background_task_headers.set(headers),
        core_dependencies._background_task_session_id.set(session_id),
    )


def uncarry(tokens: Any) -> None:
    """Undo `carry_into_task`."""
    headers, session = tokens
    core_dependencies._background_task_session_id.reset(session)
    core_dependencies._background_task_headers.reset(headers)


def needs_access_token(tool: Any) -> bool:
    """Whether `tool` declares that it needs the caller's token to run.

    True for a `CurrentAccessToken()` / `TokenClaim(...)` parameter, or a
    component-level `auth=` check (core checks it against the caller's token).
    """
    if getattr(tool, "auth", None) is not None:
        return True
    fn = getattr(tool, "fn", None)
    if fn is None:
        return False
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    token_types = (core_dependencies._CurrentAccessToken, core_dependencies._TokenClaim)
    return any(isinstance(p.default, token_types) for p in parameters)


def task_run_seams() -> Checks:
    from fastmcp.server import server as core_server
    from fastmcp.server.providers import fastmcp_provider

    provider_tool = getattr(fastmcp_provider, "FastMCPProviderTool", None)
    return {
        "fastmcp.server.providers.fastmcp_provider.FastMCPProviderTool(_server, _original_name)": (
            lambda: (
                isinstance(provider_tool, type)
                and {"_server", "_original_name"}
                <= set(vars(provider_tool))
                | set(getattr(provider_tool, "__private_attributes__", {}))
            )
        ),
        "FastMCP._dispatch_component_middleware(context, call_next)": lambda: _callable_with(
            FastMCP, "_dispatch_component_middleware", {"context", "call_next"}
        ),
        "fastmcp.server.server._version_request_meta(version)": lambda: _callable_with(
            core_server, "_version_request_meta", {"version"}
        ),
        "fastmcp.server.dependencies._background_task_headers": lambda: hasattr(
            core_dependencies._background_task_headers, "set"
        ),
        "fastmcp.server.dependencies._background_task_session_id": lambda: hasattr(
            core_dependencies._background_task_session_id, "set"
        ),
        "fastmcp.server.dependencies._CurrentAccessToken, _TokenClaim": lambda: (
            isinstance(core_dependencies._CurrentAccessToken, type)
            and isinstance(core_dependencies._TokenClaim, type)
        ),
        "Context._request_state": lambda: _assigned(_context_class(), "_request_state"),
    }


def _context_class() -> type:
    from fastmcp.server.context import Context

    return Context
