"""The SQLite store's change feed: rows of the `changes` table, read across processes.

Every change is a row written in the transaction that makes it (see
`sqlite.tx.Tx.emit`), so a subscriber in any process sharing the file sees it.
`ChangeReader` reads them through the store's read-only connection, on the
reader thread: a poll costs one `PRAGMA data_version`, and rows are read in
batches only when the file changed.

A `Feed` is one subscription: it yields the rows past the newest one at
subscription time, filtered by task id and kind. Between polls it sleeps
`poll_interval`, doubling while nothing arrives up to `idle_poll_interval` (an
idle process costs the file about one poll a second), back to `poll_interval`
as soon as rows arrive or a write through the same store instance wakes it.

A failing poll (a `StoreError`: disk I/O, say) does not end the subscription:
the feed backs off (capped exponential), logs one WARNING per outage and one
INFO when it reads again, and retries from the same cursor, so no change is
lost or delivered twice.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from fastmcp_tasks.errors import StoreError
from fastmcp_tasks.stores.base import TaskChange
from fastmcp_tasks.stores.sqlite import schema
from fastmcp_tasks.stores.sqlite.writer import StoreStats

BATCH = 500

#: The longest wait between attempts while polls keep failing (seconds).
RETRY_LONGEST = 5.0

logger = logging.getLogger("fastmcp_tasks.stores.sqlite")

Rows = list[tuple[Any, ...]]
#: `poll(after, seen)` run on the reader thread: `ChangeReader.poll`'s answer.
Poll = Callable[[int, int], Awaitable[tuple[int, Rows]]]


class ChangeReader:
    """Reads change rows through the read-only connection (called on the reader thread)."""

    def __init__(self, conn: sqlite3.Connection, where: str, stats: StoreStats) -> None:
        self.conn: sqlite3.Connection | None = conn
        self.where = where
        self.stats = stats
        self.lock = threading.Lock()
        self._data_version = -1
        self._generation = 0

    def poll(self, after: int, seen: int) -> tuple[int, Rows]:
        """Change rows past `after`, unless nothing changed since generation `seen`."""
        with self.lock:
            conn = self.conn
            if conn is None:
                return seen, []
            try:
                self.stats.feed_polls += 1
                version = conn.execute("PRAGMA data_version").fetchone()[0]
                if version != self._data_version:
                    self._data_version, self._generation = version, self._generation + 1
                if self._generation == seen:
                    return seen, []
                self.stats.reads += 1
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
        poll: Poll,
        wake: Callable[[], anyio.Event],
        poll_interval: float,
        idle_poll_interval: float,
        after: int,
        task_ids: frozenset[str] | None,
        kinds: frozenset[str] | None,
    ) -> None:
        self._poll = poll
        self._wake = wake
        self._poll_interval = poll_interval
        self._idle_poll_interval = max(idle_poll_interval, poll_interval)
        self._task_ids = task_ids
        self._kinds = kinds
        self.after = after
        self.seen = -1  # the reader's data generation at the last query (-1: query now)
        self.interval = poll_interval  # the current wait between idle polls
        self.failures = 0  # consecutive failed polls (0: reading fine)
        self.closed = False
        self._buffer: deque[TaskChange] = deque()

    def __aiter__(self) -> Feed:
        return self

    async def __anext__(self) -> TaskChange:
        while not self._buffer:
            if self.closed:
                raise StopAsyncIteration
            wake = self._wake()  # taken before polling: a later local write sets it
            try:
                seen, rows = await self._poll(self.after, self.seen)
            except StoreError as exc:
                if self.closed:
                    raise StopAsyncIteration from None
                await self._back_off(exc, wake)
                continue
            if self.failures:
                logger.info("The change feed reads again after %d failed polls", self.failures)
                self.failures = 0
            self.seen = -1 if len(rows) == BATCH else seen
            for seq, task_id, kind, status, details in rows:
                self.after = seq
                if (self._task_ids is None or task_id in self._task_ids) and (
                    self._kinds is None or kind in self._kinds
                ):
                    self._buffer.append(TaskChange(task_id, kind, status, json.loads(details)))
            if rows:
                self.interval = self._poll_interval
            elif await _woken(wake, self.interval):
                self.interval = self._poll_interval
            else:
                self.interval = min(self.interval * 2, self._idle_poll_interval)
        return self._buffer.popleft()

    async def _back_off(self, exc: StoreError, wake: anyio.Event) -> None:
        """Wait before polling again after a failure; the cursor (`after`) is kept.

        The first retry comes after `poll_interval`, each further one after twice the
        last, up to `RETRY_LONGEST`.
        """
        if not self.failures:
            logger.warning("The change feed cannot read (%s); retrying with backoff", exc)
        self.failures += 1
        self.seen = -1
        delay = min(self._poll_interval * 2 ** min(self.failures - 1, 30), RETRY_LONGEST)
        deadline = anyio.current_time() + delay
        while not self.closed:  # local writes do not cut the wait short; `close` does
            remaining = deadline - anyio.current_time()
            if remaining <= 0:
                return
            await _woken(wake, remaining)
            wake = self._wake()


async def _woken(wake: anyio.Event, within: float) -> bool:
    """Whether `wake` was set within `within` seconds."""
    with anyio.move_on_after(within):
        await wake.wait()
        return True
    return False


__all__ = ["BATCH", "ChangeReader", "Feed", "Poll"]
