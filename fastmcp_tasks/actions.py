"""Operator actions on a task store: cancel, purge, pause, resume, each one audited.

The dashboard and the `fastmcp-tasks` operator commands act through this module, on the
store itself (no MCP server needed), so both do exactly the same thing:

- `select` lists the ids of the tasks a `TaskFilter` matches (newest first, at most
  `MAX_SELECTION`): the preview shows how many, and the confirmation acts on that same
  list of ids, not on whatever the filter matches by then.
- `cancel_tasks` asks the process running each active task to stop (as `tasks/cancel`
  does) after writing a `cancel_requested` event naming the operator to its history,
  so the task ends "Cancelled by an operator (...)" and its history says who. A task no
  run would hear it (waiting in the store, or parked for input) ends at once, as
  `tasks/cancel` ends it.
- `purge_tasks` deletes the finished tasks among the ids (active ones are never purged).
- `pause_tool` / `resume_tool`: every process of the application stops starting runs of
  the tool / starts them again (`stores.operations`).

Each action appends one `AuditEntry` (who, what, on how many, when) when the store
keeps operator records (`stores.operations.OperableTaskStore`); on any other store the
cancel still works and the rest refuse with `ConfigurationError`. `context` (optional,
JSON values: the command line gives the user and host it ran as) is added to the entry's
details.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fastmcp_tasks.errors import ConfigurationError, InvalidTransition
from fastmcp_tasks.server.engine.outcomes import operator_cancelled
from fastmcp_tasks.stores.base import TaskRecord, TaskStore
from fastmcp_tasks.stores.listing import ALL_STATUSES, ListableTaskStore, PageKey, page_key
from fastmcp_tasks.stores.operations import (
    AuditEntry,
    OperableTaskStore,
    Pause,
    TaskEvent,
    operable,
)
from fastmcp_tasks.stores.outcomes import ERROR, outcome_of

#: Most tasks one selection holds (a bulk action acts on at most this many at once).
MAX_SELECTION = 10_000
#: Ids an audit entry lists (the count is always exact).
AUDITED_IDS = 50
#: Every outcome a filter takes: the statuses and `error` (a completed tool error).
OUTCOMES: frozenset[str] = ALL_STATUSES | {ERROR}
_PAGE = 1000


@dataclass(frozen=True, slots=True)
class TaskFilter:
    """Which tasks a bulk action means. Every field left `None` matches anything.

    `outcomes` are statuses or `error` (a tool error: `completed` then means completed
    without one, as everywhere operators look); `created_before` / `ended_before` are
    epoch seconds (a task still active has not ended, so `ended_before` skips it).
    """

    outcomes: frozenset[str] | None = None
    tool: str | None = None
    app: str | None = None
    owner: str | None = None
    id_prefix: str | None = None
    created_before: float | None = None
    ended_before: float | None = None

    def __post_init__(self) -> None:
        unknown = (self.outcomes or frozenset()) - OUTCOMES
        if unknown:
            raise ValueError(f"unknown task status {sorted(unknown)}; known: {sorted(OUTCOMES)}")

    def store_statuses(self) -> frozenset[str] | None:
        """The statuses to ask the store for (`error` lives among `completed`)."""
        if self.outcomes is None:
            return None
        return frozenset("completed" if o == ERROR else o for o in self.outcomes)

    def matches(self, record: TaskRecord) -> bool:
        if self.outcomes is not None and outcome_of(record) not in self.outcomes:
            return False
        if self.tool is not None and record.tool != self.tool:
            return False
        if self.app is not None and (record.app or "") != self.app:
            return False
        if self.owner is not None and record.owner != self.owner:
            return False
        if self.id_prefix and not record.task_id.startswith(self.id_prefix):
            return False
        if self.created_before is not None and record.created_at >= self.created_before:
            return False
        ended = record.terminal_at
        return self.ended_before is None or (ended is not None and ended < self.ended_before)

    def to_json(self) -> dict[str, Any]:
        """The filter as the audit log keeps it (fields that are set)."""
        data: dict[str, Any] = {
            "outcomes": None if self.outcomes is None else sorted(self.outcomes),
            "tool": self.tool,
            "app": self.app,
            "owner": self.owner,
            "id_prefix": self.id_prefix,
            "created_before": self.created_before,
            "ended_before": self.ended_before,
        }
        return {k: v for k, v in data.items() if v is not None}


@dataclass(frozen=True, slots=True)
class Selection:
    """The ids a filter matched when it was read (newest first)."""

    task_ids: tuple[str, ...]
    truncated: bool  # more matched than `MAX_SELECTION`

    @property
    def count(self) -> int:
        return len(self.task_ids)


@dataclass(frozen=True, slots=True)
class CancelReport:
    """What a cancel of many did: asked, already finished, no longer there; `ended`: of
    the asked, how many ended at once (nobody ran them: waiting in the store, or parked
    for input)."""

    requested: int
    finished: int
    missing: int
    ended: int = 0


def cancelled_by(who: str) -> str:
    """The status message of a task an operator cancelled: the engine's own words."""
    return operator_cancelled(who)


#: A task parked for input: its run only waits for answers, so it ends at once.
_PARKED = frozenset({"input_required"})


async def select(
    store: ListableTaskStore, where: TaskFilter, *, limit: int = MAX_SELECTION
) -> Selection:
    """The ids of up to `limit` tasks `where` matches now, newest first."""
    found: list[str] = []
    before: PageKey | None = None
    statuses = where.store_statuses()
    while True:
        page = await store.list_tasks(
            status=statuses, owner=where.owner, limit=_PAGE, before=before
        )
        for record in page:
            if where.matches(record):
                if len(found) == limit:
                    return Selection(tuple(found), True)
                found.append(record.task_id)
        if len(page) < _PAGE:
            return Selection(tuple(found), False)
        before = page_key(page[-1])


