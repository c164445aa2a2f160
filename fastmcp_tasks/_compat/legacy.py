"""Seams of the 2025-11-25 task surface: the legacy result sieve and capabilities.

On a 2025-11-25 connection the SDK's runner sieves every spec-method result
through the per-version surface (`mcp_types.methods.serialize_server_result`,
whose keyword default `surface` is `SERVER_RESULTS`). That surface knows only
`CallToolResult` for `tools/call`, though the 2025-11-25 schema also allows a
`CreateTaskResult` there for a task-augmented call, so a task's creation would
become -32603. `allow_task_results()` widens exactly that one entry of the
default surface to the union the schema defines (the SDK's own generated
2025-11-25 models), once.

FastMCP's legacy `initialize` advertises no `capabilities.tasks` (FastMCP 4
dropped the 2025-11-25 tasks); `advertise_tasks(server, capability)` adds it to
that server's capabilities for 2025-11-25 connections only (the 2026 surface,
`server/discover`, never shows it).

See `fastmcp_tasks._compat` for what a seam is and how it is checked.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import mcp_types
from mcp_types import methods as sdk_methods

from fastmcp_tasks._compat.shape import Checks

LEGACY = "2025-11-25"
_KEY = ("tools/call", LEGACY)


def _legacy_models() -> tuple[type[Any], type[Any]]:
    from mcp_types import _v2025_11_25 as v1

    return v1.CallToolResult, v1.CreateTaskResult


def allow_task_results() -> None:
    """Let a 2025-11-25 `tools/call` answer a `CreateTaskResult` (idempotent)."""
    defaults = sdk_methods.serialize_server_result.__kwdefaults__ or {}
    surface = defaults["surface"]
    call_result, create_result = _legacy_models()
    if surface.get(_KEY) != call_result:
        return  # already widened (or changed by the SDK: `legacy_seams` reports that)
    widened = dict(surface)
    widened[_KEY] = call_result | create_result
    sdk_methods.serialize_server_result.__kwdefaults__ = {
        **defaults,
        "surface": MappingProxyType(widened),
    }


def advertise_tasks(server: Any, capability: dict[str, Any]) -> None:
    """Add `capabilities.tasks` to `server`'s 2025-11-25 `initialize` (idempotent)."""
    low_level = server._mcp_server
    original: Callable[..., mcp_types.ServerCapabilities] = low_level.get_capabilities
    if getattr(original, "__fastmcp_tasks_legacy__", False):
        return
    tasks = mcp_types.ServerTasksCapability.model_validate(capability)

    def get_capabilities(*args: Any, **kwargs: Any) -> mcp_types.ServerCapabilities:
        capabilities = original(*args, **kwargs)
        if kwargs.get("protocol_version") in (LEGACY, None):
            capabilities = capabilities.model_copy(update={"tasks": tasks})
        return capabilities

    get_capabilities.__fastmcp_tasks_legacy__ = True  # type: ignore[attr-defined]
    low_level.get_capabilities = get_capabilities


def requested_task(context: Any) -> dict[str, Any] | None:
    """The `params.task` of the 2025-11-25 `tools/call` being served, or None.

    FastMCP rebuilds `CallToolRequestParams` for the middleware chain without the
    V1 `task` field; the raw params are on the SDK request context it wraps
    (`FastMCPRequestContext._srctx`, "the escape hatch").
    """
    request = getattr(context, "request_context", None)
    raw = getattr(getattr(request, "_srctx", None), "params", None)
    task = raw.get("task") if isinstance(raw, Mapping) else None
    return dict(task) if isinstance(task, Mapping) else None


def legacy_seams() -> Checks:
    """The checks of the seams in this module."""

    def surface_widenable() -> bool:
        surface = (sdk_methods.serialize_server_result.__kwdefaults__ or {}).get("surface")
        call_result, create_result = _legacy_models()
        return isinstance(surface, MappingProxyType) and surface.get(_KEY) in (
            call_result,
            call_result | create_result,
        )

    from dataclasses import fields

    from fastmcp.server.dependencies import FastMCPRequestContext

    return {
        "fastmcp.server.dependencies.FastMCPRequestContext._srctx": lambda: (
            "_srctx" in {f.name for f in fields(FastMCPRequestContext)}
        ),
        "mcp_types.methods.serialize_server_result(surface=SERVER_RESULTS)": surface_widenable,
        "mcp_types._v2025_11_25.CallToolResult, CreateTaskResult": lambda: all(
            isinstance(model, type) for model in _legacy_models()
        ),
        "mcp_types.ServerCapabilities.tasks": lambda: (
            "tasks" in mcp_types.ServerCapabilities.model_fields
        ),
    }
