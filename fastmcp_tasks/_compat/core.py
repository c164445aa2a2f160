"""Seams of the server half and the client's claim index (see `fastmcp_tasks._compat`)."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import mcp_types
from fastmcp import Client, FastMCP
from fastmcp.server import dependencies as core_dependencies
from fastmcp.server import low_level as fastmcp_low_level
from fastmcp.server.mixins import mcp_operations
from fastmcp.tools import function_tool
from fastmcp.tools.base import Tool, ToolResult
from mcp_types import CONNECTION_CLOSED, PARSE_ERROR
from pydantic import TypeAdapter

from fastmcp_tasks._compat.shape import Checks, _assigned, _callable_with, _params

CoreProgress = core_dependencies.Progress


# --- server: dispatch ------------------------------------------------------------


def is_client_tool_call() -> bool:
    """Whether the tool call being intercepted is the one the client's `tools/call` named.

    A tool a tool body (or middleware) calls must never become a task. Core
    tracks this in a private context variable and exposes no public reader.
    """
    return bool(core_dependencies._is_client_tool_call())


async def run_tool(tool: Tool, arguments: dict[str, Any]) -> ToolResult:
    """Run a tool's body exactly as `FastMCP.call_tool` does, without the dispatch around it.

    `Tool._run` is the validation-and-body step core calls; the public
    `FastMCP.call_tool` re-enters middleware and the extension interceptors
    (which would make the task again) and needs a foreground request.
    """
    return await tool._run(arguments)


def normalize_call_tool_result(result: Any) -> mcp_types.CallToolResult:
    """Core's conversion of a tool's MCP result into the `CallToolResult` on the wire.

    Private to `_on_call_tool`; a task's result must be byte-identical (C27).
    """
    return mcp_operations._normalize_call_tool_result(result)


async def rebind_prefab_tool_names(server: FastMCP, result: ToolResult) -> ToolResult:
    """Re-address a Prefab payload as `FastMCP.call_tool` does above its middleware chain.

    Private to `call_tool`, which a task cannot go through (see `run_tool`).
    """
    rebound: ToolResult = await server._rebind_prefab_tool_names(result)
    return rebound


def mask_error_details(server: FastMCP) -> bool:
    """Whether `server` hides unexpected exception details from clients.

    Core keeps the per-server `mask_error_details=` only in a private attribute.
    Fails closed: a server without the attribute masks (startup checks it too).
    """
    return bool(getattr(server, "_mask_error_details", True))


def low_level_server(server: FastMCP) -> Any:
    """The SDK low-level server behind `server`.

    Needed for `add_request_handler` (serving `subscriptions/listen`, which the
    extension hook `methods()` cannot bind: the SDK serves that method itself)
    and for the `serverInfo` stamp a task's inline result carries. FastMCP keeps
    it in a private attribute with no getter.
    """
    return server._mcp_server


def server_extension(server: FastMCP, identifier: str) -> Any | None:
    """The extension registered on `server` under `identifier`, or None.

    `fastmcp-tasks worker` finds the `TasksExtension` of an imported server;
    FastMCP has `add_extension` but no getter.
    """
    return server_extensions(server).get(identifier)


def server_extensions(server: FastMCP) -> dict[str, Any]:
    """Every extension registered on `server`, by identifier (FastMCP has no getter)."""
    extensions: dict[str, Any] = server._extensions
    return extensions


def server_lifespan(server: FastMCP) -> AbstractAsyncContextManager[None]:
    """`server`'s full lifespan (its own, its extensions', its providers').

    `fastmcp-tasks worker` runs a server's task engine without serving MCP;
    FastMCP enters this only from its transports, with no public entry point.
    """
    manager: AbstractAsyncContextManager[None] = server._lifespan_manager()
    return manager


# --- server: argument pre-check ------------------------------------------------


def call_adapter(tool: Any) -> TypeAdapter[Any] | None:
    """The pydantic call adapter `FunctionTool.run` validates arguments with, or None.

    Built as core builds it (the private `_wrap_body_errors` around the body,
    `without_injected_parameters`), so a pre-check rejects exactly what the
    synchronous path rejects. None when only running the body could validate
    (a sync wrapper). Core has no public "validate these arguments" call.
    """
    body = function_tool._wrap_body_errors(tool.fn, materialize_generators=True)
    wrapper = core_dependencies.without_injected_parameters(body, run_in_thread=tool.run_in_thread)
    if not function_tool.is_coroutine_function(wrapper):
        return None
    adapter: TypeAdapter[Any] = function_tool.get_cached_typeadapter(
        function_tool._wrap_body_errors(wrapper)
    )
    return adapter


def validate_input(adapter: TypeAdapter[Any], arguments: dict[str, Any]) -> Any:
    """Validate `arguments` with core's private `_validate_input` and strictness setting.

    Returns the adapter call's result (a coroutine the caller closes unawaited);
    raises pydantic's `ValidationError` when core would reject the arguments.
    """
    strict = function_tool._strict_input_validation()
    return function_tool._validate_input(adapter, arguments, strict=strict)


def is_function_tool(tool: Any) -> bool:
    """Whether `tool` is a `FunctionTool` (the only kind `call_adapter` understands)."""
    return isinstance(tool, function_tool.FunctionTool)


# --- server: the Progress dependency ---------------------------------------------


def core_progress_aenter() -> Callable[..., Any] | None:
    """Core `Progress.__aenter__`, which our adapter wraps.

    Core's `Progress` only knows docket as a task engine and has no hook for
    another, so the adapter replaces this one method (see `engine.progress`).
    """
    original = CoreProgress.__dict__.get("__aenter__")
    return original if callable(original) else None


def set_core_progress_aenter(method: Callable[..., Any]) -> None:
    """Install `method` as core `Progress.__aenter__` (the adapter)."""
    CoreProgress.__aenter__ = method  # type: ignore[method-assign]


def bind_progress(instance: Any, impl: Any) -> None:
    """Point a core `Progress` instance at `impl`: the private `_impl` its methods call."""
    instance._impl = impl


# --- client ------------------------------------------------------------------------


def result_claims(client: Client[Any]) -> dict[Any, Any]:
    """The client's result-model → claim index (`Client._claim_by_model`).

    A handle finds the `TasksClientExtension` folded into a client through the
    claim of `CreateTaskResult`; FastMCP has no public getter for either.
    """
    claims = getattr(client, "_claim_by_model", None)
    return dict(claims) if isinstance(claims, dict) else {}


#: JSON-RPC errors the SDK's streamable HTTP client invents when a response
#: stream breaks (they are not the server's answer): code → message prefix. The
#: SDK marks them no other way; `check_seams()` reads its source for the prefixes.
SDK_TRANSPORT_ERRORS: dict[int, str] = {
    CONNECTION_CLOSED: "SSE stream",
    PARSE_ERROR: "Failed to parse JSON response",
}

_SDK_TRANSPORT_MODULE = "mcp.client.streamable_http"


# --- their checks ------------------------------------------------------------------


def _sdk_prefixes_present() -> bool:
    spec = importlib.util.find_spec(_SDK_TRANSPORT_MODULE)
    if spec is None or spec.origin is None:
        return False
    try:
        source = Path(spec.origin).read_text(encoding="utf-8")
    except OSError:
        return False
    return all(prefix in source for prefix in SDK_TRANSPORT_ERRORS.values())


def core_seams() -> Checks:
    """The checks of the seams in this module."""
    return {
        "fastmcp.server.dependencies._is_client_tool_call()": lambda: _callable_with(
            core_dependencies, "_is_client_tool_call", set()
        ),
        "Tool._run(arguments)": lambda: _callable_with(Tool, "_run", {"arguments"}),
        "fastmcp.server.mixins.mcp_operations._normalize_call_tool_result(result)": (
            lambda: _callable_with(mcp_operations, "_normalize_call_tool_result", {"result"})
        ),
        "FastMCP._rebind_prefab_tool_names(result)": lambda: _callable_with(
            FastMCP, "_rebind_prefab_tool_names", {"result"}
        ),
        "FastMCP._mask_error_details": lambda: _assigned(FastMCP, "_mask_error_details"),
        "FastMCP._mcp_server": lambda: _assigned(FastMCP, "_mcp_server"),
        "FastMCP._extensions": lambda: _assigned(FastMCP, "_extensions"),
        "FastMCP._lifespan_manager()": lambda: _callable_with(FastMCP, "_lifespan_manager", set()),
        "fastmcp.tools.function_tool._wrap_body_errors(fn, materialize_generators)": (
            lambda: _callable_with(
                function_tool, "_wrap_body_errors", {"fn", "materialize_generators"}
            )
        ),
        "fastmcp.tools.function_tool._validate_input(type_adapter, value, strict)": (
            lambda: (
                _callable_with(function_tool, "_validate_input", {"value", "strict"})
                and len(_params(function_tool._validate_input)) == 3
            )
        ),
        "fastmcp.tools.function_tool._strict_input_validation()": lambda: _callable_with(
            function_tool, "_strict_input_validation", set()
        ),
        "fastmcp.server.dependencies.without_injected_parameters(fn, run_in_thread)": (
            lambda: (
                _callable_with(core_dependencies, "without_injected_parameters", {"fn"})
                and "run_in_thread" in _params(core_dependencies.without_injected_parameters)
            )
        ),
        "fastmcp.tools.function_tool.FunctionTool": lambda: isinstance(
            getattr(function_tool, "FunctionTool", None), type
        ),
        "fastmcp.dependencies.Progress.__aenter__": lambda: core_progress_aenter() is not None,
        "fastmcp.dependencies.Progress._impl": lambda: (
            "_impl" in CoreProgress.__dict__
            or "_impl" in getattr(CoreProgress, "__annotations__", {})
        ),
        "fastmcp.Client._claim_by_model": lambda: _assigned(Client, "_claim_by_model"),
        f"{_SDK_TRANSPORT_MODULE} error prefixes {sorted(SDK_TRANSPORT_ERRORS.values())}": (
            _sdk_prefixes_present
        ),
    }


# --- server: the request seam ------------------------------------------------------


def request_seam_chain(server: FastMCP) -> list[Any]:
    """The SDK server's middleware list (`Server.middleware`, public in the SDK), which
    holds FastMCP's request seam; `server.poll_lane` swaps an entry of it."""
    chain: list[Any] = low_level_server(server).middleware
    return chain


def is_request_seam(entry: Any) -> bool:
    """Whether `entry` is FastMCP's request seam: the adapter that runs the shared context,
    the SERVER span and the method-agnostic middleware pass for every request."""
    seam = getattr(fastmcp_low_level, "FastMCPServerMiddleware", None)
    return isinstance(seam, type) and isinstance(entry, seam)
