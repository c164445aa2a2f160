"""The SQLite store's change feed: rows of the `changes` table, read across processes.

Every change is a row written in the transaction that makes it (see
`sqlite_schema.Tx.emit`), so a subscriber in any process sharing the file sees
it. `ChangeReader` owns the store's read-only connection: an idle poll costs one
`PRAGMA data_version`, and rows are read in batches only when the file changed.
A `Feed` is one subscription: it yields the rows past the newest one at
subscription time, filtered by task id and kind, and sleeps between polls
unless a write through the same store instance wakes it at once.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

import anyio
import anyio.to_thread

from fastmcp_tasks.errors import StoreError
from fastmcp_tasks.stores import sqlite_schema as schema
from fastmcp_tasks.stores.base import TaskChange

BATCH = 500


class ChangeReader:
    """Reads change rows through one read-only connection (used from worker threads)."""

    def __init__(self, conn: sqlite3.Connection, where: str) -> None:
        self.conn: sqlite3.Connection | None = conn
        self.where = where
        self.lock = threading.Lock()
        self._data_version = -1
        self._generation = 0

    def poll(self, after: int, seen: int) -> tuple[int, list[tuple[Any, ...]]]:
        """Change rows past `after`, unless nothing changed since generation `seen`."""
        with self.lock:
            conn = self.conn
            if conn is None:
                return seen, []
            try:
                version = conn.execute("PRAGMA data_version").fetchone()[0]
                if version != self._data_version:
                    self._data_version, self._generation = version, self._generation + 1
                if self._generation == seen:
                    return seen, []
                rows = conn.execute(
                    "SELECT seq, task_id, kind, status, details FROM changes "
                    "WHERE seq > ? ORDER BY seq LIMIT ?",
                    (after, BATCH),
                ).fetchall()
            except sqlite3.Error as exc:
                if schema.is_busy(exc):
                    return -1, []  # try again at the next poll
                raise StoreError(f"SQLite task store {self.where!r}: {exc}") from exc
            return self._generation, rows

    def close(self) -> None:
        with self.lock:
            if self.conn is not None:
                self.conn.close()
            self.conn = None


class Feed:
    """One subscription: an async iterator over change rows past `after`."""

    def __init__(
        self,
        reader: ChangeReader,
        wake: Callable[[], anyio.Event],
        poll_interval: float,
        after: int,
        task_ids: frozenset[str] | None,
        kinds: frozenset[str] | None,
    ) -> None:
        self._reader = reader
        self._wake = wake
        self._poll_interval = poll_interval
        self._task_ids = task_ids
        self._kinds = kinds
        self.after = after
        self.seen = -1  # the reader's data generation at the last query (-1: query now)
        self.closed = False
        self._buffer: deque[TaskChange] = deque()

    def __aiter__(self) -> Feed:
        return self

    async def __anext__(self) -> TaskChange:
        while not self._buffer:
            if self.closed:
                raise StopAsyncIteration
            wake = self._wake()  # taken before polling: a later local write sets it
            seen, rows = await anyio.to_thread.run_sync(self._reader.poll, self.after, self.seen)
            self.seen = -1 if len(rows) == BATCH else seen
            for seq, task_id, kind, status, details in rows:
                self.after = seq
                if (self._task_ids is None or task_id in self._task_ids) and (
                    self._kinds is None or kind in self._kinds
                ):
                    self._buffer.append(TaskChange(task_id, kind, status, json.loads(details)))
            if not rows:
                with anyio.move_on_after(self._poll_interval):
                    await wake.wait()
        return self._buffer.popleft()
