"""The SQLite store's writer thread: one long-lived thread, batched group commits.

Handing each call to a fresh worker thread (`anyio.to_thread`) cost more than
the SQL itself: a loop turn out and one back per call, with every write queued
behind the previous one. Instead one thread owns the read-write connection and
drains whatever is queued in one go: consecutive writes share a single
`BEGIN IMMEDIATE ... COMMIT`, each inside its own `SAVEPOINT` so one failing
operation rolls back only itself, and the results go back to the event loop
with one `call_soon_threadsafe` per batch. Reads queued between writes run in
order, so a read always sees the writes queued before it.
"""

from __future__ import annotations

import asyncio
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fastmcp_tasks.errors import StoreError
from fastmcp_tasks.stores import sqlite_schema as schema
from fastmcp_tasks.stores.sqlite_schema import Tx


@dataclass(eq=False)
class Op:
    """One queued call: `fn(tx)` as a write (in a transaction) or a plain read."""

    fn: Callable[[Tx], Any]
    write: bool
    future: asyncio.Future[tuple[Any, bool]]
    loop: asyncio.AbstractEventLoop
    outcome: tuple[Any, bool] | None = None
    error: BaseException | None = None
    done: bool = field(default=False)


class SQLiteWriter:
    """Runs operations on one connection in a dedicated thread."""

    def __init__(self, conn: sqlite3.Connection, where: str, busy_retries: int) -> None:
        self.conn = conn
        self.where = where
        self.busy_retries = busy_retries
        self.lock = threading.Lock()
        self._queue: queue.SimpleQueue[Op | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name="fastmcp-tasks sqlite", daemon=True)
        self._thread.start()

    async def submit(self, fn: Callable[[Tx], Any], write: bool) -> tuple[Any, bool]:
        loop = asyncio.get_running_loop()
        op = Op(fn, write, loop.create_future(), loop)
        self._queue.put(op)
        return await op.future

    def stop(self) -> None:
        """Finish what is queued, then end the thread (blocking; call from a thread)."""
        self._queue.put(None)
        self._thread.join()

    # --- the thread ------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            stop = False
            while True:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stop = True
                    break
                batch.append(more)
            with self.lock:
                self._run(batch)
            self._deliver(batch)
            if stop:
                return

    def _run(self, batch: list[Op]) -> None:
        writes: list[Op] = []
        for op in batch:
            if op.write:
                writes.append(op)
                continue
            if writes:
                self._commit(writes)
                writes = []
            try:
                op.outcome = (op.fn(Tx(self.conn)), False)
            except BaseException as exc:
                op.error = self._wrap(exc)
        if writes:
            self._commit(writes)

    def _commit(self, writes: list[Op]) -> None:
        conn = self.conn
        delay = 0.01
        for attempt in range(self.busy_retries + 1):
            try:
                conn.execute("BEGIN IMMEDIATE")
                break
            except sqlite3.Error as exc:
                if not schema.is_busy(exc) or attempt == self.busy_retries:
                    error = self._wrap(exc, attempts=attempt + 1)
                    for op in writes:
                        op.error = error
                    return
                time.sleep(delay)
                delay = min(delay * 2, 0.5)
        for op in writes:
            tx = Tx(conn)
            conn.execute("SAVEPOINT op")
            try:
                value = op.fn(tx)
            except BaseException as exc:
                conn.execute("ROLLBACK TO op")
                conn.execute("RELEASE op")
                op.error = self._wrap(exc)
                continue
            conn.execute("RELEASE op")
            op.outcome = (value, tx.emitted)
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            error = self._wrap(exc)
            for op in writes:
                op.outcome, op.error = None, error

    def _wrap(self, exc: BaseException, attempts: int = 1) -> BaseException:
        if not isinstance(exc, sqlite3.Error):
            return exc
        if schema.is_busy(exc):
            return StoreError(
                f"SQLite task store {self.where!r} stayed locked by another connection "
                f"through {attempts} attempts: {exc}"
            )
        return StoreError(f"SQLite task store {self.where!r}: {exc}")

    @staticmethod
    def _deliver(batch: list[Op]) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list[Op]] = {}
        for op in batch:
            by_loop.setdefault(op.loop, []).append(op)
        for loop, ops in by_loop.items():
            try:
                loop.call_soon_threadsafe(_settle, ops)
            except RuntimeError:  # the loop is closed: nobody is waiting any more
                pass


def _settle(ops: list[Op]) -> None:
    for op in ops:
        if op.future.done():  # the caller was cancelled meanwhile
            continue
        if op.error is not None:
            op.future.set_exception(op.error)
        else:
            op.future.set_result(op.outcome)  # type: ignore[arg-type]
