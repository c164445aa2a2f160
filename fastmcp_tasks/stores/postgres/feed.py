"""The PostgreSQL store's change feed: `changes` rows, woken by LISTEN/NOTIFY, fanned out.

Every change is a row of the `changes` table, inserted by the statement that makes the
change, which also calls `pg_notify` on the store's channel with the highest `seq` it
wrote (at commit; a batch's creations list theirs in one, `created_notes`).
`PostgresChangeFeed` keeps ONE reader per store instance, from its first subscriber until
`close`: a dedicated connection (`listen_url`, or the store's URL; a session, never a
transaction-mode pooler) that LISTENs and, on each notification whose `seq` is past its
watermark, reads the rows past the watermark in `seq` order and hands them to every
in-process subscriber whose filters select them. A quiet notification (its rows are all of
kinds no task engine waits for: `feed_parts.WAKING_KINDS`) is read only while a subscriber
wants such kinds; its rows are read with the next notification that is, or `QUIET_LAG`
after the last read at the latest. A notification only says "read": one lost or coalesced
loses nothing, since the rows are read by watermark. While nothing happens the reader
reads once every `keep_up` at most (TCP keepalives watch the idle connection).

Commit order. `seq` is taken when a row is inserted, so a transaction that took `seq` 10
may commit after one that took 11. The reader never skips a missing `seq` it may still
see: on a gap it stops before it and waits for the notification of that commit. A gap is
left behind only when it is proven permanent (a rolled-back transaction): the reader reads
the sequence's last value L and then finds no other session holding a write lock on
`changes` (every insert holds one from before it takes its `seq` until it ends), so every
`seq` up to L is committed or gone, and a re-read tells which. Under constant writes that
proof may not come; a gap older than `gap_timeout` is then skipped with a WARNING.

Outages. A broken LISTEN connection (the server restarting, the backend terminated,
keepalives giving up on a dead peer) is reconnected with capped backoff, logged once per
outage; after LISTEN succeeds again the reader reads from its watermark, so what was
committed meanwhile is delivered exactly once.

Quiet notifications are sent only while some reader wants them (`postgres.quiet_readers`,
which says when a reader registers and renews). A reader with subscribers reads at least
every `keep_up` (`KEEP_UP`), so rows no notification announced are read before the
retention trim would leave a gap to prove.

A creation's notification (only new tasks' `queued` rows: `feed_parts.QUEUED_ONLY`)
is not read at once by a reader whose subscribers all want only waking kinds (a
worker's runners): they get `feed_parts.NEW_TASKS` ("something was queued", which is all
a runner does with it: a claim round) and the rows are read like quiet ones, with the
next notification that is read or `QUIET_LAG` later, so a worker reads no row per new
task when it is created; when read, such a row goes only to the subscribers that were
not told (`feed_parts.Announced`), so a runner does not act on a creation twice.

While every subscriber wants only waking kinds (a runner), the reader waits for
notifications once per `pace` at most (`WAKE_SPACING`; more while none of the process's
runners is its pool's primary, `space_wakes`, less by up to half at random; a shorter pace
ends the pause sooner: `feed_parts.Pace`); one after a pause that long is handled at once.

Subscribing. A new subscription waits (up to the store's `timeout`) for the reader to be
listening, then reads the newest `seq` through the pool and receives exactly the rows past
it. Filtering is in-process; each subscriber has an unbounded queue, so a slow reader only
delays itself. The reader outlives its last subscriber (the next one then needs no new
connection, as a front end's `subscriptions/listen` streams come and go); while it has
none it reads nothing and only moves its watermark past what it is notified of, which the
next subscriber starts after.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
import psycopg

from fastmcp_tasks.errors import StoreError
from fastmcp_tasks.stores.base import TaskChange
from fastmcp_tasks.stores.postgres.feed_parts import (
    Announced,
    Heard,
    Pace,
    announce,
    any_wants_quiet,
    details_of,
    takes_announcements,
    takes_new_tasks,
    wants_quiet,
)
from fastmcp_tasks.stores.postgres.liveness import returns_rows
from fastmcp_tasks.stores.postgres.quiet_readers import QuietRegistration
from fastmcp_tasks.stores.subscriptions import Subscriber, SubscriberFeed

if TYPE_CHECKING:
    from fastmcp_tasks.stores.postgres.sql import Statements

logger = logging.getLogger("fastmcp_tasks.stores.postgres")

BATCH = 500
#: The longest quiet rows wait unread (seconds) by a reader that does not want them
#: (less with a `change_retention` under twice this: they are read before the trim).
QUIET_LAG = 1.0
#: The shortest time between two waits for notifications of a runners-only reader: a
#: burst's notifications, quiet ones too, cost one wake-up (seconds; module doc).
WAKE_SPACING = 0.01
#: The longest time a reader with subscribers goes without reading (seconds; the store
#: passes a quarter of its `change_retention`): rows no notification announced (quiet
#: ones nobody registered for) are read before the retention trim removes them.
KEEP_UP = 75.0
RETRY_LONGEST = 2.0  #: the longest wait between reconnection attempts (seconds)
#: The first and the longest wait before a pending gap is checked again (seconds).
GAP_FIRST, GAP_LONGEST = 0.005, 0.25


class PostgresChangeFeed:
    """Subscriptions to one store's `changes` rows, served by a single LISTEN reader."""

    def __init__(
        self,
        *,
        url: str,
        options: dict[str, Any],
        sql: Statements,
        connect_timeout: float,
        application_name: str,
        label: str,
        gap_timeout: float,
        stats: dict[str, int],
        quiet_lag: float = QUIET_LAG,
        keep_up: float = KEEP_UP,
        scrub: Callable[[str], str],
        pooled: Callable[[str, tuple[Any, ...]], Awaitable[Any]],
    ) -> None:
        self.url = url
        self.options = options
        self.sql = sql
        self.connect_timeout = connect_timeout
        self.application_name = application_name
        self.label = label
        self.gap_timeout = gap_timeout
        self.quiet_lag = quiet_lag
        self.keep_up = keep_up
        self.stats = stats
        self.scrub = scrub
        self.pooled = pooled  # one statement through the store's pool
        self.pace = Pace(WAKE_SPACING)  # a runners-only reader's (module doc)
        self.quiet = QuietRegistration(sql.schema, sql.channel)
        self._subscribers: set[Subscriber[float]] = set()
        self._lock = anyio.Lock()
        self._reader: asyncio.Task[None] | None = None
        self._listening = asyncio.Event()
        self.watermark: int | None = None  # the last seq dispatched (module doc)
        self.announced = Announced()  # creations told of, their rows not read yet
        self._proven = 0  # every seq up to this one is committed or gone
        self._gap_since: float | None = None
        self._last_read = 0.0  # `time.monotonic()` of the last read (`QUIET_LAG`)
        self.listener_pid: int | None = None  # the LISTEN connection's backend, if any

    @asynccontextmanager
    async def subscribe(
        self,
        task_ids: frozenset[str] | None,
        kinds: frozenset[str] | None,
        newest: Callable[[], Awaitable[int]],
    ) -> AsyncIterator[AsyncIterator[TaskChange]]:
        """The changes of these kinds to these tasks made after this call (default: all).

        Raises:
            StoreError: the reader could not LISTEN within the timeout, or the newest
                `seq` could not be read (nothing is left behind).
        """
        send, receive = anyio.create_memory_object_stream[tuple[float, TaskChange]](math.inf)
        sub: Subscriber[float] = Subscriber(task_ids, kinds, send, math.inf)
        try:
            async with self._lock:
                if self._reader is None:
                    self._listening = asyncio.Event()
                    self.watermark, self._gap_since = None, None
                    self.announced = Announced()
                    self._reader = asyncio.get_running_loop().create_task(self._read())
                listening = self._listening
                renewing = any_wants_quiet(self._subscribers)  # the reader keeps its row fresh
                self._subscribers.add(sub)
            try:
                with anyio.fail_after(self.connect_timeout):
                    await listening.wait()
            except TimeoutError:
                raise StoreError(
                    f"PostgreSQL task store {self.label}: the change feed could not LISTEN "
                    f"within {self.connect_timeout:g} s"
                ) from None
            if wants_quiet(sub) and (not renewing or self.quiet.due()):  # notified from
                await self.quiet.register(self.pooled)  # here on (`quiet_readers`)
            sub.start = await newest()
            async with receive:
                yield SubscriberFeed(receive, sub)
        finally:
            send.close()
            receive.close()
            self._subscribers.discard(sub)  # the reader stays, idle, until `close`

    async def close(self) -> None:
        """End every subscription and stop the reader. Idempotent."""
        for sub in self._subscribers:
            sub.send.close()
        self._subscribers.clear()
        await self._stop_reader()
        with anyio.CancelScope(shield=True), anyio.move_on_after(self.connect_timeout):
            try:
                await self.quiet.unregister(self.pooled)
            except StoreError:
                pass  # it lapses

    async def _stop_reader(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        return await psycopg.AsyncConnection.connect(
            self.url,
            autocommit=True,
            connect_timeout=max(1, round(self.connect_timeout)),
            application_name=self.application_name,
            **self.options,
        )

    async def _read(self) -> None:
        """LISTEN, catch up, then read on each notification; reconnect on failure."""
        delay = 0.0
        while True:
            try:
                conn = await self._connect()
            except (psycopg.Error, OSError) as exc:
                delay = self._failed(exc, delay)
                await asyncio.sleep(delay)
                continue
            try:
                async with conn:
                    await self._execute(conn, self.sql.listen)
                    if self.watermark is None:
                        (row,) = await self._execute(conn, self.sql.last_seq)
                        self.watermark = int(row[0])
                    self.listener_pid = conn.info.backend_pid
                    self._listening.set()
                    if delay:
                        logger.info("%s: change feed listens again", self.label)
                        delay = 0.0
                    await self._follow(conn)
            except Exception as exc:  # keep reading: subscribers wait, nothing is lost
                self._listening.clear()
                self.listener_pid = None
                delay = self._failed(exc, delay)
                await asyncio.sleep(delay)

    def _failed(self, exc: BaseException, delay: float) -> float:
        if not delay:
            logger.warning(
                "%s: change feed connection failed, reconnecting: %s",
                self.label,
                self.scrub(str(exc)).strip(),
            )
        return min(max(delay * 2, 0.05), RETRY_LONGEST)

    async def _execute(self, conn: psycopg.AsyncConnection[Any], query: str, *args: Any) -> Any:
        self.stats["feed_statements"] += 1
        cur = await conn.execute(query, args or None)
        return await cur.fetchall() if returns_rows(cur) else []

    async def _follow(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Catch up, then wait for notifications (or a pending gap's recheck, a renewal,
        a keep-up read) forever. A quiet notification is read at once only while some
        subscriber wants a kind outside `feed_parts.WAKING_KINDS`; otherwise its rows
        wait for the next read, `QUIET_LAG` at most (module doc)."""
        wait = GAP_FIRST
        pending = await self._catch_up(conn)
        quiet = 0  # the highest quiet seq heard (read once the watermark passes it)
        woke = 0.0  # `time.monotonic()` when the last wait ended
        while True:
            assert self.watermark is not None
            wants_quiet = any_wants_quiet(self._subscribers)
            if wants_quiet and self.quiet.due():  # keep quiet changes notified, and read
                await self.quiet.register(lambda q, p: self._execute(conn, q, *p), renew=True)
                pending = await self._catch_up(conn)  # what slipped past (`quiet_readers`)
            elif self._subscribers and time.monotonic() - self._last_read >= self.keep_up:
                pending = await self._catch_up(conn)  # rows nobody told it of, in time
            timeout: float | None = None
            if pending:
                timeout, wait = wait, min(wait * 2, GAP_LONGEST)
            if wants_quiet:
                due = max(0.0, self.quiet.renew_at() - time.monotonic())
                timeout = due if timeout is None else min(timeout, due)
            if self._subscribers:
                due = max(0.0, self.keep_up - (time.monotonic() - self._last_read))
                timeout = due if timeout is None else min(timeout, due)
            if quiet > self.watermark:  # read them by `QUIET_LAG` after the last read
                due = max(0.0, self.quiet_lag - (time.monotonic() - self._last_read))
                timeout = due if timeout is None else min(timeout, due)
            if not any_wants_quiet(self._subscribers):  # a runner's: a burst's notifications gather
                await self.pace.wait(woke)
            heard = Heard()
            async for notify in conn.notifies(timeout=timeout, stop_after=1):
                heard.add(notify.payload)
            woke = time.monotonic() - random.random() * (self.pace.spacing - WAKE_SPACING) / 2
            async for notify in conn.notifies(timeout=0):  # whatever else has arrived
                heard.add(notify.payload)
            newest = heard.waking
            quiet = max(quiet, heard.quiet)
            if not self._subscribers:  # nobody to hand rows to: the next one starts later
                self.watermark = max(self.watermark, newest, quiet, heard.created)
                pending, self._gap_since = False, None
                self.announced.forget_through(self.watermark)
                continue
            if self._announce(heard):  # runners only: woken now, the rows read later
                quiet = max(quiet, heard.created)
            else:
                newest = max(newest, heard.created)
            lagged = time.monotonic() - self._last_read >= self.quiet_lag
            if quiet > self.watermark and (any_wants_quiet(self._subscribers) or lagged):
                newest = max(newest, quiet)
            if pending or newest > self.watermark:
                pending = await self._catch_up(conn)
                if not pending:
                    wait = GAP_FIRST

    def _announce(self, heard: Heard) -> bool:
        """`NEW_TASKS` for the creations heard whose rows were not read, when every
        subscriber takes it instead of the rows; whether it went out (module doc)."""
        assert self.watermark is not None
        if heard.created <= self.watermark or not takes_announcements(self._subscribers):
            return False
        announce(self._subscribers, heard.created)
        self.announced.add(heard.created_seqs, self.watermark)
        return True

    async def _catch_up(self, conn: psycopg.AsyncConnection[Any]) -> bool:
        """Dispatch the rows past the watermark, in order; True when stopped at a gap."""
        self._last_read = time.monotonic()
        proved = False
        while True:
            assert self.watermark is not None
            self.stats["feed_reads"] += 1
            rows = await self._execute(conn, self.sql.changes_after, self.watermark, BATCH)
            gap = self._dispatch_rows(rows)
            if gap is None:
                if len(rows) < BATCH:
                    return False
                continue
            if proved:
                return True
            last, alone = (await self._execute(conn, self.sql.writers))[0]
            proved = True
            if alone:
                self._proven = max(self._proven, int(last))
            elif not self._stale():
                return True

    def _dispatch_rows(self, rows: list[tuple[Any, ...]]) -> int | None:
        """Dispatch `rows` up to a gap not known to be permanent; the seq after it, if any."""
        for seq, task_id, kind, status, details in rows:
            assert self.watermark is not None
            if seq > self.watermark + 1:  # a gap: wait for it to fill, or pass it
                if seq - 1 > self._proven and not self._stale():
                    self._gap_since = self._gap_since or time.monotonic()
                    return int(seq)
                if seq - 1 > self._proven:
                    logger.warning(
                        "%s: change feed skips seq %d..%d, missing for %.1f s",
                        self.label,
                        self.watermark + 1,
                        seq - 1,
                        self.gap_timeout,
                    )
                self.announced.forget_through(int(seq) - 1)  # trimmed or gone: never read
            self._gap_since = None
            self.watermark = int(seq)
            self._dispatch(int(seq), task_id, kind, status, details)
        return None

    def _stale(self) -> bool:
        since = self._gap_since
        return since is not None and time.monotonic() - since >= self.gap_timeout

    def _dispatch(self, seq: int, task_id: str, kind: Any, status: Any, details: str) -> None:
        """Hand a row to the subscribers that select it (only then are `details` decoded),
        an announced creation's only to those not told of it (`Announced`)."""
        change: TaskChange | None = None
        told = kind == "queued" and self.announced.take(seq)
        for sub in list(self._subscribers):
            if told and takes_new_tasks(sub):
                continue
            if (sub.task_ids is None or task_id in sub.task_ids) and (
                sub.kinds is None or kind in sub.kinds
            ):
                if change is None:
                    change = TaskChange(task_id, kind, status, details_of(details))
                try:
                    sub.send.send_nowait((seq, change))
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    self._subscribers.discard(sub)


__all__ = ["BATCH", "PostgresChangeFeed"]
