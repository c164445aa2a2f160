"""How `RedisTaskStore` is followed: its change feed, its wake stream, its queue wake-ups.

Three streams (`redis.keys`), each read on connections of their own:

- the whole feed, `{P}:changes`: every change (`redis.feed`), for subscriptions that
  want more than a runner;
- the wake stream, `{P}:changes:wake`: cancel requests and answers (`WAKE_KINDS`), the
  feed of a worker's runner, so that a worker does not read every change. A runner's
  subscription (its kinds include `NEW_TASKS_KIND`) may also ask for `queued`: it hears
  those only from writers older than the queue stream, which appended them here;
- the queue stream, `{P}:changes:queue`: every `queued` change, handed to one worker of
  each application (`redis.queue_wakes`, `stores.queue_wakes`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, TypeVar, cast

from fastmcp_tasks.stores.base import NEW_TASKS_KIND, TaskChange
from fastmcp_tasks.stores.redis.feed import RedisChangeFeed
from fastmcp_tasks.stores.redis.queue_wakes import RedisQueueWakes, queue_wakes
from fastmcp_tasks.stores.redis.scripts import WAKE_KINDS

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from fastmcp_tasks.stores.redis.keys import RedisKeys

T = TypeVar("T")


class RedisFeeds:
    """The feed methods of `RedisTaskStore` (`changes`, `queue_wakes`; module doc)."""

    if TYPE_CHECKING:
        keys: RedisKeys
        timeout: float
        block_ms: int
        stats: dict[str, int]

        def _require(self) -> aioredis.Redis: ...

        async def _guard(self, call: Awaitable[T]) -> T: ...

    def _start_feeds(self, feed_url: str) -> None:
        """Set up the readers of the whole feed and of the wake stream (not started)."""
        self._feed_url = feed_url
        self._feed, self._wake_feed = (
            RedisChangeFeed(
                stream=stream,
                feed_url=feed_url,
                connect_timeout=self.timeout,
                block_ms=self.block_ms,
                client_name=f"fastmcp-tasks-feed:{self.keys.prefix}",
                newest=newest,
                label=repr(self),
                read_margin=self.timeout,
                stats=self.stats,
            )
            for stream, newest in (
                (self.keys.changes, self._newest_change),
                (self.keys.wakes, self._newest_wake),
            )
        )

    async def _close_feeds(self) -> None:
        await self._feed.close()
        await self._wake_feed.close()

    def changes(
        self, task_ids: frozenset[str] | None = None, kinds: frozenset[str] | None = None
    ) -> AbstractAsyncContextManager[AsyncIterator[TaskChange]]:
        self._require()
        if kinds is not None:  # a runner's reads the wake stream (module doc)
            told = {NEW_TASKS_KIND, "queued"} if NEW_TASKS_KIND in kinds else set()
            if kinds - told <= WAKE_KINDS:
                return self._wake_feed.subscribe(task_ids, kinds)
        return self._feed.subscribe(task_ids, kinds)

    def queue_wakes(
        self, app: str | None, consumer: str
    ) -> AbstractAsyncContextManager[RedisQueueWakes]:
        """Each `queued` change of `app` to one consumer (`stores.queue_wakes`)."""
        self._require()
        return queue_wakes(
            url=self._feed_url,
            stream=self.keys.queue,
            app=app,
            consumer=consumer,
            connect_timeout=self.timeout,
            block_ms=self.block_ms,
            client_name=f"fastmcp-tasks-queue:{self.keys.prefix}",
            label=repr(self),
            stats=self.stats,
        )

    async def _newest_change(self, stream: str | None = None) -> list[Any]:
        client = self._require()
        newest = await self._guard(client.xrevrange(stream or self.keys.changes, count=1))
        return cast("list[Any]", newest)

    async def _newest_wake(self) -> list[Any]:
        return await self._newest_change(self.keys.wakes)


__all__ = ["RedisFeeds"]
