"""What a task handle turns a task into: the request it sends, the result it returns.

`client.handles` (`ToolTask`, `call_tool_task`) uses these so that a handle
behaves like `fastmcp.Client.call_tool()`:

- `request_meta()` merges `version=` into the request `_meta` exactly as
  `Client.call_tool(version=...)` does (`{"fastmcp": {"version": ...}}`), and
  `related=` task ids under `io.modelcontextprotocol/relatedTaskIds` (draft);
- `finished_result()` turns a terminal task state into FastMCP's client
  `CallToolResult` (`.data` from structured output) with the client's own
  parser, as `call_tool()` produces it; a failed or cancelled task raises
  `TaskFailed` / `TaskCancelled`, or becomes an error result (`is_error=True`,
  the error's message as text) with `raise_on_error=False`;
- `not_a_task()` explains a synchronous answer to `call_tool_task()`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import mcp_types
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from fastmcp_tasks import _compat
from fastmcp_tasks.client.extension import task_error
from fastmcp_tasks.errors import NotATask
from fastmcp_tasks.wire.models import TaskStateDict
from fastmcp_tasks.wire.names import RELATED_TASKS_META_KEY, TASKS_EXTENSION_ID

if TYPE_CHECKING:
    from fastmcp import Client
    from fastmcp.client.client import CallToolResult


def request_meta(
    meta: dict[str, Any] | None, version: str | None, related: Sequence[str] | None = None
) -> dict[str, Any] | None:
    """The `tools/call` `_meta`: `meta`, with `version` under `fastmcp`, as `call_tool()` sends,
    and `related` task ids under `RELATED_TASKS_META_KEY` (after any `meta` already has)."""
    merged = dict(meta) if meta else {}
    if version is not None:
        merged["fastmcp"] = {**merged.get("fastmcp", {}), "version": version}
    if related:
        named = merged.get(RELATED_TASKS_META_KEY)
        merged[RELATED_TASKS_META_KEY] = [*(named if isinstance(named, list) else ()), *related]
    return merged or None


async def finished_result(
    client: Client[Any],
    tool_name: str | None,
    task_id: str | None,
    state: TaskStateDict,
    *,
    raise_on_error: bool,
    version: str | None,
) -> CallToolResult:
    """FastMCP's `CallToolResult` for a terminal task state, as `call_tool()` would return it.

    Args:
        client: the connected client (its parser and output-schema cache are used).
        tool_name: the tool; `None` (a resumed handle of an unknown tool) parses
            without an output schema: `.data` is the structured content as sent.
        task_id: the task's id (`None` for a synchronous answer).
        state: the terminal state (`completed` with `result`, `failed` with `error`, ...).
        raise_on_error: raise for a failed/cancelled task or an `isError` result.
        version: the version the call pinned, if any (as `call_tool(version=)`).

    Raises:
        TaskFailed: the task failed (`raise_on_error`).
        TaskCancelled: the task was cancelled (`raise_on_error`).
        ToolError: the completed result is an error (`isError`, `raise_on_error`).
    """
    error = task_error(str(task_id), state)
    if error is not None:
        if raise_on_error:
            raise error
        raw = mcp_types.CallToolResult(
            content=[mcp_types.TextContent(type="text", text=error.message)], is_error=True
        )
    else:
        raw = mcp_types.CallToolResult.model_validate(state["result"])
        if not raw.is_error and tool_name is not None and version is None:
            await client.session.validate_tool_result(tool_name, raw)
    return await _compat.parse_tool_result(
        client, tool_name, raw, raise_on_error=raise_on_error, pinned_version=version
    )


def _why_synchronous(client: Client[Any]) -> str:
    protocol = client.protocol_version
    if protocol not in MODERN_PROTOCOL_VERSIONS:
        return (
            f"this connection speaks the legacy protocol {protocol}, which has no tasks: "
            "connect with Client(..., mode='auto') (the default) to a 2026-07-28 server"
        )
    capabilities = client.server_capabilities
    extensions = (capabilities.extensions if capabilities is not None else None) or {}
    if TASKS_EXTENSION_ID not in extensions:
        return (
            "the server does not serve the tasks extension: register it with "
            "mcp.add_extension(TasksExtension())"
        )
    return "the tool is not a task tool: declare it with @mcp.tool(task=True)"


async def not_a_task(
    client: Client[Any], name: str, answer: mcp_types.CallToolResult, version: str | None
) -> NotATask:
    """The `NotATask` for a synchronous answer, carrying it parsed (never raising)."""
    parsed = await _compat.parse_tool_result(
        client, name, answer, raise_on_error=False, pinned_version=version
    )
    if answer.is_error:
        text = "".join(getattr(block, "text", "") for block in answer.content)
        head = f"the server answered synchronously with an error ({text or 'no message'})"
    else:
        head = "the server answered synchronously (the tool ran: its result is on .result)"
    message = (
        f"Tool {name!r} did not run as a task: {head}; {_why_synchronous(client)}. "
        "Use client.call_tool() for a result whether tasked or not, or "
        "call_tool_task(..., allow_synchronous=True) to accept a synchronous answer."
    )
    return NotATask(message, result=parsed, tool_name=name)
