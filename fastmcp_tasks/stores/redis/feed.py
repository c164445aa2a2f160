"""The Redis store's change feed: one Redis Stream, read once per process, fanned out.

Every change is an entry of the store's stream (appended by the same Lua script
that makes the change, see `redis.scripts`), trimmed to about `max_changes`
entries. `RedisChangeFeed` runs at most one reader per store instance, and only
while it has subscribers: it reads with `XREAD BLOCK` on a dedicated connection
past the newest entry at the time of the first subscription and hands entries
to in-process subscribers. Every subscriber resolves the newest id when it
subscribes and sees exactly the entries after it. A reader that falls more than
`max_changes` entries behind misses the trimmed ones.

Every read is bounded by `block_ms` plus `read_margin` (the store's `timeout`),
connecting included: `XREAD BLOCK` answers by the end of its block at the latest,
so a reply later than that by more than the bound any other command gets means the
connection is dead or black-holed (held open, no bytes, which TCP keepalive takes
hours to notice). A shorter bound would abort healthy blocking reads; none (the old
behaviour) hung the reader forever. The bound is an `asyncio.timeout` around each
read, not redis-py's `socket_timeout`: with one, redis-py sends through
`asyncio.wait_for`, which on Python 3.11 can swallow the cancellation that stops
the reader (python/cpython#86296), leaving it reading forever. TCP keepalive stays
on for peers that vanish between reads.

A failed read (reset, timeout, Redis restarting) is logged once per outage and
retried with backoff on a new connection, from the id of the last entry
dispatched: an entry is dispatched once, when its read succeeds, so none is lost
or delivered twice while it is still in the stream (a Redis restarted from its
append-only file keeps the stream and its ids).

Each `XREAD` adds one to `stats["round_trips"]` (the store's counter): an idle
store with subscribers costs one round trip per `block_ms`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, cast

import anyio
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from fastmcp_tasks.stores.base import TaskChange
from fastmcp_tasks.stores.redis.packing import hiredis_packing
from fastmcp_tasks.stores.subscriptions import Subscriber, SubscriberFeed

StreamId = tuple[int, int]

logger = logging.getLogger("fastmcp_tasks.stores.redis")

BATCH = 500


def entry_change(fields: dict[str, str]) -> TaskChange | None:
    """The change a stream entry holds (fields `t`, `k`, `s`, `d`); `None` when malformed."""
    try:
        status: Any = fields.get("s") or None
        details = json.loads(fields.get("d", "{}"))
        return TaskChange(fields["t"], fields["k"], status, details)  # type: ignore[arg-type]
    except (KeyError, ValueError):
        return None


def blocking_connection(
    url: str, connect_timeout: float, client_name: str
) -> tuple[aioredis.ConnectionPool, aioredis.Redis]:
    """A client of one dedicated connection for blocking stream reads, and its pool: no
    socket timeout (each read is bounded as a whole, module doc), keepalive on, no retry.
    Close both: `await conn.aclose()`, then `await pool.disconnect()`."""
    pool = aioredis.ConnectionPool.from_url(
        url,
        decode_responses=True,
        socket_connect_timeout=connect_timeout,
        socket_timeout=None,
        socket_keepalive=True,
        retry=Retry(NoBackoff(), 0),
        client_name=client_name,
    )
    hiredis_packing(pool)
    return pool, aioredis.Redis(connection_pool=pool, single_connection_client=True)


def stream_id(text: str) -> StreamId:
    """A stream entry id `ms-seq` as a comparable pair."""
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


class RedisChangeFeed:
    """Subscriptions to one store's change stream, served by a single shared reader.

    Args:
        stream: the stream key.
        feed_url: the URL the reader connects with (its own connection).
        connect_timeout: seconds to connect the reader.
        block_ms: longest single `XREAD BLOCK`.
        client_name: the reader connection's `CLIENT SETNAME`.
        newest: reads the newest entry of the stream through the command pool
            (`XREVRANGE stream + - COUNT 1`), raising `StoreError` when Redis fails.
        label: how log lines name the store.
        read_margin: seconds a blocking read may take beyond `block_ms` before the
            connection counts as dead (module doc).
        stats: the store's counters; the reader adds to `"round_trips"`.
    """

    def __init__(
        self,
        *,
        stream: str,
        feed_url: str,
        connect_timeout: float,
        block_ms: int,
        client_name: str,
        newest: Callable[[], Awaitable[list[Any]]],
        label: str,
        read_margin: float,
        stats: dict[str, int],
    ) -> None:
        self.stream = stream
        self.feed_url = feed_url
        self.connect_timeout = connect_timeout
        self.block_ms = block_ms
        self.client_name = client_name
        self._newest = newest
        self.label = label
        self.read_timeout = block_ms / 1000 + read_margin
        self.stats = stats
        self._subscribers: set[Subscriber[StreamId]] = set()
        self._subscribe_lock = anyio.Lock()
        self._reader: asyncio.Task[None] | None = None
        self._cursor = "0-0"

    @asynccontextmanager
    async def subscribe(
        self, task_ids: frozenset[str] | None, kinds: frozenset[str] | None
    ) -> AsyncIterator[AsyncIterator[TaskChange]]:
        """The changes of these kinds to these tasks made after this call (default: all).

        Raises:
            StoreError: Redis did not tell the newest entry (the reader is not started
                for this subscription; nothing is left behind).
        """
        send, receive = anyio.create_memory_object_stream[tuple[StreamId, TaskChange]](math.inf)
        sub: Subscriber[StreamId] = Subscriber(task_ids, kinds, send, (0, 0))
        try:
            async with self._subscribe_lock:
                self._subscribers.add(sub)  # first: the reader queues what comes next
                newest = await self._newest()
                sub.start = stream_id(newest[0][0]) if newest else (0, 0)
                if self._reader is None:
                    self._cursor = f"{sub.start[0]}-{sub.start[1]}"
                    self._reader = asyncio.get_running_loop().create_task(self._read())
            async with receive:
                yield SubscriberFeed(receive, sub)
        finally:
            send.close()
            receive.close()
            self._subscribers.discard(sub)
            if not self._subscribers:
                with anyio.CancelScope(shield=True):
                    await self._stop_reader()

    async def close(self) -> None:
        """End every subscription and stop the reader. Idempotent."""
        for sub in self._subscribers:
            sub.send.close()
        self._subscribers.clear()
        await self._stop_reader()

    async def _stop_reader(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)

    async def _read(self) -> None:
        """The reader: `XREAD BLOCK` on a dedicated connection, fanned out to subscribers."""
        pool, conn = blocking_connection(self.feed_url, self.connect_timeout, self.client_name)
        delay = 0.0
        try:
            while True:
                self.stats["round_trips"] += 1
                try:
                    async with asyncio.timeout(self.read_timeout):  # above the block (module doc)
                        reply = await conn.xread(
                            {self.stream: self._cursor}, count=BATCH, block=self.block_ms
                        )
                except Exception as exc:  # keep reading: subscribers wait, nothing is lost
                    if not delay:
                        why = (
                            f"no reply within {self.read_timeout:g} s"
                            if isinstance(exc, TimeoutError)
                            else exc
                        )
                        logger.warning("%s: change feed read failed, retrying: %s", self.label, why)
                    delay = min(max(delay * 2, 0.05), 2.0)
                    await asyncio.sleep(delay)
                    continue
                if delay:
                    logger.info("%s: change feed reads again", self.label)
                    delay = 0.0
                # decode_responses=True: [[stream, [(entry id, {field: value}), ...]], ...]
                batches = cast("list[tuple[str, list[tuple[str, dict[str, str]]]]]", reply)
                for _stream, entries in batches or []:
                    for entry_id, fields in entries:
                        self._cursor = entry_id
                        self._dispatch(stream_id(entry_id), fields)
        finally:
            with anyio.CancelScope(shield=True):
                await conn.aclose()  # closes its single connection; then the pool
                await pool.disconnect()

    def _dispatch(self, entry_id: StreamId, fields: dict[str, str]) -> None:
        change = entry_change(fields)
        if change is None:
            logger.warning("%s: skipping malformed change feed entry %s", self.label, entry_id)
            return
        for sub in list(self._subscribers):
            if (sub.task_ids is None or change.task_id in sub.task_ids) and (
                sub.kinds is None or change.kind in sub.kinds
            ):
                try:
                    sub.send.send_nowait((entry_id, change))
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    self._subscribers.discard(sub)
