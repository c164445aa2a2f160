"""A task's history as an operator reads it: each stored `TaskEvent` in words.

`store.events(task_id)` (`stores.operations`) is what the engine and the operator
actions recorded, oldest first; it lives in the store, so the detail page shows it
after a dashboard restart too. `describe` turns one event into a short label ("Run
started", "Cancel requested") and a line of details (worker, attempt, message, input
keys, a retry's reason and due time, who asked to cancel, how it ended): plain text,
escaped where it is shown. `history_json` is what `/api/tasks/<id>/history` answers;
the page's script renders its `label` and `text`, so the words live here only.
"""

from __future__ import annotations

from typing import Any

from fastmcp_tasks.dashboard.html import span, stamp
from fastmcp_tasks.stores.operations import TaskEvent

#: Longest text of one detail value (a message, a reason) shown.
VALUE_SHOWN = 300

LABELS = {
    "created": "Created",
    "taken": "Taken by a worker",
    "started": "Run started",
    "resumed": "Resumed from its steps",
    "message": "Status message",
    "input_requested": "Asked for input",
    "input_answered": "Input answered",
    "retry_scheduled": "Retry scheduled",
    "requeued": "Given back to the queue",
    "recovered": "Recovered",
    "paused": "Held: its tool is paused",
    "cancel_requested": "Cancel requested",
    "finished": "Finished",
}
OUTCOME_WORDS = {"error": "tool error"}


def _text(value: Any) -> str:
    if isinstance(value, list | tuple):
        text = ", ".join(str(v) for v in value)
    else:
        text = str(value)
    text = " ".join(text.split())
    return text if len(text) <= VALUE_SHOWN else text[: VALUE_SHOWN - 1] + "…"


def _who(details: dict[str, Any]) -> str:
    by, who = details.get("by"), details.get("who")
    if by == "operator":
        return f"by an operator ({_text(who)})" if who else "by an operator"
    if by == "client":
        return "by the client" + (f" ({_text(who)})" if who else "")
    return f"by {_text(who or by)}" if (who or by) else ""


def describe(event: TaskEvent, now: float) -> tuple[str, str]:
    """`(label, details)` of an event, in words (module docstring)."""
    d = event.details
    kind = event.kind
    label = LABELS.get(kind, kind.replace("_", " ").capitalize())
    parts: list[str] = []

    def add(name: str, prefix: str) -> None:
        if d.get(name) not in (None, "", []):
            parts.append(f"{prefix}{_text(d[name])}")

    if kind == "created":
        add("app", "app ")
        add("owner", "owner ")
        add("by", "by ")
        if d.get("queued"):
            parts.append("queued for a worker")
    elif kind in ("taken", "paused"):
        add("worker", "worker ")
    elif kind == "started":
        add("attempt", "attempt ")
        add("worker", "on worker ")
    elif kind == "resumed":
        add("steps", "completed steps ")
        add("last", "last ")
    elif kind == "message":
        add("message", "")
    elif kind in ("input_requested", "input_answered"):
        add("keys", "keys ")
    elif kind == "retry_scheduled":
        add("attempt", "after attempt ")
        due = d.get("at")
        if isinstance(due, int | float):
            when = "now" if due <= now else f"in {span(due - now)}"
            parts.append(f"due {stamp(due)} ({when})")
        add("reason", "reason: ")
    elif kind == "requeued":
        add("worker", "by worker ")
        add("reason", "reason: ")
    elif kind == "recovered":
        add("worker", "by worker ")
        add("from", "from ")
    elif kind == "cancel_requested":
        who = _who(d)
        if who:
            parts.append(who)
    elif kind == "finished":
        outcome = d.get("outcome")
        if outcome:
            label = f"Finished: {OUTCOME_WORDS.get(str(outcome), _text(outcome))}"
        add("message", "")
    else:  # a kind this dashboard does not know yet: its scalar details
        parts += [f"{k} {_text(v)}" for k, v in sorted(d.items()) if not isinstance(v, dict)]
    return label, " · ".join(parts)


def event_json(event: TaskEvent, now: float) -> dict[str, Any]:
    """One event of `/api/tasks/<id>/history`: its stored fields, `label` and `text`."""
    label, text = describe(event, now)
    return {**event.to_json(), "label": label, "text": text, "when": stamp(event.at)}


def history_json(task_id: str, events: list[TaskEvent] | None, now: float) -> dict[str, Any]:
    """`/api/tasks/<id>/history`: `available` is false on a store that keeps none."""
    return {
        "task_id": task_id,
        "available": events is not None,
        "events": [event_json(e, now) for e in events or ()],
    }


__all__ = ["LABELS", "describe", "event_json", "history_json"]
