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
from fastmcp_tasks.stores.flow import TombstoneReason, tombstone_key
from fastmcp_tasks.stores.sqlite.rows import dumps, from_row
from fastmcp_tasks.stores.sqlite.schema import ACTIVE, COLUMNS, DUE, READY, READY_INDEX, SELECT_TASK

#: The columns `active_leases` reads: what recovery needs, none of the payloads.
LEASE_COLUMNS = (
    "task_id, tool, status, created_at, updated_at, status_message, attempts, app, "
    "lease_owner, lease_expires, cancel_requested, phase"
)

#: `SELECT_TASK` reading neither `arguments` nor `context` (`peek`, `stores.peeking`).
PEEK_TASK = (
    "SELECT "
    + ", ".join("NULL" if name in ("arguments", "context") else name for name in COLUMNS)
    + " FROM tasks"
)


def ready_where(app: str | None, now: float) -> tuple[str, tuple[Any, ...]]:
    """`FROM ... WHERE ...` of the claimable ungated tasks of `app` (any application's:
    `None`): a range of the ungated queued-task index, never the leased or gated ones."""
    if app is None:  # the whole partial index: only queued tasks, never the leased ones
        return f"FROM tasks INDEXED BY {READY_INDEX} WHERE {READY} AND {DUE}", (now,)
    return f"FROM tasks INDEXED BY {READY_INDEX} WHERE app = ? AND {READY} AND {DUE}", (app, now)


#: The oldest claimable ungated tasks of one application (`IS`: NULL for tasks without
#: one). Parameters: app, now, how many.
_OLDEST_READY = (
    f"SELECT {', '.join(COLUMNS)} FROM tasks INDEXED BY {READY_INDEX} "
    f"WHERE app IS ? AND {READY} AND {DUE} ORDER BY created_at LIMIT ?"
)

#: The named applications with queued ungated tasks: a skip-scan, one seek per application.
_READY_APPS = f"""
WITH RECURSIVE seen(a) AS (
    SELECT (SELECT app FROM tasks INDEXED BY {READY_INDEX} WHERE {READY}
        AND app IS NOT NULL ORDER BY app LIMIT 1)
    UNION ALL
    SELECT (SELECT app FROM tasks INDEXED BY {READY_INDEX} WHERE {READY}
        AND app > seen.a ORDER BY app LIMIT 1)
    FROM seen WHERE seen.a IS NOT NULL
)
SELECT a FROM seen WHERE a IS NOT NULL
"""


class Tx:
    """One transaction (or read) on a connection, and whether it wrote to the change feed."""

    __slots__ = ("conn", "emitted")

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.emitted = False

    def load(self, task_id: str, *, live: bool = True, lean: bool = False) -> TaskRecord | None:
        """The task by primary key; with `live`, `None` once it has expired; `lean`: without
        its `arguments` and `context` (`stores.peeking`)."""
        select = PEEK_TASK if lean else SELECT_TASK
        if live:
            query = f"{select} WHERE task_id = ? AND (expires_at IS NULL OR expires_at > ?)"
            rows = self.conn.execute(query, (task_id, time.time())).fetchall()
        else:
            rows = self.conn.execute(f"{select} WHERE task_id = ?", (task_id,)).fetchall()
        return from_row(rows[0]) if rows else None

    def save(self, record: TaskRecord) -> None:
        """Write back the fields an active task's methods change (not the terminal ones)."""
        self.conn.execute(
            "UPDATE tasks SET status = ?, status_message = ?, updated_at = ?, input_requests = ?, "
            "answers = ?, cancel_requested = ?, attempts = ?, lease_owner = ?, lease_expires = ?, "
            "not_before = ?, retries = ?, phase = ? WHERE task_id = ?",
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
                record.not_before,
                record.retries,
                record.phase,
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
                phase=row[11],
            )
            for row in self.conn.execute(query, params).fetchall()
        ]

    def unclaimed(self, limit: int, app: str | None, now: float) -> list[TaskRecord]:
        """Ungated active tasks of `app` nobody has leased and whose retry wait (if any) is
        over by `now`, oldest first: one range of the ungated queued-task index; for any
        application's (`None`), each application's range, merged."""
        if app is not None:
            return [from_row(row) for row in self.conn.execute(_OLDEST_READY, (app, now, limit))]
        apps = [None, *(row[0] for row in self.conn.execute(_READY_APPS).fetchall())]
        found = [
            from_row(row)
            for each in apps
            for row in self.conn.execute(_OLDEST_READY, (each, now, limit))
        ]
        found.sort(key=lambda record: record.created_at)
        return found[:limit]

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

    def purge(self, now: float, *, bury: bool) -> int:
        """Delete tasks expired by `now` (a range on the expiry index); with `bury`, each
        leaves an `expired` tombstone dated when it expired."""
        if bury:
            query = "SELECT task_id, owner, expires_at FROM tasks WHERE expires_at <= ?"
            gone = self.conn.execute(query, (now,)).fetchall()
            if not gone:
                return 0
            self.bury(gone, "expired")
        return self.conn.execute("DELETE FROM tasks WHERE expires_at <= ?", (now,)).rowcount

    def bury(self, gone: list[tuple[str, str | None, float]], reason: TombstoneReason) -> None:
        """Tombstones for removed tasks, from `(task_id, owner, at)` rows (`stores.flow`)."""
        self.conn.executemany(
            "INSERT OR REPLACE INTO tombstones (key, owner, at, reason) VALUES (?, ?, ?, ?)",
            [(tombstone_key(task_id), owner, at, reason) for task_id, owner, at in gone],
        )

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


__all__ = ["LEASE_COLUMNS", "Tx", "ready_where"]
