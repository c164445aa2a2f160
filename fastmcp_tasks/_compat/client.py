"""Seams of the client half: the elicitation callback, FastMCP's result parser, its HTTP client.

See `fastmcp_tasks._compat` for what a seam is and how it is checked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import mcp_types
from fastmcp import Client

from fastmcp_tasks._compat.shape import Checks, _assigned, _callable_with, _params

# Used by the client side (`client.handles`, `client.drive`); checked through
# `client_seams()` in `checks.missing_seams()`.

if TYPE_CHECKING:
    from fastmcp.client.client import CallToolResult as FastMCPCallToolResult
    from mcp.client.session import ElicitationFnT


def elicitation_callback(client: Client[Any]) -> ElicitationFnT | None:
    """The SDK elicitation callback `client` built from its `elicitation_handler`, or None.

    `ToolTask.result()` answers in-task elicitations with it, as `call_tool()`
    does; FastMCP keeps it only in `Client._elicitation_callback`.
    """
    callback = getattr(client, "_elicitation_callback", None)
    return callback if callable(callback) else None


async def parse_tool_result(
    client: Client[Any],
    name: str | None,
    result: mcp_types.CallToolResult,
    *,
    raise_on_error: bool,
    pinned_version: str | None = None,
) -> FastMCPCallToolResult:
    """Turn an MCP `CallToolResult` into FastMCP's, exactly as `Client.call_tool()` does.

    With `name`, this is the client's private `_parse_call_tool_result` (the
    tool's output schema types `.data`). Without one (a resumed task of an
    unknown tool), core's module-level parser runs with no schema: `.data` is the
    structured content as it arrived (unwrapped when the result's meta says so).
    """
    from fastmcp.client.mixins import tools as tools_mixin

    if name is not None:
        method = client._parse_call_tool_result
        # FastMCP 4.2 pins the schema lookup to the version called; 4.1 has one per name
        pinned = {"pinned_version": pinned_version} if _PINS_VERSION else {}
        parsed: FastMCPCallToolResult = await method(
            name, result, raise_on_error=raise_on_error, **pinned
        )
        return parsed

    async def no_listing() -> None:
        return None

    unknown = "(unknown tool)"
    parsed = await tools_mixin._parse_call_tool_result(
        name=unknown,
        result=result,
        tool_output_schemas={unknown: None},
        list_tools_fn=no_listing,
        client_name=client.name,
        raise_on_error=raise_on_error,
    )
    return parsed


_PINS_VERSION = "pinned_version" in _params(Client._parse_call_tool_result)


def install_default_http_client(factory: Callable[..., Any]) -> None:
    """Make `factory` the httpx client FastMCP's HTTP transport builds when given none.

    `StreamableHttpTransport.connect_session` calls the SDK's private
    `mcp.shared._httpx_utils.create_mcp_http_client(headers=, timeout=, auth=)` by
    its name in `fastmcp.client.transports.http` when the `Client` has no
    `httpx_client_factory` (and no `verify`); there is no public default to set.
    Idempotent.
    """
    from fastmcp.client.transports import http as fastmcp_http

    if getattr(fastmcp_http.create_mcp_http_client, "__fastmcp_tasks__", False):
        return
    factory.__fastmcp_tasks__ = True  # type: ignore[attr-defined]
    fastmcp_http.create_mcp_http_client = factory


def client_seams() -> Checks:
    from fastmcp.client.mixins import tools as tools_mixin
    from fastmcp.client.transports import http as fastmcp_http

    return {
        "fastmcp.client.transports.http.create_mcp_http_client(headers, timeout, auth)": (
            lambda: _callable_with(
                fastmcp_http, "create_mcp_http_client", {"headers", "timeout", "auth"}
            )
        ),
        "fastmcp.Client._elicitation_callback": lambda: _assigned(Client, "_elicitation_callback"),
        "fastmcp.Client._parse_call_tool_result(name, result, raise_on_error)": (
            lambda: _callable_with(
                Client, "_parse_call_tool_result", {"name", "result", "raise_on_error"}
            )
        ),
        "fastmcp.client.mixins.tools._parse_call_tool_result(name, result, ...)": (
            lambda: _callable_with(
                tools_mixin,
                "_parse_call_tool_result",
                {"name", "result", "tool_output_schemas", "list_tools_fn", "raise_on_error"},
            )
        ),
    }
