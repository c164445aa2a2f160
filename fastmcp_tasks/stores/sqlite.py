"""The SQLite store (`sqlite:///path.db`): tasks survive restarts; processes share one file.

Connections. Each store keeps ONE read-write connection, owned by one
long-lived writer thread that batches queued operations into group commits
(`sqlite_writer`), and one read-only connection for the change feed. SQLite lets
one writer at a time into a file whatever we do, so a pool would only add lock
waits inside SQLite; one connection per process also means one WAL reader slot per process that is
never left inside a read transaction, so checkpoints can always finish and the
`-wal` file stays small. `get` uses the same connection: it is one primary-key
lookup.

Durability. WAL mode with `synchronous=NORMAL`: a committed change survives a
crash of any process; a power loss or OS crash may lose the last transactions
(never corrupt the file). Contention with other processes is absorbed by
`busy_timeout` plus a bounded exponential-backoff retry of the whole
transaction; past that bound the caller gets `StoreError`, never a failed task.

Atomicity. Every read-modify-write runs in one `BEGIN IMMEDIATE` transaction;
`transition` is an `UPDATE ... WHERE status IN (...)` checked by row count.

Change feed (`sqlite_feed`). Each change is a row of the `changes` table, written
in the transaction that makes the change, so subscribers in other processes see it.
A subscriber reads rows past the highest `seq` at subscription time; it polls
every `poll_interval` seconds (an idle poll is one `PRAGMA data_version`) and
is woken at once by writes made through this store instance. `purge_expired`
trims rows older than `change_retention` seconds, keeping at most `max_changes`;
a subscriber that falls further behind than that misses the trimmed rows.

Leases (`sqlite_leases`) and listing (`sqlite_listing`) are mixed in; each of
their methods is one transaction through `_run`, like the rest.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from fastmcp_tasks.errors import ConfigurationError, StoreError, TaskLimitExceeded
from fastmcp_tasks.stores import rules
from fastmcp_tasks.stores import sqlite_schema as schema
from fastmcp_tasks.stores.base import (
    ALLOWED_TRANSITIONS,
    UNCHANGED,
    ActiveCaps,
    TaskChange,
    TaskRecord,
    _Unchanged,
    encode_result,
    storable_text,
)
from fastmcp_tasks.stores.sqlite_feed import ChangeReader, Feed
from fastmcp_tasks.stores.sqlite_leases import SQLiteLeases
from fastmcp_tasks.stores.sqlite_listing import SQLiteListing
from fastmcp_tasks.stores.sqlite_schema import Tx, path_from_url
from fastmcp_tasks.stores.sqlite_writer import SQLiteWriter
from fastmcp_tasks.wire import ACTIVE_STATUSES, TERMINAL_STATUSES, TaskStatus

T = TypeVar("T")

DEFAULT_MAX_TASKS = 100_000


class SQLiteTaskStore(SQLiteListing, SQLiteLeases):
    """A `TaskStore` in a SQLite file, shareable by processes on one host.

    Args:
        path: the database file; created with the schema when missing or empty.
        max_tasks: most tasks retained at once, as in `MemoryTaskStore`; `None`: no cap.
        poll_interval: seconds between change-feed polls for other processes' writes.
        busy_timeout: seconds SQLite waits for another process's write lock.
        busy_retries: further attempts (exponential backoff) before `StoreError`.
        change_retention: seconds a change-feed row is kept by `purge_expired`.
        max_changes: most change-feed rows kept by `purge_expired`.
    """

    scheme = "sqlite"
    durable = True

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_tasks: int | None = DEFAULT_MAX_TASKS,
        poll_interval: float = 0.025,
        busy_timeout: float = 1.0,
        busy_retries: int = 6,
        change_retention: float = 300.0,
        max_changes: int = 100_000,
    ) -> None:
        text = os.fspath(path)
        if not text or text == ":memory:" or text.startswith("file:"):
            raise ConfigurationError(
                f"SQLite task store needs a file path, got {text!r}: an in-memory database "
                "cannot be shared between processes or survive a restart"
            )
        if max_tasks is not None and max_tasks < 1:
            raise ConfigurationError(f"max_tasks must be at least 1, got {max_tasks}")
        if poll_interval <= 0 or busy_timeout < 0 or busy_retries < 0 or max_changes < 1:
            raise ConfigurationError(
                "SQLite task store needs poll_interval > 0, busy_timeout >= 0, "
                "busy_retries >= 0 and max_changes >= 1"
            )
        self.path = Path(text).expanduser().absolute()
        self.max_tasks = max_tasks
        self.poll_interval = poll_interval
        self.busy_timeout = busy_timeout
        self.busy_retries = busy_retries
        self.change_retention = change_retention
        self.max_changes = max_changes
        self._conn: sqlite3.Connection | None = None
        self._changes: ChangeReader | None = None
        self._lock = threading.Lock()
        self._writer: SQLiteWriter | None = None
        self._wake = anyio.Event()
        self._feeds: set[Feed] = set()

    # --- lifecycle ----------------------------------------------------------------

    async def open(self) -> None:
        if self._conn is None:
            await anyio.to_thread.run_sync(self._open)

    def _open(self) -> None:
        path = self.path
        if not path.parent.is_dir():
            raise ConfigurationError(f"SQLite task store {str(path)!r}: no such directory")
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
        self._conn, self._changes = conn, ChangeReader(reader, str(path))
        self._writer = SQLiteWriter(conn, str(path), self.busy_retries)

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
        if writer is not None:
            writer.stop()
        changes, self._changes = self._changes, None
        if changes is not None:
            changes.close()
        with self._lock:
            if self._conn is not None:
                self._conn.close()
            self._conn = None

    # --- running SQL off the event loop -------------------------------------------

    async def _run(self, fn: Callable[[Tx], T], *, write: bool = True) -> T:
        writer = self._writer
        if writer is None:
            raise StoreError(f"SQLite task store {str(self.path)!r} is not open")
        value, emitted = await writer.submit(fn, write)
        if emitted:
            self._notify()
        return value

    def _locked(self, conn: sqlite3.Connection, fn: Callable[[Tx], T], *, write: bool) -> Any:
        delay = 0.01
        for attempt in range(self.busy_retries + 1):
            tx = Tx(conn)
            try:
                if not write:
                    return fn(tx), False
                conn.execute("BEGIN IMMEDIATE")
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

    # --- reads and creation -------------------------------------------------------

    async def create(self, record: TaskRecord, *, caps: ActiveCaps | None = None) -> None:
        def create(tx: Tx) -> TaskLimitExceeded | None:
            if caps is not None and record.is_active:
                if (refused := tx.refusal(caps, record.owner)) is not None:
                    return refused
            if self.max_tasks is not None and tx.count() >= self.max_tasks:
                tx.purge(time.time())
                if tx.count() >= self.max_tasks:
                    return TaskLimitExceeded("max_tasks", self.max_tasks)
            try:
                tx.conn.execute(schema.INSERT_TASK, schema.to_row(record))
            except sqlite3.IntegrityError:
                raise ValueError(f"task {record.task_id!r} already exists") from None
            return None

        if (refused := await self._run(create)) is not None:
            raise refused

    async def get(self, task_id: str) -> TaskRecord | None:
        return await self._run(lambda tx: tx.load(task_id), write=False)

    # --- changes ------------------------------------------------------------------

    async def set_status_message(self, task_id: str, message: str | None) -> TaskRecord | None:
        message = storable_text(message)

        def change(tx: Tx) -> TaskRecord | None:
            record = tx.load(task_id)
            if record is None or record.status not in ACTIVE_STATUSES:
                return None
            if record.status_message != message:
                record.status_message, record.updated_at = message, time.time()
                tx.save(record)
                tx.emit(task_id, "message", record.status)
            return record

        return await self._run(change)

    async def transition(
        self,
        task_id: str,
        status: TaskStatus,
        *,
        expect: frozenset[str] | None = None,
        status_message: str | _Unchanged | None = UNCHANGED,
        result: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
    ) -> TaskRecord | None:
        sources = [
            current
            for current, targets in ALLOWED_TRANSITIONS.items()
            if status in targets and (expect is None or current in expect)
        ]
        if not sources:
            return None

        def change(tx: Tx) -> TaskRecord | None:
            now = time.time()
            columns: dict[str, Any] = {"status": status, "updated_at": now}
            if not isinstance(status_message, _Unchanged):
                columns["status_message"] = storable_text(status_message)
            if status in TERMINAL_STATUSES:
                kept = result if status == "completed" else None
                columns.update(
                    terminal_at=now,
                    result_json=None if kept is None else encode_result(kept),
                    error=schema.dumps(error) if status == "failed" else None,
                    arguments=None,
                    input_requests=None,
                    answers=None,
                    context=None,
                )
            elif status == "working":
                columns["input_requests"] = None
            sets = ", ".join(f"{name} = ?" for name in columns)
            expiry = ", expires_at = ? + retention_ms / 1000.0" if "terminal_at" in columns else ""
            cursor = tx.conn.execute(
                f"UPDATE tasks SET {sets}{expiry} WHERE task_id = ? "
                f"AND status IN ({', '.join('?' * len(sources))})",
                (*columns.values(), *([now] if expiry else []), task_id, *sources),
            )
            if cursor.rowcount != 1:
                return None
            tx.emit(task_id, "status", status)
            return tx.load(task_id, live=False)  # retention 0: expired, yet the winner's

        return await self._run(change)

    async def request_input(
        self, task_id: str, requests: dict[str, Any], *, status_message: str | None = None
    ) -> TaskRecord | None:
        def change(tx: Tx) -> TaskRecord | None:
            record = tx.load(task_id)
            if record is None or not rules.park(record, requests, status_message):
                return None
            tx.save(record)
            tx.emit(task_id, "inputs", "input_required", {"keys": list(requests)})
            return record

        return await self._run(change)

    async def answer_input(self, task_id: str, responses: dict[str, Any]) -> dict[str, Any] | None:
        def change(tx: Tx) -> dict[str, Any] | None:
            record = tx.load(task_id)
            if record is None:
                return None
            accepted = rules.accept_answers(record, responses)
            if accepted:
                tx.save(record)
                tx.emit(task_id, "answered", record.status, {"keys": list(accepted)})
            return accepted

        return await self._run(change)

    async def take_answers(self, task_id: str, keys: frozenset[str]) -> dict[str, Any]:
        def change(tx: Tx) -> dict[str, Any]:
            record = tx.load(task_id)
            taken = {} if record is None else rules.take_answers(record, keys)
            if taken:
                tx.save(record)
            return taken

        return await self._run(change)

    async def withdraw_input(self, task_id: str, keys: frozenset[str]) -> TaskRecord | None:
        def change(tx: Tx) -> TaskRecord | None:
            record = tx.load(task_id)
            if record is None or record.status not in ACTIVE_STATUSES:
                return None
            if rules.withdraw(record, keys):
                tx.save(record)
                tx.emit(task_id, "inputs", record.status, {"withdrawn": sorted(keys)})
            return record

        return await self._run(change)

    async def request_cancel(self, task_id: str) -> TaskRecord | None:
        def change(tx: Tx) -> TaskRecord | None:
            record = tx.load(task_id)
            if record is None or record.status in TERMINAL_STATUSES:
                return record
            record.cancel_requested = True
            tx.save(record)
            tx.emit(task_id, "cancel_requested", record.status)
            return record

        return await self._run(change)

    @asynccontextmanager
    async def changes(
        self, task_ids: frozenset[str] | None = None, kinds: frozenset[str] | None = None
    ) -> AsyncIterator[AsyncIterator[TaskChange]]:
        after = await self._run(Tx.last_seq, write=False)
        if self._changes is None:
            raise StoreError(f"SQLite task store {str(self.path)!r} is not open")
        feed = Feed(self._changes, lambda: self._wake, self.poll_interval, after, task_ids, kinds)
        self._feeds.add(feed)
        try:
            yield feed
        finally:
            feed.closed = True
            self._feeds.discard(feed)

    # --- retention ----------------------------------------------------------------

    async def purge_expired(self, now: float) -> int:
        def purge(tx: Tx) -> int:
            removed = tx.purge(now)
            tx.trim_changes(time.time() - self.change_retention, self.max_changes)
            return removed

        return await self._run(purge)


__all__ = ["SQLiteTaskStore", "path_from_url"]
