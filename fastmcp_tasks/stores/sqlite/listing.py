"""Listing and purging for the SQLite store (`ListableTaskStore`), mixed into `SQLiteTaskStore`.

Both are index ranges (schema version 2): a listing walks `tasks_created`
`(created_at, task_id)` backwards from the page key, so a page costs about its
size plus the rows the filters skip; a purge deletes a range of `tasks_ended`
(`terminal_at`) in one write transaction, each purged task leaving a tombstone
(`stores.flow`). A listing is a read on the store's
read-only connection, like `get`: it neither waits for nor blocks another
process's writes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from fastmcp_tasks.stores.base import TaskRecord
from fastmcp_tasks.stores.listing import ALL_STATUSES, PageKey, check_listing
from fastmcp_tasks.stores.sqlite.rows import from_row
from fastmcp_tasks.stores.sqlite.schema import SELECT_TASK
from fastmcp_tasks.stores.sqlite.tx import Tx
from fastmcp_tasks.wire.names import TERMINAL_STATUSES

T = TypeVar("T")

_BATCH = 500  # ids per `IN (...)`: well under SQLite's 32,766 parameters
_ENDED = f"terminal_at < ? AND status IN ({', '.join('?' * len(TERMINAL_STATUSES))})"


def list_rows(
    tx: Tx,
    statuses: frozenset[str],
    owner: str | None,
    limit: int,
    before: PageKey | None,
    now: float,
) -> list[TaskRecord]:
    """The live tasks matching the filters, newest first (see `ListableTaskStore`)."""
    where = ["(expires_at IS NULL OR expires_at > ?)"]
    params: list[Any] = [now]
    if statuses != ALL_STATUSES:
        where.append(f"status IN ({', '.join('?' * len(statuses))})")
        params.extend(sorted(statuses))
    if owner is not None:
        where.append("owner = ?")
        params.append(owner)
    if before is not None:
        where.append("(created_at, task_id) < (?, ?)")
        params.extend(before)
    query = (
        f"{SELECT_TASK} WHERE {' AND '.join(where)} ORDER BY created_at DESC, task_id DESC LIMIT ?"
    )
    return [from_row(row) for row in tx.conn.execute(query, (*params, limit))]


def purge_rows(tx: Tx, before: float, dry_run: bool, *, bury: bool = True) -> int:
    """Delete (or, with `dry_run`, count) terminal tasks that ended before `before`; with
    `bury`, each leaves a `purged` tombstone dated now, in the same transaction."""
    params = (before, *sorted(TERMINAL_STATUSES))
    if dry_run:
        row = tx.conn.execute(f"SELECT COUNT(*) FROM tasks WHERE {_ENDED}", params).fetchone()
        return int(row[0])
    if bury:
        query = f"SELECT task_id, owner FROM tasks WHERE {_ENDED}"
        now = time.time()
        tx.bury(
            [(task_id, owner, now) for task_id, owner in tx.conn.execute(query, params)], "purged"
        )
    return tx.conn.execute(f"DELETE FROM tasks WHERE {_ENDED}", params).rowcount


def load_many(tx: Tx, task_ids: list[str], now: float) -> dict[str, TaskRecord]:
    """The live tasks among `task_ids`, by id (primary-key lookups, `_BATCH` per query)."""
    found = {}
    for start in range(0, len(task_ids), _BATCH):
        chunk = task_ids[start : start + _BATCH]
        query = (
            f"{SELECT_TASK} WHERE task_id IN ({', '.join('?' * len(chunk))}) "
            "AND (expires_at IS NULL OR expires_at > ?)"
        )
        for row in tx.conn.execute(query, (*chunk, now)):
            record = from_row(row)
            found[record.task_id] = record
    return found


class SQLiteListing:
    """The `ListableTaskStore` methods of `SQLiteTaskStore`."""

    if TYPE_CHECKING:
        tombstone_retention: float | None

        async def _run(self, fn: Callable[[Tx], T], *, write: bool = True) -> T: ...

        async def _read(self, fn: Callable[[Tx], T]) -> T: ...

    async def get_many(self, task_ids: list[str]) -> dict[str, TaskRecord]:
        """The live tasks among `task_ids`, by id: one read (see `base.get_many`)."""
        now = time.time()
        return await self._read(lambda tx: load_many(tx, task_ids, now))

    async def list_tasks(
        self,
        *,
        status: frozenset[str] | None = None,
        owner: str | None = None,
        limit: int = 100,
        before: PageKey | None = None,
    ) -> list[TaskRecord]:
        statuses = check_listing(status, limit)
        now = time.time()
        return await self._read(lambda tx: list_rows(tx, statuses, owner, limit, before, now))

    async def purge_finished(self, before: float, *, dry_run: bool = False) -> int:
        if dry_run:
            return await self._read(lambda tx: purge_rows(tx, before, True))
        bury = self.tombstone_retention is not None
        return await self._run(lambda tx: purge_rows(tx, before, False, bury=bury))


__all__ = ["SQLiteListing", "list_rows", "load_many", "purge_rows"]
