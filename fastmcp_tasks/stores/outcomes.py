"""How a task ended, as operators see it: a tool error is not a success.

On the wire a tool that raised (a `CallToolResult` with `isError: true`) is
`completed`, as the spec says. Operator views (dashboard, `fastmcp-tasks ls`) give it
its own outcome, `error`, read from the result the engine stored (parsed JSON, never a
message text), so a failure rate counts it and a filter finds it.
"""

from __future__ import annotations

import json
from typing import Any

from fastmcp_tasks.stores.base import TaskRecord

#: The operator outcome of a completed task whose result has `isError: true`.
TOOL_ERROR = "error"
#: Longest error text `tool_error_text` returns.
SHOWN = 500


def _result(record: TaskRecord) -> dict[str, Any] | None:
    if record.status != "completed" or record.result_json is None:
        return None
    try:
        result = json.loads(record.result_json)
    except ValueError:
        return None
    return result if isinstance(result, dict) else None


def is_tool_error(record: TaskRecord) -> bool:
    """Whether `record` completed with a result whose `isError` is `true`."""
    if record.status != "completed" or record.result_json is None:
        return False
    if '"isError"' not in record.result_json:  # cheap: most results say nothing of it
        return False
    result = _result(record)
    return result is not None and result.get("isError") is True


def outcome_of(record: TaskRecord) -> str:
    """The status an operator sees: `error` for a tool error, else the task's status."""
    return TOOL_ERROR if is_tool_error(record) else record.status


def tool_error_text(record: TaskRecord) -> str | None:
    """The first text of a tool error's content (cut to `SHOWN`), or `None`."""
    if not is_tool_error(record):
        return None
    result = _result(record) or {}
    content = result.get("content") or []
    text = next(
        (c.get("text", "") for c in content if isinstance(c, dict) and c.get("type") == "text"),
        "",
    )
    text = " ".join(str(text).split()) or "The tool reported an error"
    return text if len(text) <= SHOWN else text[: SHOWN - 1] + "…"


__all__ = ["SHOWN", "TOOL_ERROR", "is_tool_error", "outcome_of", "tool_error_text"]
