"""Flow control for the SQLite store (`stores.flow`), mixed into `SQLiteTaskStore`.

This module owns the flow-control SQL outside the claim (`sqlite.gates` has that):

- deduplication: `duplicate_of`, the task holding a dedupe key (the newest live
  one with it, a range of `schema.DEDUPE_INDEX`), read inside `create`'s write
  transaction so of two concurrent creates with one key, in any processes, exactly
  one inserts;
- retry waits: `retry_later`, one write transaction applying `rules.retry`;
- tombstones: `tombstone` answers from the `tombstones` table (written by every
  path that removes a task: `Tx.purge` and `purge_finished`, in the same
  transaction), or from a row that expired but is not swept yet; `prune` forgets
  the ones past `tombstone_retention` (a range of `tombstones_at`) or beyond
  `MAX_TOMBSTONES`, and the turns of gates nothing is active in, from `purge_expired`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar, cast

from fastmcp_tasks.stores import rules
from fastmcp_tasks.stores.base import TaskRecord
from fastmcp_tasks.stores.flow import Tombstone, TombstoneReason, tombstone_key
from fastmcp_tasks.stores.sqlite.gates import forget_turns
from fastmcp_tasks.stores.sqlite.rows import from_row
from fastmcp_tasks.stores.sqlite.schema import DEDUPE_INDEX, SELECT_TASK
from fastmcp_tasks.stores.sqlite.tx import Tx

T = TypeVar("T")

#: Most tombstones kept at once, as in the memory store (each about 100 bytes of the file
#: with its index entry); beyond it the oldest go first.
MAX_TOMBSTONES = 100_000

#: Delete the tombstones older than the (OFFSET + 1)-th newest (a walk of `tombstones_at`).
_TRIM = (
    "DELETE FROM tombstones WHERE at < (SELECT at FROM tombstones INDEXED BY tombstones_at "
    "ORDER BY at DESC LIMIT 1 OFFSET ?)"
)

_HOLDER = (
    f"{SELECT_TASK} INDEXED BY {DEDUPE_INDEX} WHERE dedupe_key = ? "
    "AND (expires_at IS NULL OR expires_at > ?) ORDER BY created_at DESC LIMIT 1"
)


def duplicate_of(tx: Tx, key: str, now: float) -> TaskRecord | None:
    """The live task holding dedupe `key`: the newest unexpired one created with it."""
    rows = tx.conn.execute(_HOLDER, (key, now)).fetchall()
    return from_row(rows[0]) if rows else None


def tombstone(tx: Tx, task_id: str, now: float, retention: float | None) -> Tombstone | None:
    """The tombstone of a removed (or expired, not yet swept) task within `retention`."""
    if retention is None:
        return None
    query = "SELECT owner, expires_at FROM tasks WHERE task_id = ?"
    rows = tx.conn.execute(query, (task_id,)).fetchall()
    if rows:
        owner, at = rows[0]
        if at is None or at > now:
            return None  # live: `get` reads it
        reason: str = "expired"
    else:
        query = "SELECT owner, at, reason FROM tombstones WHERE key = ?"
        rows = tx.conn.execute(query, (tombstone_key(task_id),)).fetchall()
        if not rows:
            return None
        owner, at, reason = rows[0]
    if at < now - retention:
        return None
    return Tombstone(owner, at, cast("TombstoneReason", reason))


def prune(tx: Tx, now: float, retention: float | None) -> None:
    """Forget tombstones older than `retention` (all of them: `None`) and all but the newest
    `MAX_TOMBSTONES`, and the turns of gates nothing is active in."""
    if retention is None:
        tx.conn.execute("DELETE FROM tombstones")
    else:
        tx.conn.execute("DELETE FROM tombstones WHERE at < ?", (now - retention,))
        tx.conn.execute(_TRIM, (MAX_TOMBSTONES - 1,))  # older than the N-th newest
    forget_turns(tx)


class SQLiteFlow:
    """The `FlowControlStore` methods of `SQLiteTaskStore` (`retry_later`, `tombstone`)."""

    flow_control = True

    if TYPE_CHECKING:
        tombstone_retention: float | None

        async def _run(self, fn: Callable[[Tx], T], *, write: bool = True) -> T: ...

        async def _read(self, fn: Callable[[Tx], T]) -> T: ...

    async def retry_later(
        self, task_id: str, owner: str, not_before: float, status_message: str | None
    ) -> TaskRecord | None:
        def change(tx: Tx) -> TaskRecord | None:
            record = tx.load(task_id)
            if record is None:
                return None
            kinds = rules.retry(record, owner, not_before, status_message)
            if kinds is None:
                return None
            tx.save(record)
            for kind in kinds:
                tx.emit(task_id, kind, record.status)
            details = {"app": record.app, "not_before": not_before}
            tx.emit(task_id, "queued", record.status, details)
            if record.gate is not None:  # its slot is free while it waits: waiters claim now
                freed = {"app": record.app, "gate": record.gate}
                tx.emit(task_id, "queued", record.status, freed)
            return record

        return await self._run(change)

    async def tombstone(self, task_id: str) -> Tombstone | None:
        retention = self.tombstone_retention
        return await self._read(lambda tx: tombstone(tx, task_id, time.time(), retention))


__all__ = ["MAX_TOMBSTONES", "SQLiteFlow", "duplicate_of", "prune", "tombstone"]
