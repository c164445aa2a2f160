"""How a task ended, as an operator reads it: the one place the "tool error" rule lives.

On the MCP wire (SEP-2663) a tool that raises (a `ValueError`, a `ToolError`, an
argument error) ends its task `completed`, with a `CallToolResult` whose `isError` is
`true`: the caller reads the error from the result. Stored as it is, that task would
look like a success to an operator. The operator views (the dashboard, `fastmcp-tasks
ls` / `show`) therefore give it its own *outcome*, `error`, while the wire and the
store keep `completed`:

- `tool_error_text(record)`: for a `completed` task whose stored result (the JSON the
  engine wrote, `TaskRecord.result_json`, parsed) has `isError: true`, the error text
  (its first text content block, `""` when it has none); `None` for every other task.
  Never read from the status message or any other text a tool writes;
- `outcome_of(record)`: `error` for such a task, else its status;
- `OUTCOMES`, `OUTCOME_GROUPS` (`active`, `finished`): what an operator filters on. In
  these filters `completed` means the clean successes only; `error` the tool errors;
- `store_statuses(outcomes)` and `split_needed(outcomes)`: what to ask a store's
  `list_tasks` for (it knows statuses, not outcomes), and whether its answer must
  still be filtered by `outcome_of` (when `completed` is wanted without `error`, or
  the other way round).
"""

from __future__ import annotations

import json
from typing import Any

from fastmcp_tasks.stores.base import TaskRecord
from fastmcp_tasks.wire.names import ACTIVE_STATUSES, TERMINAL_STATUSES

#: The outcome of a `completed` task whose result is an error result (`isError: true`).
ERROR = "error"
#: How an operator view labels it.
ERROR_LABEL = "tool error"
#: Every outcome: the statuses, and `error`.
OUTCOMES: frozenset[str] = ACTIVE_STATUSES | TERMINAL_STATUSES | {ERROR}
#: The groups an operator filter names: `active` and `finished` (tool errors included).
OUTCOME_GROUPS: dict[str, frozenset[str]] = {
    "active": frozenset(ACTIVE_STATUSES),
    "finished": frozenset(TERMINAL_STATUSES | {ERROR}),
}
_MARK = '"isError"'  # a result without it cannot be an error result (keys are never escaped)


def tool_error_of(status: str, result_json: str | None) -> str | None:
    """`tool_error_text` of a status and a stored result text (see the module)."""
    if status != "completed" or result_json is None or _MARK not in result_json:
        return None
    try:
        result: Any = json.loads(result_json)
    except ValueError:
        return None
    if not isinstance(result, dict) or result.get("isError") is not True:
        return None
    content = result.get("content")
    for block in content if isinstance(content, list) else []:
        if isinstance(block, dict) and block.get("type") == "text":
            text = block.get("text")
            if isinstance(text, str):
                return text
    return ""


def tool_error_text(record: TaskRecord) -> str | None:
    """The error text of a task that ended with a tool error, `None` for any other task:
    its status is `completed` and its stored result has `isError: true`; the text is the
    result's first text content (`""` without one)."""
    return tool_error_of(record.status, record.result_json)


def outcome_of(record: TaskRecord) -> str:
    """`error` for a task that ended with a tool error, else its status."""
    return ERROR if tool_error_text(record) is not None else record.status


def store_statuses(outcomes: frozenset[str]) -> frozenset[str]:
    """The statuses a store lists for these outcomes (`error` is stored `completed`)."""
    return (outcomes - {ERROR}) | ({"completed"} if ERROR in outcomes else frozenset())


def split_needed(outcomes: frozenset[str] | None) -> bool:
    """Whether a store's listing of `store_statuses(outcomes)` holds tasks of outcomes not
    wanted: `completed` wanted without `error`, or `error` without `completed`."""
    return outcomes is not None and (("completed" in outcomes) != (ERROR in outcomes))


__all__ = [
    "ERROR",
    "ERROR_LABEL",
    "OUTCOMES",
    "OUTCOME_GROUPS",
    "outcome_of",
    "split_needed",
    "store_statuses",
    "tool_error_of",
    "tool_error_text",
]
