"""Listing and purging for the Redis store (`ListableTaskStore`), mixed into `RedisTaskStore`.

What it costs follows from the indexes of `redis.keys`:

- active tasks are listed from `{P}:active` (scored by creation time), walked
  downwards from the page key: a page reads about its size plus what the filters skip;
- finished tasks are indexed by expiry, not creation, so listing them reads the
  creation time of every finished task (`ZSCAN` plus pipelined `HMGET`s of a few
  fields, `BATCH` at a time), keeping only the best `limit` in memory; purging
  walks the same index and hands each batch of ids to the `purge_finished`
  script, which re-checks every task and deletes the hash with its index entry
  and dedupe key, leaving a `purged` tombstone (`redis.flow`).

Neither runs a long script: Redis keeps serving the tasks while an operator lists.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import AsyncIterator, Awaitable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from fastmcp_tasks.stores.base import TaskRecord
from fastmcp_tasks.stores.listing import PageKey, check_listing, page_key, selected
from fastmcp_tasks.stores.redis.feed import BATCH
from fastmcp_tasks.wire.names import ACTIVE_STATUSES, TERMINAL_STATUSES

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from fastmcp_tasks.stores.redis.keys import RedisKeys

T = TypeVar("T")

_SUMMARY = ("created_at", "status", "owner")


class RedisListing:
    """The `ListableTaskStore` methods of `RedisTaskStore`."""

    if TYPE_CHECKING:
        keys: RedisKeys

        def _require(self) -> aioredis.Redis: ...

        async def _guard(self, call: Awaitable[T]) -> T: ...

        async def _script(self, name: str, keys: list[str], args: list[Any]) -> Any: ...

        def _live(self, task_id: str, fields: dict[str, str]) -> TaskRecord | None: ...

        def _tomb_ms(self) -> str: ...

        def _tomb(self, task_id: str) -> str: ...

    async def list_tasks(
        self,
        *,
        status: frozenset[str] | None = None,
        owner: str | None = None,
        limit: int = 100,
        before: PageKey | None = None,
    ) -> list[TaskRecord]:
        statuses = check_listing(status, limit)
        now = time.time()
        found: dict[str, TaskRecord] = {}
        if statuses & ACTIVE_STATUSES:
            for record in await self._list_active(statuses, owner, limit, before, now):
                found[record.task_id] = record
        if statuses & TERMINAL_STATUSES:
            for record in await self._list_finished(statuses, owner, limit, before, now):
                found[record.task_id] = record
        return heapq.nlargest(limit, found.values(), key=page_key)

    async def purge_finished(self, before: float, *, dry_run: bool = False) -> int:
        removed = 0
        seen: set[str] = set()  # ZSCAN may return an id twice; a dry run must not count it twice
        async for batch in self._scan_finished():
            ids = [task_id for task_id, _ in batch if task_id not in seen]
            if dry_run:
                seen.update(ids)
            if ids:
                dry, now = "1" if dry_run else "0", repr(time.time())
                args = [self.keys.task_base, repr(float(before)), dry, now, self._tomb_ms()]
                args += [x for task_id in ids for x in (task_id, self._tomb(task_id))]
                removed += await self._script("purge_finished", [self.keys.terminal], args)
        return removed

    async def _list_active(
        self,
        statuses: frozenset[str],
        owner: str | None,
        limit: int,
        before: PageKey | None,
        now: float,
    ) -> list[TaskRecord]:
        client = self._require()
        top = "+inf" if before is None else repr(float(before[0]))
        records: list[TaskRecord] = []
        offset = 0
        while len(records) < limit:
            ids = cast(  # decode_responses=True: str members
                "list[str]",
                await self._guard(
                    client.zrevrangebyscore(self.keys.active, top, "-inf", start=offset, num=BATCH)
                ),
            )
            offset += len(ids)
            for record in await self._load(ids):
                if selected(record, statuses, owner, before, now) and len(records) < limit:
                    records.append(record)
            if len(ids) < BATCH:
                break
        return records

    async def _list_finished(
        self,
        statuses: frozenset[str],
        owner: str | None,
        limit: int,
        before: PageKey | None,
        now: float,
    ) -> list[TaskRecord]:
        client = self._require()
        best: list[PageKey] = []  # a min-heap of the `limit` newest keys seen so far
        async for batch in self._scan_finished():
            live = [task_id for task_id, expires_at in batch if expires_at > now]
            async with client.pipeline(transaction=False) as pipe:
                for task_id in live:
                    pipe.hmget(self.keys.task(task_id), _SUMMARY)
                replies = await self._guard(pipe.execute())
            for task_id, (created, state, holder) in zip(live, replies, strict=True):
                if created is None or state not in statuses:
                    continue
                if owner is not None and holder != owner:
                    continue
                key = (float(created), task_id)
                if before is not None and key >= before:
                    continue
                if len(best) < limit:
                    heapq.heappush(best, key)
                elif key > best[0]:
                    heapq.heapreplace(best, key)
        records = await self._load([task_id for _, task_id in best])
        return [r for r in records if selected(r, statuses, owner, before, now)]

    async def _scan_finished(self) -> AsyncIterator[list[tuple[str, float]]]:
        """`(task id, expiry score)` batches of the finished-task index (`ZSCAN`)."""
        client = self._require()
        cursor = 0
        while True:
            cursor, batch = cast(
                "tuple[int, list[tuple[str, float]]]",
                await self._guard(client.zscan(self.keys.terminal, cursor, count=BATCH)),
            )
            if batch:
                yield batch
            if cursor == 0:
                return

    async def get_many(self, task_ids: list[str]) -> dict[str, TaskRecord]:
        """The live tasks among `task_ids`, by id: one pipeline (see `base.get_many`)."""
        found = {}
        for start in range(0, len(task_ids), BATCH):
            for record in await self._load(task_ids[start : start + BATCH]):
                found[record.task_id] = record
        return found

    async def _load(self, ids: list[str]) -> list[TaskRecord]:
        """The live tasks among `ids`, in order (one pipelined `HGETALL` each)."""
        if not ids:
            return []
        client = self._require()
        async with client.pipeline(transaction=False) as pipe:
            for task_id in ids:
                pipe.hgetall(self.keys.task(task_id))
            replies = await self._guard(pipe.execute())
        loaded = (self._live(task_id, fields) for task_id, fields in zip(ids, replies, strict=True))
        return [record for record in loaded if record is not None]


__all__ = ["RedisListing"]
