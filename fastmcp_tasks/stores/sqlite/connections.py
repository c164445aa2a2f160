"""The SQLite store's connections, threads and feeds: the base of `SQLiteTaskStore`.

`SQLiteConnections` owns what `open` acquires and `close` releases: the
read-write connection and its writer thread (`_run`), the read-only connection
and its reader thread (`_read`, and the change feed's polls), the event that
wakes this instance's feeds after a local write, and the subscriptions
(`changes`). It also validates the store's options and keeps `stats`.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar, cast

import anyio
import anyio.lowlevel
import anyio.to_thread

from fastmcp_tasks.errors import ConfigurationError, StoreError
from fastmcp_tasks.stores.base import TaskChange
from fastmcp_tasks.stores.flow import DEFAULT_TOMBSTONE_RETENTION
from fastmcp_tasks.stores.sqlite import schema
from fastmcp_tasks.stores.sqlite.feed import ChangeReader, Feed, Rows
from fastmcp_tasks.stores.sqlite.tx import Tx
from fastmcp_tasks.stores.sqlite.writer import SQLiteWriter, StoreStats

T = TypeVar("T")

DEFAULT_MAX_TASKS = 100_000


class SQLiteConnections:
    """Connections, threads, options and feeds of `SQLiteTaskStore` (see its Args)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_tasks: int | None = DEFAULT_MAX_TASKS,
        poll_interval: float = 0.025,
        idle_poll_interval: float = 1.0,
        busy_timeout: float = 1.0,
        busy_retries: int = 6,
        change_retention: float = 300.0,
        max_changes: int = 100_000,
        tombstone_retention: float | None = DEFAULT_TOMBSTONE_RETENTION,
    ) -> None:
        text = os.fspath(path)
        if not text or text == ":memory:" or text.startswith("file:"):
            raise ConfigurationError(
                f"SQLite task store needs a file path, got {text!r}: an in-memory database "
                "cannot be shared between processes or survive a restart"
            )
        if max_tasks is not None and max_tasks < 1:
            raise ConfigurationError(f"max_tasks must be at least 1, got {max_tasks}")
        if (
            not poll_interval > 0
            or not idle_poll_interval > 0
            or busy_timeout < 0
            or busy_retries < 0
            or max_changes < 1
            or (tombstone_retention is not None and not tombstone_retention >= 0)
        ):
            raise ConfigurationError(
                "SQLite task store needs poll_interval > 0, idle_poll_interval > 0, "
                "busy_timeout >= 0, busy_retries >= 0, max_changes >= 1 and "
                "tombstone_retention >= 0 (or None)"
            )
        self.path = Path(text).expanduser().absolute()
        self.max_tasks = max_tasks
        self.poll_interval = poll_interval
        self.idle_poll_interval = idle_poll_interval
        self.busy_timeout = busy_timeout
        self.busy_retries = busy_retries
        self.change_retention = change_retention
        self.max_changes = max_changes
        self.tombstone_retention = tombstone_retention
        #: What this store has done (plain counters; see `StoreStats`).
        self.stats = StoreStats()
        self._conn: sqlite3.Connection | None = None
        self._changes: ChangeReader | None = None
        self._lock = threading.Lock()
        self._writer: SQLiteWriter | None = None
        self._reader: SQLiteWriter | None = None
        self._wake = anyio.Event()
        self._feeds: set[Feed] = set()

    # --- lifecycle ----------------------------------------------------------------

    async def open(self) -> None:
        if self._conn is None:
            await anyio.to_thread.run_sync(self._open)

    def _open(self) -> None:
        path, where = self.path, str(self.path)
        if not path.parent.is_dir():
            raise ConfigurationError(f"SQLite task store {where!r}: no such directory")
        schema.check_header(path)
        conn = self._connect()
        try:
            self._locked(conn, lambda tx: schema.prepare(tx.conn, path), write=True)
            self._locked(conn, Tx.use_wal, write=False)
            reader = self._connect()
            reader.execute("PRAGMA query_only = ON")
        except StoreError as exc:
            conn.close()
            cause = exc.__cause__
            if isinstance(cause, sqlite3.Error) and not schema.is_busy(cause):
                raise ConfigurationError(f"{exc}; refusing to use it") from cause
            raise
        except BaseException:
            conn.close()
            raise
        self._conn, self._changes = conn, ChangeReader(reader, where, self.stats)
        self._writer = SQLiteWriter(conn, where, self.busy_retries, self.stats)
        self._reader = SQLiteWriter(reader, where, self.busy_retries, self.stats, read_only=True)

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                self.path, timeout=self.busy_timeout, isolation_level=None, check_same_thread=False
            )
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
        except sqlite3.Error as exc:
            raise ConfigurationError(f"SQLite task store {str(self.path)!r}: {exc}") from exc
        return conn

    async def close(self) -> None:
        for feed in self._feeds:
            feed.closed = True
        self._feeds.clear()
        self._notify()
        await anyio.to_thread.run_sync(self._close)

    def _close(self) -> None:
        writer, self._writer = self._writer, None
        reader, self._reader = self._reader, None
        for thread in (writer, reader):
            if thread is not None:
                thread.stop()
        changes, self._changes = self._changes, None
        if changes is not None:
            changes.close()
        with self._lock:
            if self._conn is not None:
                self._conn.close()
            self._conn = None

    # --- running SQL off the event loop -------------------------------------------

    async def _run(self, fn: Callable[[Tx], T], *, write: bool = True) -> T:
        """`fn(tx)` in a write transaction on the writer thread (`write=False`: `_read`)."""
        if not write:
            return await self._read(fn)
        writer = self._writer
        if writer is None:
            raise StoreError(f"SQLite task store {str(self.path)!r} is not open")
        value, emitted = await writer.submit(fn, True)
        if emitted:
            self._notify()
        return value

    async def _read(self, fn: Callable[[Tx], T]) -> T:
        """`fn(tx)` on the read-only connection (reader thread): never waits for a lock."""
        reader = self._reader
        if reader is None:
            raise StoreError(f"SQLite task store {str(self.path)!r} is not open")
        value, _ = await reader.submit(fn, False)
        return value

    async def _point_read(self, fn: Callable[[Tx], T]) -> T:
        """`_read` of a few rows by key: on the event loop's thread while the reader's
        thread is idle (`SQLiteWriter.read_now`), else on that thread."""
        reader = self._reader
        if reader is not None:
            done, value = reader.read_now(fn, int(self.busy_timeout * 1000))
            if done:  # still a turn of the loop, as through the thread: a loop of reads
                await anyio.lowlevel.checkpoint()  # lets others run, and can be cancelled
                return cast(T, value)
        return await self._read(fn)

    async def _poll(self, after: int, seen: int) -> tuple[int, Rows]:
        """One change-feed poll on the reader thread (see `ChangeReader.poll`)."""
        reader, changes = self._reader, self._changes
        if reader is None or changes is None:
            return seen, []  # closed: the feed sees it is closed and ends
        answer, _ = await reader.submit(lambda tx: changes.poll(after, seen), False, counted=False)
        return answer

    def _locked(self, conn: sqlite3.Connection, fn: Callable[[Tx], T], *, write: bool) -> Any:
        delay = 0.01
        for attempt in range(self.busy_retries + 1):
            tx = Tx(conn)
            try:
                if not write:
                    return fn(tx), False
                conn.execute("BEGIN IMMEDIATE")
                self.stats.write_transactions += 1
                try:
                    value = fn(tx)
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
                return value, tx.emitted
            except sqlite3.Error as exc:
                if not schema.is_busy(exc):
                    raise StoreError(f"SQLite task store {str(self.path)!r}: {exc}") from exc
                if attempt == self.busy_retries:
                    raise StoreError(
                        f"SQLite task store {str(self.path)!r} stayed locked by another "
                        f"connection through {attempt + 1} attempts: {exc}"
                    ) from exc
                time.sleep(delay)
                delay = min(delay * 2, 0.5)
        raise AssertionError("unreachable")

    def _notify(self) -> None:
        self._wake.set()
        self._wake = anyio.Event()

    # --- the change feed ----------------------------------------------------------

    @asynccontextmanager
    async def changes(
        self, task_ids: frozenset[str] | None = None, kinds: frozenset[str] | None = None
    ) -> AsyncIterator[AsyncIterator[TaskChange]]:
        after = await self._read(Tx.last_seq)
        feed = Feed(
            self._poll,
            lambda: self._wake,
            self.poll_interval,
            self.idle_poll_interval,
            after,
            task_ids,
            kinds,
        )
        self._feeds.add(feed)
        try:
            yield feed
        finally:
            feed.closed = True
            self._feeds.discard(feed)


__all__ = ["DEFAULT_MAX_TASKS", "SQLiteConnections"]