async def audit(
    store: TaskStore,
    actor: str,
    action: str,
    count: int,
    context: Mapping[str, Any] | None = None,
    **details: Any,
) -> AuditEntry | None:
    """Append one audit entry (nothing on a store that keeps no operator records);
    `context` goes into its details too, under the action's own."""
    ops = operable(store)
    if ops is None:
        return None
    entry = AuditEntry(time.time(), actor, action, count, {**(context or {}), **details})
    await ops.add_audit(entry)
    return entry


async def cancel_tasks(
    store: TaskStore,
    task_ids: Sequence[str],
    actor: str,
    *,
    where: TaskFilter | None = None,
    context: Mapping[str, Any] | None = None,
) -> CancelReport:
    """Ask for each active task among `task_ids` to be cancelled, as `actor` (audited)."""
    ops = operable(store)
    requested = finished = missing = ended = 0
    ids = list(dict.fromkeys(task_ids))
    for task_id in ids:
        record = await store.get(task_id)
        if record is None:
            missing += 1
            continue
        if record.is_terminal:
            finished += 1
            continue
        if ops is not None:  # before the request: the runner reads who asked
            event = TaskEvent(time.time(), "cancel_requested", {"by": "operator", "who": actor})
            await ops.add_events([(task_id, event)])
        after = await store.request_cancel(task_id)
        if after is None:
            missing += 1
            continue
        requested += 1
        ended += await _end_if_idle(store, after, actor)
    await audit(
        store,
        actor,
        "cancel",
        requested,
        context,
        selected=len(ids),
        finished=finished,
        missing=missing,
        ended=ended,
        ids=ids[:AUDITED_IDS],
        **({} if where is None else {"filter": where.to_json()}),
    )
    return CancelReport(requested, finished, missing, ended)


async def _end_if_idle(store: TaskStore, record: TaskRecord, who: str) -> int:
    """End now a task no run would hear the request of, as `tasks/cancel` does: one
    waiting in the store (unleased) or parked for input; 1 when it ended here (a
    process that ended it meanwhile wins)."""
    if not record.is_active:
        return 0
    if record.lease_owner is None:
        expect = None
    elif record.status == "input_required":
        expect = _PARKED
    else:
        return 0
    with contextlib.suppress(InvalidTransition):
        done = await store.transition(
            record.task_id, "cancelled", expect=expect, status_message=cancelled_by(who)
        )
        return int(done is not None)
    return 0


def require_operable(store: TaskStore, what: str) -> OperableTaskStore:
    """`store` as an `OperableTaskStore`, or the `ConfigurationError` saying `what` needs one."""
    ops = operable(store)
    if ops is None:
        raise ConfigurationError(
            f"{what} needs a store that keeps operator records; "
            f"{type(store).__name__} does not (see fastmcp_tasks.stores.operations)"
        )
    return ops


async def purge_tasks(
    store: TaskStore,
    task_ids: Sequence[str],
    actor: str,
    *,
    where: TaskFilter | None = None,
    context: Mapping[str, Any] | None = None,
) -> int:
    """Delete the finished tasks among `task_ids`, as `actor` (audited); how many."""
    ops = require_operable(store, "Purging chosen tasks")
    ids = list(dict.fromkeys(task_ids))
    removed = await ops.delete_finished(ids)
    details: dict[str, Any] = {"selected": len(ids), "ids": ids[:AUDITED_IDS]}
    if where is not None:
        details["filter"] = where.to_json()
    await audit(store, actor, "purge", removed, context, **details)
    return removed


async def purge_before(
    store: ListableTaskStore,
    cutoff: float,
    actor: str,
    *,
    context: Mapping[str, Any] | None = None,
) -> int:
    """Delete every task that ended before `cutoff` (`purge_finished`), audited."""
    removed = await store.purge_finished(cutoff)
    await audit(store, actor, "purge", removed, context, ended_before=cutoff)
    return removed


async def pause_tool(
    store: TaskStore,
    app: str,
    tool: str,
    actor: str,
    *,
    context: Mapping[str, Any] | None = None,
) -> bool:
    """Pause `tool` of `app` in every process; `False` when it already was."""
    ops = require_operable(store, "Pausing a tool")
    paused = await ops.pause(Pause(app, tool, time.time(), actor))
    if paused:
        await audit(store, actor, "pause", 1, context, app=app, tool=tool)
    return paused


async def resume_tool(
    store: TaskStore,
    app: str,
    tool: str,
    actor: str,
    *,
    context: Mapping[str, Any] | None = None,
) -> int | None:
    """Resume `tool` of `app`; how many held tasks were released (`None`: not paused)."""
    ops = require_operable(store, "Resuming a tool")
    released = await ops.resume(app, tool)
    if released is not None:
        await audit(store, actor, "resume", 1, context, app=app, tool=tool, released=released)
    return released


__all__ = [
    "AUDITED_IDS",
    "MAX_SELECTION",
    "OUTCOMES",
    "CancelReport",
    "Selection",
    "TaskFilter",
    "audit",
    "cancel_tasks",
    "cancelled_by",
    "pause_tool",
    "purge_before",
    "purge_tasks",
    "require_operable",
    "resume_tool",
    "select",
]
