"""The Redis store's queue wake-ups: each `queued` change to one worker of its application.

The scripts append every `queued` change to `{P}:changes:queue` (`redis.keys`) as well
as to the whole feed, and no longer to the wake stream, which a worker reads for the
cancel requests and answers of its own tasks. Each application's workers form one
consumer group of that stream (`group_name`): `XREADGROUP ... NOACK` hands every entry
to exactly one consumer of every group, so a new task wakes one worker of each
application instead of all of them (`stores.queue_wakes`, the capability this
implements). `NOACK` keeps no pending entries: a wake-up delivered to a worker that
dies is lost, and the queue loop's poll or another worker's next claim finds the task,
as when the feed is trimmed.

One wake-up per claim on its way, not per task. A `queued` change that waits for no time
(no `not_before`) goes to the queue stream only when it can set its application's pending
mark (`{P}:changes:queue:pending:a:<app>`, `...:pending:*` for tasks without one; `SET NX`
for `WAKE_PENDING_MS`): while a wake-up is out and its claim has not run, the tasks queued
meanwhile wait for that claim, which takes every claimable task up to the worker's free
slots. Every claim of the application (`claim_lua`) clears the mark, so the next new task
wakes a worker again; a claim that filled its limit while more wait sets the mark and
wakes another worker itself, and so does `hand_on` for a worker that read wake-ups it
could not act on (it filled up, or began to stop, before its claim round). A burst then
costs one wake-up, one read and one claim round per batch window rather than one per
task, and wakes one worker of an idle pool rather than each in turn. A mark outlives its
claim only when the worker holding its wake-up died (or was stopped before its next claim
round), or runs an older claim script that does not clear it (a rolling upgrade): the
tasks queued meanwhile then start with the next wake-up after the mark lapses, or on a
worker's queue poll.

A group is created at the stream's end (`$`, with `MKSTREAM`) by its first consumer:
tasks queued before then are found by the worker's first claim, not by wake-ups.
Entries that arrive while every consumer of a group is busy wait in the stream (up to
the store's `max_changes`) and go to whichever consumer reads next. Every read runs on
a connection of its own, bounded by the block plus the store's `timeout` like the
feed reader's (`redis.feed`); a failure is a `StoreError`, and the engine enters the
context again on a new connection, which also creates the group again after a Redis
restart lost it. A consumer leaves its group when its context ends; one whose process
died is removed by the next consumer to join once idle for `STALE_CONSUMER_MS`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import cast

import anyio
import redis.asyncio as aioredis
from redis.exceptions import RedisError, ResponseError

from fastmcp_tasks.errors import StoreError
from fastmcp_tasks.stores.base import TaskChange
from fastmcp_tasks.stores.redis.feed import BATCH, blocking_connection, entry_change

#: How long a wake-up's pending mark lasts, ms, unless the claim it asks for clears it
#: first (module doc): past the longest batch window (`engine.watcher`), so a mark outlives
#: only a worker that died holding its wake-up, or one that runs an older claim script.
#: (One that filled up or began to stop hands its wake-ups on: `hand_on`.)
WAKE_PENDING_MS = 250

#: A consumer idle this long (no read at all: a live one reads every block) is gone.
STALE_CONSUMER_MS = 24 * 3600 * 1000


def group_name(app: str | None) -> str:
    """The consumer group of an application's workers (`*`: tasks without an app)."""
    return "*" if app is None else f"app:{app}"


class RedisQueueWakes:
    """One consumer of an application's group, on its own connection (module doc).

    Args:
        conn: a single-connection client (`decode_responses=True`) this object owns.
        stream: the queue stream key.
        group: `group_name(app)`.
        consumer: this process's name in the group.
        block_ms: longest single `XREADGROUP BLOCK`.
        read_timeout: seconds a read may take in all (the block plus a margin).
        label: how errors name the store.
        stats: the store's counters; each read adds to `"round_trips"`.
    """

    def __init__(
        self,
        conn: aioredis.Redis,
        *,
        stream: str,
        group: str,
        consumer: str,
        block_ms: int,
        read_timeout: float,
        label: str,
        stats: dict[str, int],
    ) -> None:
        self.conn = conn
        self.stream = stream
        self.group = group
        self.consumer = consumer
        self.block_ms = block_ms
        self.read_timeout = read_timeout
        self.label = label
        self.stats = stats

    async def join(self) -> None:
        """Create the group at the stream's end unless it exists; drop stale consumers."""
        try:
            await self.conn.xgroup_create(self.stream, self.group, id="$", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        await self.conn.xgroup_createconsumer(self.stream, self.group, self.consumer)
        for info in await self.conn.xinfo_consumers(self.stream, self.group):
            if info.get("name") != self.consumer and int(info.get("idle", 0)) > STALE_CONSUMER_MS:
                await self.conn.xgroup_delconsumer(self.stream, self.group, info["name"])

    async def next(self, count: int) -> list[TaskChange]:
        """Up to `count` (at most `BATCH`) wake-ups no other consumer of the group got."""
        self.stats["round_trips"] += 1
        try:
            async with asyncio.timeout(self.read_timeout):
                reply = await self.conn.xreadgroup(
                    self.group,
                    self.consumer,
                    {self.stream: ">"},
                    count=max(1, min(count, BATCH)),
                    block=self.block_ms,
                    noack=True,
                )
        except TimeoutError as exc:
            raise StoreError(
                f"{self.label}: no queue wake-up read within {self.read_timeout:g} s"
            ) from exc
        except RedisError as exc:
            raise StoreError(f"{self.label}: queue wake-up read failed: {exc}") from exc
        batches = cast("list[tuple[str, list[tuple[str, dict[str, str]]]]]", reply or [])
        changes = [entry_change(fields) for _stream, entries in batches for _id, fields in entries]
        return [change for change in changes if change is not None and change.kind == "queued"]


@asynccontextmanager
async def queue_wakes(
    *,
    url: str,
    stream: str,
    app: str | None,
    consumer: str,
    connect_timeout: float,
    block_ms: int,
    client_name: str,
    label: str,
    stats: dict[str, int],
) -> AsyncIterator[RedisQueueWakes]:
    """Join `app`'s group of `stream` as `consumer` for the context (module doc).

    Raises:
        StoreError: Redis failed while joining.
    """
    pool, conn = blocking_connection(url, connect_timeout, client_name)  # reads bounded in `next`
    wakes = RedisQueueWakes(
        conn,
        stream=stream,
        group=group_name(app),
        consumer=consumer,
        block_ms=block_ms,
        read_timeout=block_ms / 1000 + connect_timeout,
        label=label,
        stats=stats,
    )
    try:
        try:
            async with asyncio.timeout(connect_timeout * 3):
                await wakes.join()
        except (TimeoutError, RedisError) as exc:
            raise StoreError(f"{label}: could not join the queue wake-ups: {exc!r}") from exc
        yield wakes
    finally:
        with anyio.CancelScope(shield=True):  # leave the group even when cancelled
            with anyio.move_on_after(connect_timeout):
                try:
                    await conn.xgroup_delconsumer(stream, wakes.group, consumer)
                except RedisError:
                    pass  # removed as stale by a later consumer
            await conn.aclose()
            await pool.disconnect()


__all__ = ["STALE_CONSUMER_MS", "WAKE_PENDING_MS", "RedisQueueWakes", "group_name", "queue_wakes"]
