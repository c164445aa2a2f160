"""A task's history as `fastmcp-tasks show` prints it, and the `show --json` document.

On a store that keeps operator records (`stores.operations.OperableTaskStore`) `show`
lists the task's events under its fields, oldest first, one a line: the local time
(with the date when it changes) and what it says in words, the same words as the
dashboard's task page ("Cancel requested · by an operator (cli)"). `show --json` is the
task record as before plus `outcome` (`error` for a tool error, else the status:
`stores.outcomes`) and `history`, its events as the store keeps them (`null` on a store
that keeps none), and `steps`, its durable steps as `{name, at, size}` (`dashboard.steps`;
`null` on a store that keeps none). `show` lists the last `dashboard.steps.SHOWN` steps
under the history: when, name, size in bytes, never a step's value.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from fastmcp_tasks.cli.views import record_json, short, stamp
from fastmcp_tasks.dashboard.history import describe
from fastmcp_tasks.dashboard.steps import SHOWN as STEPS_SHOWN
from fastmcp_tasks.dashboard.steps import size_text, steps_json
from fastmcp_tasks.stores.base import TaskRecord
from fastmcp_tasks.stores.operations import TaskEvent
from fastmcp_tasks.stores.outcomes import outcome_of
from fastmcp_tasks.stores.steps import StepRecord

#: Longest text one event is shown as.
SHOWN = 200


def show_document(
    task: TaskRecord, events: list[TaskEvent] | None, steps: list[StepRecord] | None = None
) -> dict[str, Any]:
    """`show --json`: the record's fields, its operator `outcome`, its `history`, its
    `steps`."""
    document = record_json(task)
    document["outcome"] = outcome_of(task)
    document["history"] = None if events is None else [event.to_json() for event in events]
    document["steps"] = steps_json(steps)
    return document


def steps_fields(steps: list[StepRecord] | None, since: float) -> list[tuple[str, str]]:
    """`show`'s `Steps` rows: the count, then the last `STEPS_SHOWN` steps, one a line;
    none on a store that keeps no steps or for a task that recorded none."""
    if not steps:
        return []
    shown = steps[-STEPS_SHOWN:]
    count = f"{len(steps)} completed step{'' if len(steps) == 1 else 's'}"
    if len(shown) < len(steps):
        count += f" (the last {len(shown)} below; --json has all)"
    rows = [("Steps", count)]
    day = _day(since)
    for record in shown:
        clock, day = _clock(record.at, day)
        rows.append(("", f"{clock}  {short(record.name, SHOWN)} · {size_text(record.size)}"))
    return rows


def _clock(at: float, day: str) -> tuple[str, str]:
    """The local time of `at` (with its date when it is not `day`), and the day now shown."""
    when = datetime.fromtimestamp(at).astimezone()
    clock = when.strftime("%H:%M:%S.") + f"{when.microsecond // 1000:03d}"
    if _day(at) != day:
        day = _day(at)
        clock = f"{day} {clock}"
    return clock, day


def history_fields(events: list[TaskEvent] | None, since: float) -> list[tuple[str, str]]:
    """`show`'s `History` rows: one per event ("" names the rows after the first);
    none on a store that keeps no histories. `since`: the day shown without a date."""
    if events is None:
        return []
    if not events:
        return [("History", "- (no events recorded)")]
    rows: list[tuple[str, str]] = []
    day = _day(since)
    for event in events:
        clock, day = _clock(event.at, day)
        text = f"{clock}  {describe_event(event)}".rstrip()
        rows.append(("" if rows else "History", text))
    return rows


def _day(at: float) -> str:
    return stamp(at).partition(" ")[0]


def describe_event(event: TaskEvent) -> str:
    """What an event says, in the dashboard's words (`dashboard.history.describe`)."""
    label, details = describe(event, time.time())
    return short(f"{label} · {details}" if details else label, SHOWN)


__all__ = ["SHOWN", "describe_event", "history_fields", "show_document", "steps_fields"]
