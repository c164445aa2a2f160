"""The statements the SQLite store runs on its tables, one transaction (or read) at a time.

`Tx` wraps a connection for the duration of one operation: the writer thread
hands each write one inside `BEGIN IMMEDIATE ... COMMIT` (`sqlite.writer`), the
reader thread hands each read one on the read-only connection. Every query here
is a primary-key lookup or a range of one of the schema's indexes
(`sqlite.schema`), and reads fetch all their rows so the read-only connection is
never left inside a read transaction (it would pin an old snapshot: a read
issued after a write must see it).
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from fastmcp_tasks.errors import TaskLimitExceeded
from fastmcp_tasks.stores.base import ActiveCaps, TaskRecord, encode_json, storable_text
from fastmcp_tasks.stores.sqlite.schema import (
    ACTIVE,
    COLUMNS,
    QUEUED_INDEX,
    SELECT_TASK,
    UNLEASED,
    dumps,
    from_row,
)

#: The columns `active_leases` reads: what recovery needs, none of the payloads.
LEASE_COLUMNS = (
    "task_id, tool, status, created_at, updated_at, status_message, attempts, app, "
    "lease_owner, lease_expires, cancel_requested"
)


def _queued(app: str | None) -> tuple[str, tuple[Any, ...]]:
    """`FROM ... WHERE ...` of the queued tasks of `app` (any application's: `None`)."""
    if app is None:  # the whole partial index: only queued tasks, never the leased ones
        return f"FROM tasks INDEXED BY {QUEUED_INDEX} WHERE {UNLEASED}", ()
    return f"FROM tasks WHERE app = ? AND {UNLEASED}", (app,)


class Tx:
    """One transaction (or read) on a connection, and whether it wrote to the change feed."""

    __slots__ = ("conn", "emitted")

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.emitted = False

    def load(self, task_id: str, *, live: bool = True) -> TaskRecord | None:
        """The task by primary key; with `live`, `None` once it has expired."""
        if live:
            query = f"{SELECT_TASK} WHERE task_id = ? AND (expires_at IS NULL OR expires_at > ?)"
            rows = self.conn.execute(query, (task_id, time.time())).fetchall()
        else:
            rows = self.conn.execute(f"{SELECT_TASK} WHERE task_id = ?", (task_id,)).fetchall()
        return from_row(rows[0]) if rows else None

    def save(self, record: TaskRecord) -> None:
        """Write back the fields an active task's methods change (not the terminal ones)."""
        self.conn.execute(
            "UPDATE tasks SET status = ?, status_message = ?, updated_at = ?, input_requests = ?, "
            "answers = ?, cancel_requested = ?, attempts = ?, lease_owner = ?, lease_expires = ? "
            "WHERE task_id = ?",
            (
                record.status,
                storable_text(record.status_message),
                record.updated_at,
                dumps(record.input_requests),
                dumps(record.answers),
                int(record.cancel_requested),
                record.attempts,
                record.lease_owner,
                record.lease_expires,
                record.task_id,
            ),
        )

    def active(self) -> list[TaskRecord]:
        """Every task in `working` or `input_required` (a scan of the partial index)."""
        return [from_row(row) for row in self.conn.execute(f"{SELECT_TASK} WHERE {ACTIVE}")]

    def leases(self, app: str | None) -> list[TaskRecord]:
        """The active tasks of `app` (all: `None`), lease fields only (see `active_leases`)."""
        query = f"SELECT {LEASE_COLUMNS} FROM tasks WHERE {ACTIVE}"
        params: tuple[Any, ...] = ()
        if app is not None:
            query, params = f"{query} AND app = ?", (app,)
        return [
            TaskRecord(
                task_id=row[0],
                tool=row[1],
                status=row[2],
                created_at=row[3],
                updated_at=row[4],
                status_message=row[5],
                attempts=row[6],
                app=row[7],
                lease_owner=row[8],
                lease_expires=row[9],
                cancel_requested=bool(row[10]),
            )
            for row in self.conn.execute(query, params).fetchall()
        ]

    def unclaimed(self, limit: int, app: str | None = None) -> list[TaskRecord]:
        """Active tasks of `app` nobody has leased, oldest first (the queued-task index)."""
        where, params = _queued(app)
        query = f"SELECT {', '.join(COLUMNS)} {where} ORDER BY created_at LIMIT ?"
        return [from_row(row) for row in self.conn.execute(query, (*params, limit))]

    def any_unclaimed(self, app: str | None = None) -> bool:
        """Whether `unclaimed` would find anything (one probe of the queued-task index)."""
        where, params = _queued(app)
        return bool(self.conn.execute(f"SELECT 1 {where} LIMIT 1", params).fetchall())

    def emit(self, task_id: str, kind: str, status: str | None, details: Any = None) -> None:
        """Append a change-feed row (in this transaction)."""
        self.conn.execute(
            "INSERT INTO changes (task_id, kind, status, details, created_at) VALUES (?,?,?,?,?)",
            (task_id, kind, status, encode_json(details or {}), time.time()),
        )
        self.emitted = True

    def refusal(self, caps: ActiveCaps, owner: str | None) -> TaskLimitExceeded | None:
        """Whether `caps` refuse one more active task for `owner` (scans of the active index)."""
        active = owned = 0
        if caps.total is not None:
            query = f"SELECT COUNT(*) FROM tasks WHERE {ACTIVE}"
            active = self.conn.execute(query).fetchone()[0]
        if caps.per_owner is not None and owner is not None:
            query = f"SELECT COUNT(*) FROM tasks WHERE {ACTIVE} AND owner = ?"
            owned = self.conn.execute(query, (owner,)).fetchone()[0]
        return caps.refusal(active, owned, owner)

    def count(self) -> int:
        """Tasks in the file (kept by triggers, so O(1))."""
        row = self.conn.execute("SELECT value FROM meta WHERE key = 'task_count'").fetchone()
        return int(row[0])

    def purge(self, now: float) -> int:
        """Delete tasks expired by `now` (a range on the expiry index)."""
        return self.conn.execute("DELETE FROM tasks WHERE expires_at <= ?", (now,)).rowcount

    def trim_changes(self, before: float, keep: int) -> None:
        """Drop feed rows created before `before`, and all but the last `keep`."""
        self.conn.execute("DELETE FROM changes WHERE created_at < ?", (before,))
        self.conn.execute(
            "DELETE FROM changes WHERE seq <= (SELECT MAX(seq) FROM changes) - ?", (keep,)
        )

    def last_seq(self) -> int:
        """The highest change-feed `seq` ever issued (0 for none)."""
        query = "SELECT seq FROM sqlite_sequence WHERE name = 'changes'"
        rows = self.conn.execute(query).fetchall()
        return rows[0][0] if rows else 0

    def use_wal(self) -> None:
        """WAL journal, `synchronous=NORMAL` (outside any transaction)."""
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = NORMAL")


__all__ = ["LEASE_COLUMNS", "Tx"]
