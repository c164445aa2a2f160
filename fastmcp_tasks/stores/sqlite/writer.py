"""The SQLite store's connection threads: one long-lived thread per connection, batched.

Handing each call to a fresh worker thread (`anyio.to_thread`) cost more than
the SQL itself: a loop turn out and one back per call. Instead one thread owns
a connection and drains whatever is queued in one go, and the results go back
to the event loop with one `call_soon_threadsafe` per batch. The store runs two:

- the writer (read-write connection): consecutive writes share a single
  `BEGIN IMMEDIATE ... COMMIT`, each inside its own `SAVEPOINT` so one failing
  operation rolls back only itself;
- the reader (`read_only=True`, the read-only connection): every operation is a
  plain read, so reads never queue behind a write waiting for another process's
  lock (WAL lets readers run during any write transaction). A read submitted
  after an awaited write sees it: the write had committed. A point read (a task by
  its id, the claim's probe) runs on the event loop's thread instead while the
  reader's thread is idle (`read_now`): a hop to the thread and back costs several
  times the read itself. It does not wait for a lock there (busy timeout 0, the lock
  tried, not awaited); anything it meets sends it to the thread, and a slow one sends
  the next ones there for a while (`SLOW_INLINE`).

Abandoning. Each operation has a state, changed only under the runner's state
lock: `queued`, then `running` (set by the thread; for writes, once
`BEGIN IMMEDIATE` succeeded) or `abandoned` (set by a caller cancelled while it
was still queued). An abandoned operation never runs, so a `create` whose
caller timed out waiting for the lock creates nothing. A write cancelled once
running is awaited to its end, shielded, and its outcome returned: a `create`
that committed is reported as committed.
"""

from __future__ import annotations

import asyncio
import logging
import math
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, cast

import anyio

from fastmcp_tasks.errors import StoreError
from fastmcp_tasks.stores.sqlite import schema
from fastmcp_tasks.stores.sqlite.tx import Tx

T = TypeVar("T")

logger = logging.getLogger("fastmcp_tasks.stores.sqlite")

#: A point read on the event loop slower than this (seconds) sends the next ones to the
#: reader thread for `INLINE_PAUSE` seconds: SQLite's WAL read setup retries for up to
#: about 10 s whatever the busy timeout while another process holds its locks (one
#: stopped mid-checkpoint), and the loop must not wait like that again and again.
SLOW_INLINE = 0.05
INLINE_PAUSE = 60.0
_clock = time.monotonic  # what `read_now` times its reads with (a test replaces it)

OpState = Literal["queued", "running", "abandoned"]


@dataclass(slots=True)
class StoreStats:
    """What a SQLite store has done since it was made: plain counters, for benchmarks.

    Attributes:
        write_transactions: `BEGIN IMMEDIATE` taken (the file's write lock).
        reads: read operations on the read-only connection (a `get`, a listing, the
            probe before `claim_queued` takes the write lock, a batch of feed rows).
        feed_polls: `PRAGMA data_version` checks by the change feed.
        abandoned: operations whose caller was cancelled before they ran (never run).
        shielded: writes whose caller was cancelled while they ran (outcome awaited).
    """

    write_transactions: int = 0
    reads: int = 0
    feed_polls: int = 0
    abandoned: int = 0
    shielded: int = 0


@dataclass(eq=False, slots=True)
class Op:
    """One queued call: `fn(tx)` as a write (in a transaction) or a plain read."""

    fn: Callable[[Tx], Any]
    write: bool
    future: asyncio.Future[tuple[Any, bool]]
    loop: asyncio.AbstractEventLoop
    counted: bool = True
    state: OpState = "queued"
    outcome: tuple[Any, bool] | None = None
    error: BaseException | None = None
    settled: bool = False  # the outcome reached the event loop (`_settle` ran)
    rescue: asyncio.Future[None] | None = None  # awaited by a cancelled caller of a write


