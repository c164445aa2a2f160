"""How the operator commands (`fastmcp-tasks ls` / `show`) show a task: times and ages,
the one-line field view of `show` (with what flow control says of the task: its gate,
retries and when a retry is due), the JSON documents of `ls --json` / `show --json`, and
what `call` / `wait` print of a result (`result_text`).

A task that ended with a tool error (`completed` on the wire, an `isError` result:
`stores.outcomes`) shows its outcome, `error`, as its status, with the error's text;
the JSON documents keep the wire `status` and add `outcome`, `is_error` and `tool_error`.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime
from typing import TYPE_CHECKING, Any

from fastmcp_tasks.server.flow import shown_gate
from fastmcp_tasks.stores.base import TaskRecord
from fastmcp_tasks.stores.outcomes import outcome_of, tool_error_text

if TYPE_CHECKING:
    import mcp_types
    from fastmcp.client.client import CallToolResult as FastMCPCallToolResult

_SHORT = 300  # characters of arguments, errors and results shown
#: What `show` says of an active task's `phase` (`stores.phases`).
_RUN = {
    "queued": "waiting for its first run",
    "retry": "waiting to run again after a failed attempt",
    "restart": "waiting to run again after an interruption",
    "running": "begun",
}
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}


def stamp(when: float) -> str:
    """A local time with its offset, to the second."""
    return datetime.fromtimestamp(when).astimezone().isoformat(sep=" ", timespec="seconds")


def duration(seconds: float) -> str:
    """An age in its largest whole unit: `36h`, `2w`, `90s`."""
    for unit, size in sorted(_UNITS.items(), key=lambda item: -item[1]):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def age(when: float, now: float) -> str:
    """`12s ago`, `5m ago`, `3h ago`, `2d ago` (`in 5m` for a time ahead)."""
    seconds = abs(now - when)
    for unit, size in (("d", 86_400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            text = f"{int(seconds // size)}{unit}"
            break
    else:
        text = f"{int(seconds)}s"
    return f"in {text}" if when > now + 1 else f"{text} ago"


def short(text: str, limit: int = _SHORT) -> str:
    """`text` on one line, cut to `limit` characters (saying how long it was)."""
    text = " ".join(text.split())
    return text if len(text) <= limit else f"{text[: limit - 1]}… ({len(text)} chars)"


def _json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def result_summary(result: dict[str, Any]) -> str:
    """What a `CallToolResult` holds, in a line: blocks by type, first text, structure."""
    content = result.get("content") or []
    kinds: dict[str, int] = {}
    for block in content:
        kind = str(block.get("type", "?")) if isinstance(block, dict) else "?"
        kinds[kind] = kinds.get(kind, 0) + 1
    parts = [", ".join(f"{n} {kind}" for kind, n in kinds.items()) or "no content"]
    text = next((b.get("text") for b in content if isinstance(b, dict) and "text" in b), None)
    if isinstance(text, str):
        parts.append(repr(short(text, 120)))
    structured = result.get("structuredContent")
    if isinstance(structured, dict):
        parts.append(f"structuredContent {{{', '.join(list(structured)[:8])}}}")
    if result.get("isError"):
        parts.append("isError")
    return "; ".join(parts)


def describe(task: TaskRecord, now: float) -> list[tuple[str, str]]:
    """The `show` view of a task: (field, text) pairs, none holding more than a line."""
    fields = [("Task", task.task_id), ("Status", outcome_of(task)), ("Tool", task.tool)]
    tool_error = tool_error_text(task)
    if tool_error is not None:
        fields.append(("Tool error", short(tool_error or "-") + " (completed on the wire)"))
    fields.append(("Message", task.status_message or "-"))
    fields.append(("Created", f"{stamp(task.created_at)} ({age(task.created_at, now)})"))
    fields.append(("Updated", f"{stamp(task.updated_at)} ({age(task.updated_at, now)})"))
    if task.terminal_at is not None:
        fields.append(("Ended", f"{stamp(task.terminal_at)} ({age(task.terminal_at, now)})"))
        expires = task.expires_at
        kept = "kept until purged" if expires is None else f"{stamp(expires)} ({age(expires, now)})"
        fields.append(("Expires", kept))
    fields.append(("Owner", task.owner or "- (no authentication)"))
    fields.append(("Attempts", str(task.attempts)))  # runs of the tool body begun
    if task.is_active:
        fields.append(("Run", _RUN.get(task.phase or "", "- (recorded before phases)")))
    if task.gate is not None:
        gate = shown_gate(task.gate)
        fields.append(("Concurrency", f"{gate} (at most {task.gate_limit} at once)"))
    if task.retries:
        fields.append(("Retries", str(task.retries)))
    if task.not_before is not None and task.is_active:
        fields.append(("Retry due", f"{stamp(task.not_before)} ({age(task.not_before, now)})"))
    if task.is_active:
        lease = "- (queued)"
        if task.lease_owner is not None:
            until = task.lease_expires or 0
            state = "expired" if until <= now else "held"
            lease = f"{task.lease_owner}, {state} {age(until, now)}"
        fields.append(("Lease", lease))
        fields.append(("Cancel", "requested" if task.cancel_requested else "-"))
    if task.poll_interval_ms is not None:
        fields.append(("Poll interval", f"{task.poll_interval_ms} ms"))
    if task.arguments is not None:
        fields.append(("Arguments", short(_json_text(task.arguments))))
    for key, request in (task.input_requests or {}).items():
        method = request.get("method", "?") if isinstance(request, dict) else "?"
        params = request.get("params", {}) if isinstance(request, dict) else {}
        message = params.get("message") if isinstance(params, dict) else None
        text = f"{method} {key}" + (f": {short(str(message), 120)}" if message else "")
        fields.append(("Input request", text))
    if task.answers:
        fields.append(("Answers waiting", ", ".join(sorted(task.answers))))
    if task.error is not None:
        fields.append(("Error", short(_json_text(task.error))))
    if task.result_json is not None:
        fields.append(("Result", short(result_summary(task.result or {}))))
    return fields


def summary_json(task: TaskRecord) -> dict[str, Any]:
    """An `ls --json` entry: what identifies a task and where it stands."""
    keys = ("task_id", "status", "tool", "created_at", "updated_at", "terminal_at")
    entry = {key: getattr(task, key) for key in keys}
    entry.update(status_message=task.status_message, owner=task.owner, attempts=task.attempts)
    entry["phase"] = task.phase
    entry.update(_outcome_json(task))
    return entry


def _outcome_json(task: TaskRecord) -> dict[str, Any]:
    error = tool_error_text(task)
    return {"outcome": outcome_of(task), "is_error": error is not None, "tool_error": error}


def record_json(task: TaskRecord) -> dict[str, Any]:
    """A `show --json` document: every field of the record, the result decoded."""
    names = [field.name for field in dataclasses.fields(TaskRecord)]
    document = {name: getattr(task, name) for name in names if name != "result_json"}
    document["result"] = task.result
    document["expires_at"] = task.expires_at
    document.update(_outcome_json(task))
    return document


def result_text(result: mcp_types.CallToolResult | FastMCPCallToolResult) -> str:
    """What a person reads of a `CallToolResult`: its text blocks, other blocks as JSON."""
    parts = []
    for block in result.content:
        text = getattr(block, "text", None)
        if isinstance(text, str):
            parts.append(text)
        else:
            parts.append(json.dumps(block.model_dump(by_alias=True, mode="json")))
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content))
    return "\n".join(parts)
