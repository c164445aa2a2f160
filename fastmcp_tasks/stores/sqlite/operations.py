"""The SQLite store's operator records (`stores.operations`), mixed into `SQLiteTaskStore`.

This module owns the SQL of histories, workers, pauses, the audit log and purging a
chosen set of tasks, on the tables of schema version 6 (`sqlite.schema`):

- a history is one range of `task_events` (keyed by task, then the event's place in
  the history, 0 up). `add_events` appends a whole batch in one write transaction:
  one INSERT ... SELECT per event, which stores it only if the task is live and
  `keeps_event` allows it for the history's length (read in that statement), so the
  bound holds whatever the batch holds. A task's events are deleted with it by the
  `tasks_forget_events` trigger, whatever deletes the row (expiry, `purge_finished`,
  `delete_finished`, the `max_tasks` sweep of `create`); `events` reads a live task's.
- `hold_paused` is one write transaction: the task loaded, its pause looked up,
  `rules.hold_back` applied and `not_before` set to `PAUSED_UNTIL`, which every claim's
  `DUE` term skips. A gate's slots are its leased tasks (`schema.HOLDING`), so a held
  gated task holds none; as `retry_later` does, a `queued` change for its gate wakes
  the processes waiting on it.
- `resume` deletes the pause and releases its held tasks (`not_before` NULL, the
  message `RESUMED_MESSAGE` with a `message` change, then a `queued` change each) in
  one transaction, so a task is never held, nor shown as paused, after it.
- `beat` replaces the worker's row and forgets the silent ones; `add_audit` appends
  and deletes what is older than the newest `MAX_AUDIT` (a range of the rowid).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from fastmcp_tasks.stores import rules
from fastmcp_tasks.stores.base import TaskRecord, encode_json, storable_text
from fastmcp_tasks.stores.operations import (
    FORGET_AFTER,
    MAX_AUDIT,
    MAX_EVENTS,
    PAUSED_UNTIL,
    RESUMED_MESSAGE,
    AuditEntry,
    Pause,
    TaskEvent,
    WorkerInfo,
    pause_key,
)
from fastmcp_tasks.stores.sqlite.schema import UNLEASED
from fastmcp_tasks.stores.sqlite.tx import Tx
from fastmcp_tasks.wire.names import ACTIVE_STATUSES, TERMINAL_STATUSES

T = TypeVar("T")

_BATCH = 500  # ids per `IN (...)`, as `sqlite.listing`
_LIVE = "(expires_at IS NULL OR expires_at > :now)"
#: Append one event at the end of a live task's history, if `keeps_event` allows it.
_ADD_EVENT = f"""
INSERT INTO task_events (task_id, seq, at, kind, details)
SELECT :id, n, :at, :kind, :details
FROM (SELECT COALESCE(MAX(seq) + 1, 0) AS n FROM task_events WHERE task_id = :id)
WHERE (n < {MAX_EVENTS - 1} OR (:kind = 'finished' AND n < {MAX_EVENTS}))
AND EXISTS (SELECT 1 FROM tasks WHERE task_id = :id AND {_LIVE})
"""
_EVENTS = (
    "SELECT at, kind, details FROM task_events WHERE task_id = :id "
    f"AND EXISTS (SELECT 1 FROM tasks WHERE task_id = :id AND {_LIVE}) ORDER BY seq"
)
#: The tasks a pause holds (`app` "" for tasks without one). Parameters: tool, held, app.
_HELD = (
    f"SELECT task_id, status, app FROM tasks WHERE {UNLEASED} AND tool = ? "
    "AND not_before = ? AND COALESCE(app, '') = ?"
)
_TERMINAL = ", ".join(f"'{status}'" for status in sorted(TERMINAL_STATUSES))


def hold(tx: Tx, task_id: str, owner: str, message: str | None) -> TaskRecord | None:
    """`hold_paused` in `tx` (see `OperableTaskStore.hold_paused`)."""
    record = tx.load(task_id)
    if (
        record is None
        or record.status not in ACTIVE_STATUSES
        or record.lease_owner != owner
        or record.cancel_requested
    ):
        return None
    query = "SELECT 1 FROM pauses WHERE app = ? AND tool = ?"
    if not tx.conn.execute(query, (pause_key(record.app), record.tool)).fetchall():
        return None
    rules.hold_back(record)
    record.not_before = PAUSED_UNTIL
    changed = record.status_message != message
    if changed:
        record.status_message, record.updated_at = message, time.time()
    tx.save(record)
    if changed:
        tx.emit(task_id, "message", record.status)
    if record.gate is not None:  # its slot is free while it is held: waiters claim now
        tx.emit(task_id, "queued", record.status, {"app": record.app, "gate": record.gate})
    return record


def release(tx: Tx, app: str, tool: str) -> int | None:
    """`resume` in `tx`: the pause deleted, its held tasks claimable now and no longer
    showing the pause's message."""
    if not tx.conn.execute("DELETE FROM pauses WHERE app = ? AND tool = ?", (app, tool)).rowcount:
        return None
    held = tx.conn.execute(_HELD, (tool, PAUSED_UNTIL, app)).fetchall()
    now = time.time()
    tx.conn.executemany(
        "UPDATE tasks SET not_before = NULL, status_message = ?, updated_at = ? WHERE task_id = ?",
        [(RESUMED_MESSAGE, now, row[0]) for row in held],
    )
    for task_id, status, task_app in held:  # for any worker to take, as `create` says
        tx.emit(task_id, "message", status)
        tx.emit(task_id, "queued", status, {"app": task_app})
    return len(held)