class SQLiteWriter:
    """Runs operations on one connection in a dedicated thread (see the module doc)."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        where: str,
        busy_retries: int,
        stats: StoreStats,
        *,
        read_only: bool = False,
    ) -> None:
        self.conn = conn
        self.where = where
        self.busy_retries = busy_retries
        self.stats = stats
        self.read_only = read_only
        self.lock = threading.Lock()  # held while a batch runs
        self._state = threading.Lock()  # guards `Op.state` and `_stopped`
        self._stopped = False
        self._inline_after = 0.0  # `_clock()` before which `read_now` declines
        self._busy_ms: int | None = None  # a busy timeout `read_now` could not put back
        self._queue: queue.SimpleQueue[Op | None] = queue.SimpleQueue()
        name = "fastmcp-tasks sqlite " + ("reader" if read_only else "writer")
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    async def submit(
        self, fn: Callable[[Tx], T], write: bool, *, counted: bool = True
    ) -> tuple[T, bool]:
        """`(fn(tx), emitted)` from the thread; see the module doc for cancellation."""
        if write and self.read_only:
            raise AssertionError("a write submitted to the reader")
        loop = asyncio.get_running_loop()
        op = Op(fn, write, loop.create_future(), loop, counted)
        with self._state:
            if self._stopped:
                raise StoreError(f"SQLite task store {self.where!r} is not open")
            self._queue.put(op)
        # the thread returns `(fn(tx), emitted)`: `fn`'s value, so typed as `fn`'s
        try:
            return cast("tuple[T, bool]", await op.future)
        except asyncio.CancelledError:
            if not self._must_wait(op):
                raise
        with anyio.CancelScope(shield=True):  # it runs: wait for its outcome, and report it
            outcome = await self._outcome(op)
        return cast("tuple[T, bool]", outcome)

    def read_now(self, fn: Callable[[Tx], T], busy_ms: int) -> tuple[bool, T | None]:
        """`(True, fn(tx))` run on the calling thread (the event loop's) when this is the
        reader and its thread is idle; `(False, None)` when it is not, or when the read
        meets anything at all (a lock, an I/O error, a bad row): the caller then submits
        it to the thread, which answers as it always has. It does not wait for a lock:
        SQLite's busy timeout is 0 while it runs (`busy_ms` is put back after); only
        SQLite's own WAL read setup may retry, and a read that took long stops these
        reads for a while (`SLOW_INLINE`)."""
        if (
            not self.read_only
            or _clock() < self._inline_after
            or not self.lock.acquire(blocking=False)
        ):
            return False, None
        try:
            if self._stopped:  # closing: the thread answers "not open"
                return False, None
            conn = self.conn
            started = _clock()
            conn.execute("PRAGMA busy_timeout = 0")
            try:
                value = fn(Tx(conn))
            finally:
                self._after_inline(conn, busy_ms, started)
            self.stats.reads += 1  # under the lock, as the thread counts its reads
        except Exception:
            return False, None
        finally:
            self.lock.release()
        return True, value

    def _after_inline(self, conn: sqlite3.Connection, busy_ms: int, started: float) -> None:
        """Put the busy timeout back (when that fails, the thread does it before its next
        batch and no read runs here again); a slow read pauses these reads."""
        took = _clock() - started
        if took > SLOW_INLINE:
            self._inline_after = _clock() + INLINE_PAUSE
            logger.info(
                "SQLite task store %s: a read took %.3f s on the event loop; reads by id "
                "go to the reader thread for %g s",
                self.where,
                took,
                INLINE_PAUSE,
            )
        try:
            conn.execute(f"PRAGMA busy_timeout = {busy_ms}")
        except BaseException:
            self._inline_after, self._busy_ms = math.inf, busy_ms
            raise

    def _must_wait(self, op: Op) -> bool:
        """Whether a write whose caller was cancelled must be waited for (it has started);
        a queued op is abandoned instead (it will never run), a read simply dropped."""
        with self._state:
            if op.state == "queued":
                op.state = "abandoned"
        if op.state == "abandoned":
            self.stats.abandoned += 1
            return False
        if not op.write:
            return False
        self.stats.shielded += 1
        return True

    async def _outcome(self, op: Op) -> tuple[Any, bool]:
        """The outcome of a running op whose caller's own future was cancelled."""
        if not op.settled:
            op.rescue = op.loop.create_future()
            await op.rescue
        if op.error is not None:
            raise op.error
        assert op.outcome is not None
        return op.outcome

    def stop(self) -> None:
        """Finish what is queued, then end the thread (blocking; call from a thread)."""
        with self._state:
            if self._stopped:
                return
            self._stopped = True
            self._queue.put(None)
        self._thread.join()
        with self.lock:  # a `read_now` begun before the stop has ended: close is safe
            pass

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

    def _take(self, ops: list[Op]) -> list[Op]:
        """Mark the still-queued `ops` running (they will run); drop the abandoned ones."""
        with self._state:
            taken = [op for op in ops if op.state == "queued"]
            for op in taken:
                op.state = "running"
        return taken

    def _run(self, batch: list[Op]) -> None:
        if self._busy_ms is not None:  # a `read_now` could not put it back
            try:
                self.conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
                self._busy_ms = None
            except sqlite3.Error:
                pass  # the next batch tries again
        writes: list[Op] = []
        for op in batch:
            if op.write:
                writes.append(op)
                continue
            if writes:
                self._commit(writes)
                writes = []
            if not self._take([op]):
                continue
            if op.counted and self.read_only:
                self.stats.reads += 1
            try:
                op.outcome = (op.fn(Tx(self.conn)), False)
            except BaseException as exc:
                op.error = self._wrap(exc)
        if writes:
            self._commit(writes)

    def _pending(self, writes: list[Op]) -> bool:
        with self._state:
            return any(op.state == "queued" for op in writes)

    def _commit(self, writes: list[Op]) -> None:
        conn = self.conn
        delay = 0.01
        for attempt in range(self.busy_retries + 1):
            if not self._pending(writes):
                return  # every caller gave up: do not wait for the lock at all
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
        self.stats.write_transactions += 1
        taken = self._take(writes)
        if not taken:
            conn.execute("ROLLBACK")
            return
        for op in taken:
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
            for op in taken:
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
            if op.state != "abandoned":
                by_loop.setdefault(op.loop, []).append(op)
        for loop, ops in by_loop.items():
            try:
                loop.call_soon_threadsafe(_settle, ops)
            except RuntimeError:  # the loop is closed: nobody is waiting any more
                pass


def _settle(ops: list[Op]) -> None:
    """Hand outcomes to their callers (on the event loop, like the cancelled callers)."""
    for op in ops:
        op.settled = True
        waiter = op.future if op.rescue is None else op.rescue
        if waiter.done():  # the caller was cancelled meanwhile (a read, or a write not yet
            continue  # back in `_outcome`, which then finds it settled)
        if op.rescue is not None:
            op.rescue.set_result(None)
        elif op.error is not None:
            op.future.set_exception(op.error)
        else:
            op.future.set_result(op.outcome)  # type: ignore[arg-type]


__all__ = ["Op", "SQLiteWriter", "StoreStats"]
