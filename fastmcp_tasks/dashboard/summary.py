"""What the dashboard shows of a task, and which tasks a list asks for.

`TaskSummary` is the slim form the index keeps of each task (no arguments, result or
answers; status and error messages cut to `TEXT_LIMIT` characters; names interned),
with its dashboard `state` and the JSON a row and an SSE `tasks` event carry.
`TaskQuery` is a task list's filters (outcomes, tool, owner, id prefix), cursor and
size, read from and written back to URL parameters; `TaskPage` is one page of it.

A task that ended with a tool error (`completed` on the wire, its stored result
`isError: true`: `stores.outcomes`) keeps the error text in `tool_error`, read once
when the summary is made; its `outcome` and `state` are `error`. The status filter
takes outcomes: `completed` is the clean successes only, `error` the tool errors,
`finished` both and `failed` and `cancelled`.

When an input request was asked is not stored (`TaskRecord.input_requests` holds the
requests only, `request_input` just sets `updated_at`), so `TaskSummary.input_since`
is when the index first saw each key outstanding: the record's `updated_at` of that
read, carried forward from the previous summary for keys it already had.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from fastmcp_tasks.stores.base import TaskRecord
from fastmcp_tasks.stores.listing import PageKey
from fastmcp_tasks.stores.operations import PAUSED_UNTIL
from fastmcp_tasks.stores.outcomes import (
    ERROR,
    OUTCOME_GROUPS,
    OUTCOMES,
    split_needed,
    store_statuses,
    tool_error_of,
)
from fastmcp_tasks.stores.phases import RUNNING
from fastmcp_tasks.wire.names import ACTIVE_STATUSES

#: Characters of a status or error message a summary keeps.
TEXT_LIMIT = 500
#: Most tasks a page shows.
MAX_LIMIT = 200
#: Longest id prefix a search takes.
MAX_PREFIX = 64


def _cut(text: str | None) -> str | None:
    """`text` cut to `TEXT_LIMIT`, interned: many tasks share one message."""
    if text is None:
        return None
    return sys.intern(text if len(text) <= TEXT_LIMIT else text[: TEXT_LIMIT - 1] + "…")


def _name(text: str | None) -> str | None:
    return None if text is None else sys.intern(text)


def iso(when: float | None) -> str | None:
    """An epoch time as UTC ISO 8601 to the millisecond (`None` stays `None`)."""
    if when is None:
        return None
    return datetime.fromtimestamp(when, UTC).isoformat(timespec="milliseconds")


@dataclass(frozen=True, slots=True)
class TaskSummary:
    """What the dashboard keeps of a task: ids, times, texts, lease, no payloads."""

    task_id: str
    tool: str
    status: str
    created_at: float
    updated_at: float
    terminal_at: float | None
    status_message: str | None
    owner: str | None
    app: str | None
    lease_owner: str | None
    lease_expires: float | None
    attempts: int
    retries: int
    gate: str | None
    not_before: float | None
    cancel_requested: bool
    input_keys: tuple[str, ...]
    error_message: str | None
    #: When each of `input_keys` was first seen outstanding (see the module docstring).
    input_since: tuple[float, ...] = ()
    #: Where its run stands (`TaskRecord.phase`, `stores.phases`): what `state` reads.
    phase: str | None = None
    #: The error text of a task that ended with a tool error (`stores.outcomes`), cut.
    tool_error: str | None = None

    @classmethod
    def of(cls, record: TaskRecord, previous: TaskSummary | None = None) -> TaskSummary:
        """The summary of `record`; `previous` (the same task, read earlier) dates its inputs."""
        keys = tuple(record.input_requests or ())
        since: tuple[float, ...] = ()
        if keys:
            known = (
                dict(zip(previous.input_keys, previous.input_since, strict=True))
                if previous
                else {}
            )
            since = tuple(known.get(key, record.updated_at) for key in keys)
        error = record.error.get("message") if isinstance(record.error, dict) else None
        updated, ended = record.updated_at, record.terminal_at
        return cls(
            record.task_id,
            _name(record.tool) or "",
            _name(record.status) or "",
            record.created_at,
            updated,
            updated if ended == updated else ended,  # one float object, not two
            _cut(record.status_message),
            _name(record.owner),
            _name(record.app),
            _name(record.lease_owner),
            record.lease_expires,
            record.attempts,
            record.retries,
            _name(record.gate),
            record.not_before,
            record.cancel_requested,
            keys,
            _cut(error if isinstance(error, str) else None),
            since,
            record.phase,
            _cut(tool_error_of(record.status, record.result_json)),
        )

    @property
    def key(self) -> PageKey:
        """The page key `(created_at, task_id)`."""
        return (self.created_at, self.task_id)

    @property
    def paused(self) -> bool:
        """Whether it is held because its tool is paused (`stores.operations`)."""
        return self.not_before == PAUSED_UNTIL and self.status in ACTIVE_STATUSES

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE_STATUSES

    @property
    def is_error(self) -> bool:
        """Whether the task ended with a tool error (`completed`, an `isError` result)."""
        return self.tool_error is not None

    @property
    def outcome(self) -> str:
        """`error` for a tool error, else the status: what the status filter matches."""
        return ERROR if self.tool_error is not None else self.status

    @property
    def state(self) -> str:
        """`queued` | `running` | `parked` | `error` | the terminal status, now (`state_at`)."""
        return self.state_at(time.time())

    def state_at(self, now: float) -> str:
        """`parked`: `input_required`; `running`: `working` under a live lease, its run
        begun (`phase` `running`, or no phase: a record from before phases);
        `queued`: any other `working` task (unleased, gated, waiting for a retry or a
        slot, or its lease expired). Never read from the status message, which a tool
        may write ("Queued: ..." included). `error`: `completed` with a tool error."""
        if self.status == "working":
            live = self.lease_owner is not None and (self.lease_expires or 0.0) > now
            begun = self.phase in (RUNNING, None)
            return "running" if live and begun else "queued"
        return "parked" if self.status == "input_required" else self.outcome

    def duration(self, now: float) -> float:
        """Seconds from creation to the end (or to `now` while active)."""
        end = self.terminal_at if self.terminal_at is not None else now
        return max(0.0, end - self.created_at)

    def to_json(self, now: float) -> dict[str, Any]:
        """What a row (and an SSE `tasks` event) shows of the task at `now`: `status` is
        the wire status, `outcome` / `state` say `error` for a tool error (`is_error`),
        and `error` is the failure's message or the tool error's text."""
        return {
            "id": self.task_id,
            "tool": self.tool,
            "status": self.status,
            "outcome": self.outcome,
            "state": self.state_at(now),
            "is_error": self.is_error,
            "message": self.status_message,
            "owner": self.owner,
            "app": self.app,
            "created": iso(self.created_at),
            "created_at": self.created_at,
            "created_age": round(now - self.created_at, 3),
            "updated": iso(self.updated_at),
            "updated_at": self.updated_at,
            "updated_age": round(now - self.updated_at, 3),
            "ended": iso(self.terminal_at),
            "duration": round(self.duration(now), 3),
            "lease_owner": self.lease_owner,
            "lease_expires": self.lease_expires,
            "paused": self.paused,
            "attempts": self.attempts,
            "phase": self.phase,
            "retries": self.retries,
            "cancel_requested": self.cancel_requested,
            "error": self.error_message if self.tool_error is None else self.tool_error,
            "inputs": [
                {"key": key, "since": since, "waited": round(now - since, 3)}
                for key, since in zip(self.input_keys, self.input_since, strict=True)
            ],
        }


@dataclass(frozen=True, slots=True)
class Gone:
    """A task that left the index (purged, expired): its last summary, for the filters."""

    summary: TaskSummary

    @property
    def task_id(self) -> str:
        return self.summary.task_id


#: What the index reports as changed: a task's new summary, or that it is gone.
Change = TaskSummary | Gone

_GROUPS = OUTCOME_GROUPS


def _status_text(status: frozenset[str] | None) -> str:
    if status is None:
        return ""
    for name, group in _GROUPS.items():
        if status == group:
            return name
    return ",".join(sorted(status))


def parse_before(text: str) -> PageKey:
    """A `"<created_at>:<task_id>"` cursor; ValueError when malformed."""
    created, sep, task_id = text.partition(":")
    try:
        when = float(created)
    except ValueError:
        when = float("nan")
    if not sep or not task_id or when != when or when in (float("inf"), float("-inf")):
        raise ValueError(f"malformed page cursor {text[:80]!r}: expected '<created_at>:<task_id>'")
    return (when, task_id)


def before_text(key: PageKey) -> str:
    """The cursor text of a page key (`parse_before` reads it back exactly)."""
    return f"{key[0]!r}:{key[1]}"


@dataclass(frozen=True)
class TaskQuery:
    """A task list's filters and page: outcomes, tool, owner, id prefix, cursor, size.

    `status` holds outcomes (`stores.outcomes`): statuses, where `completed` is the
    clean successes, and `error`, the tool errors."""

    status: frozenset[str] | None = None
    tool: str | None = None
    owner: str | None = None
    id_prefix: str | None = None
    limit: int = 50
    before: PageKey | None = None

    def matches(self, s: TaskSummary) -> bool:
        """Whether `s` passes the filters (the cursor `before` is not a filter here)."""
        return (
            (self.status is None or s.outcome in self.status)
            and (self.tool is None or s.tool == self.tool)
            and (self.owner is None or s.owner == self.owner)
            and (self.id_prefix is None or s.task_id.startswith(self.id_prefix))
        )

    @property
    def store_filtered(self) -> bool:
        """Whether a store listing applies every filter itself: no tool or id prefix, and
        no outcome the store cannot tell apart (`completed` without `error`, or back)."""
        return self.tool is None and self.id_prefix is None and not split_needed(self.status)

    @property
    def store_status(self) -> frozenset[str] | None:
        """The statuses to ask a store's listing for (`error` is stored `completed`)."""
        return None if self.status is None else store_statuses(self.status)

    @classmethod
    def from_params(cls, params: Mapping[str, str]) -> TaskQuery:
        """From `?status=&tool=&owner=&q=&before=&limit=`; ValueError with a clear message."""
        text = (params.get("status") or "").strip()
        status: frozenset[str] | None = None
        if text in _GROUPS:
            status = _GROUPS[text]
        elif text in OUTCOMES:
            status = frozenset({text})
        elif text:
            known = ", ".join(["active", "finished", *sorted(OUTCOMES)])
            raise ValueError(f"unknown status {text[:40]!r}: use one of {known} (or nothing)")
        limit_text = (params.get("limit") or "").strip()
        limit = 50
        if limit_text:
            if not limit_text.isdigit() or not 1 <= int(limit_text) <= MAX_LIMIT:
                raise ValueError(
                    f"limit must be a whole number 1..{MAX_LIMIT}, got {limit_text[:20]!r}"
                )
            limit = int(limit_text)
        before_param = (params.get("before") or "").strip()
        prefix = (params.get("q") or "").strip()
        if len(prefix) > MAX_PREFIX:
            raise ValueError(f"the id search takes at most {MAX_PREFIX} characters")
        return cls(
            status=status,
            tool=(params.get("tool") or "").strip() or None,
            owner=(params.get("owner") or "").strip() or None,
            id_prefix=prefix or None,
            limit=limit,
            before=parse_before(before_param) if before_param else None,
        )

    def params(self, **change: Any) -> dict[str, str]:
        """Link parameters of this query with `change` applied (`None` drops one).

        Keys: `status` (text or a frozenset), `tool`, `owner`, `q` (or `id_prefix`),
        `before` (a page key or cursor text), `limit`. Defaults are left out.
        """
        values: dict[str, Any] = {
            "status": _status_text(self.status),
            "tool": self.tool,
            "owner": self.owner,
            "q": self.id_prefix,
            "before": self.before,
            "limit": None if self.limit == 50 else self.limit,
        }
        if "id_prefix" in change:
            change["q"] = change.pop("id_prefix")
        values.update(change)
        if isinstance(values["status"], frozenset):
            values["status"] = _status_text(values["status"])
        if isinstance(values["before"], tuple):
            values["before"] = before_text(values["before"])
        return {k: str(v) for k, v in values.items() if v is not None and v != ""}


@dataclass(frozen=True)
class TaskPage:
    """One page of a task list: the tasks, the next page's cursor, how many match in all."""

    tasks: list[TaskSummary]
    next_before: PageKey | None
    matching: int | None  # None while the index loads (the store has no count)


__all__ = [
    "MAX_LIMIT",
    "MAX_PREFIX",
    "TEXT_LIMIT",
    "Change",
    "Gone",
    "TaskPage",
    "TaskQuery",
    "TaskSummary",
    "before_text",
    "iso",
    "parse_before",
]