def delete_ended(tx: Tx, task_ids: list[str], now: float, *, bury: bool) -> int:
    """Delete the live terminal tasks among `task_ids`, each leaving a `purged` tombstone
    dated `now` (with `bury`), as `purge_finished` does."""
    removed = 0
    for start in range(0, len(task_ids), _BATCH):
        chunk = task_ids[start : start + _BATCH]
        marks = ", ".join("?" * len(chunk))
        query = (
            f"SELECT task_id, owner FROM tasks WHERE task_id IN ({marks}) "
            f"AND status IN ({_TERMINAL}) AND (expires_at IS NULL OR expires_at > ?)"
        )
        ended = tx.conn.execute(query, (*chunk, now)).fetchall()
        if not ended:
            continue
        if bury:
            tx.bury([(task_id, owner, now) for task_id, owner in ended], "purged")
        gone = [task_id for task_id, _ in ended]
        query = f"DELETE FROM tasks WHERE task_id IN ({', '.join('?' * len(gone))})"
        removed += tx.conn.execute(query, gone).rowcount
    return removed


class SQLiteOperations:
    """The `OperableTaskStore` methods of `SQLiteTaskStore`."""

    if TYPE_CHECKING:
        tombstone_retention: float | None

        async def _run(self, fn: Callable[[Tx], T], *, write: bool = True) -> T: ...

        async def _read(self, fn: Callable[[Tx], T]) -> T: ...

    async def add_events(self, events: Sequence[tuple[str, TaskEvent]]) -> None:
        if not events:
            return
        now = time.time()
        rows = [
            {
                "id": task_id,
                "at": event.at,
                "kind": event.kind,
                "details": encode_json(event.details),
                "now": now,
            }
            for task_id, event in events
        ]

        def append(tx: Tx) -> None:
            tx.conn.executemany(_ADD_EVENT, rows)

        await self._run(append)

    async def events(self, task_id: str) -> list[TaskEvent]:
        params = {"id": task_id, "now": time.time()}
        rows = await self._read(lambda tx: tx.conn.execute(_EVENTS, params).fetchall())
        return [TaskEvent(at, kind, json.loads(details)) for at, kind, details in rows]

    async def beat(self, worker: WorkerInfo) -> None:
        row = (worker.worker_id, worker.last_seen, encode_json(worker.to_json()))
        horizon = time.time() - FORGET_AFTER

        def beat(tx: Tx) -> None:
            query = "INSERT OR REPLACE INTO workers (worker_id, last_seen, info) VALUES (?, ?, ?)"
            tx.conn.execute(query, row)
            tx.conn.execute("DELETE FROM workers WHERE last_seen < ?", (horizon,))

        await self._run(beat)

    async def workers(self) -> list[WorkerInfo]:
        horizon = time.time() - FORGET_AFTER
        query = "SELECT info FROM workers WHERE last_seen >= ?"
        rows = await self._read(lambda tx: tx.conn.execute(query, (horizon,)).fetchall())
        return [WorkerInfo.from_json(json.loads(row[0])) for row in rows]

    async def pause(self, pause: Pause) -> bool:
        query = "INSERT OR IGNORE INTO pauses (app, tool, since, paused_by) VALUES (?, ?, ?, ?)"
        row = (pause.app, pause.tool, pause.since, pause.by)
        return bool(await self._run(lambda tx: tx.conn.execute(query, row).rowcount))

    async def resume(self, app: str, tool: str) -> int | None:
        return await self._run(lambda tx: release(tx, app, tool))

    async def paused(self) -> list[Pause]:
        query = "SELECT app, tool, since, paused_by FROM pauses ORDER BY since, app, tool"
        rows = await self._read(lambda tx: tx.conn.execute(query).fetchall())
        return [Pause(*row) for row in rows]

    async def hold_paused(
        self, task_id: str, owner: str, status_message: str | None
    ) -> TaskRecord | None:
        message = storable_text(status_message)
        return await self._run(lambda tx: hold(tx, task_id, owner, message))

    async def add_audit(self, entry: AuditEntry) -> None:
        row = (entry.at, entry.actor, entry.action, entry.count, encode_json(entry.details))

        def append(tx: Tx) -> None:
            query = "INSERT INTO audit (at, actor, action, count, details) VALUES (?, ?, ?, ?, ?)"
            seq = tx.conn.execute(query, row).lastrowid or 0
            tx.conn.execute("DELETE FROM audit WHERE seq <= ?", (seq - MAX_AUDIT,))

        await self._run(append)

    async def audit(self, limit: int = 100) -> list[AuditEntry]:
        query = "SELECT at, actor, action, count, details FROM audit ORDER BY seq DESC LIMIT ?"
        rows = await self._read(lambda tx: tx.conn.execute(query, (max(0, limit),)).fetchall())
        return [
            AuditEntry(at, actor, action, count, json.loads(details))
            for at, actor, action, count, details in rows
        ]

    async def delete_finished(self, task_ids: Sequence[str]) -> int:
        chosen = list(dict.fromkeys(task_ids))
        if not chosen:
            return 0
        bury = self.tombstone_retention is not None
        return await self._run(lambda tx: delete_ended(tx, chosen, time.time(), bury=bury))


__all__ = ["SQLiteOperations", "delete_ended", "hold", "release"]
