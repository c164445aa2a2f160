"""The Redis store (`redis://host:port/db`, `rediss://`): tasks shared by every process.

This module owns `RedisTaskStore`: its connections, the calls of the Lua scripts
(`redis.scripts`), error mapping and the round-trip counter. The key space and the
layout of a task hash are `redis.keys`; several stores share one Redis by giving
each its own `prefix`, and applications sharing one store are told apart by
`TaskRecord.app` (each has its own queue). Leases and the queue are
`redis.leases`, listing `redis.listing`, creation and flow control (gates, retry
waits, dedupe, tombstones: `stores.flow`) `redis.flow`, the operator records
(histories, workers, pauses, audit: `stores.operations`) `redis.operations`, the
durable steps (`stores.steps`) `redis.steps`, status changes (`transition`, `settle`)
`redis.transitions`; the change feed, the wake stream a
worker's runner reads instead, and the queue wake-ups shared out to workers are
`redis.feeds`.

Connections. `open()` creates a blocking connection pool for commands and checks
that Redis answers. Every call is bounded as a whole by `timeout` (pool wait,
connecting, reply: an `asyncio.timeout`, not redis-py's `socket_timeout`, which
costs a task per send and can swallow a cancellation on Python 3.11, see
`redis.feed`), so an unreachable, restarting or black-holed Redis (connections held
open, no bytes) is a `StoreError` within that bound, never a hung request. redis-py
does not retry: a script whose reply was lost may already have run, and running it
twice is not always harmless (`create`, `retry_later`); the engine retries. The
store is never reopened: the pool replaces a dead connection when it hands it out,
so once Redis is back (restarted on the same address, say) the next call works; a
`NOSCRIPT` (empty script cache) makes redis-py's `AsyncScript` load the script and
call it again. The change feed reads on its own connection (`redis.feed`).

Cost. `stats["round_trips"]` (a plain dict entry, cheap enough to leave on) counts
round trips: one per command, pipeline or script call (a `NOSCRIPT` re-load counts
once), one per change-feed read. Scripts and `get` made while another of them is on its
way go together as the next pipeline, one round trip (`redis.batching`). An idle store
with subscribers costs one `XREAD` per `block_ms`; without, nothing.

Atomicity. Every read-modify-write is one Lua script (registered once per `open`),
which also keeps the indexes consistent and appends to the change feed.

Expiry. A finished task gets a Redis TTL of its `retention_ms`; `get` also checks
`terminal_at + retention_ms` on the client, so a task is never returned once
expired even before Redis evicts it. `purge_expired` (and `create` at the cap)
removes the index entries of expired tasks. Its tombstone is written, pre-dated,
when it ends, and its dedupe key, history and steps expire with it (`redis.flow`,
`redis.operations`). A finished task keeps its arguments; its input state and
context are dropped.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable
from typing import Any, TypeVar, cast

import redis.asyncio as aioredis
from redis.asyncio.connection import parse_url
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from fastmcp_tasks.errors import ConfigurationError, StoreError
from fastmcp_tasks.stores.base import (
    TaskRecord,
    storable_text,
)
from fastmcp_tasks.stores.flow import DEFAULT_TOMBSTONE_RETENTION
from fastmcp_tasks.stores.redis.batching import RedisCalls
from fastmcp_tasks.stores.redis.feed import BATCH
from fastmcp_tasks.stores.redis.feeds import RedisFeeds
from fastmcp_tasks.stores.redis.flow import RedisFlow
from fastmcp_tasks.stores.redis.keys import (
    REQUEST_FIELD,
    decode_task,
    dumps,
    pairs,
    parse_store_url,
)
from fastmcp_tasks.stores.redis.leases import RedisLeases
from fastmcp_tasks.stores.redis.listing import RedisListing
from fastmcp_tasks.stores.redis.operations import RedisOperations
from fastmcp_tasks.stores.redis.packing import hiredis_packing
from fastmcp_tasks.stores.redis.scripts import SCRIPTS
from fastmcp_tasks.stores.redis.steps import RedisSteps
from fastmcp_tasks.stores.redis.transitions import RedisTransitions
from fastmcp_tasks.stores.urls import masked

T = TypeVar("T")


DEFAULT_MAX_TASKS = 100_000


class RedisTaskStore(
    RedisFeeds,
    RedisFlow,
    RedisLeases,
    RedisListing,
    RedisOperations,
    RedisSteps,
    RedisTransitions,
):
    """A `TaskStore` in Redis, shared by every process that uses the same URL and prefix.

    Args:
        url: `redis://[user:password@]host:port/db` or `rediss://...` (TLS); the query
            may carry `prefix=...` and redis-py connection options.
        prefix: sets this store's keys apart on a shared Redis (default
            `fastmcp-tasks`); also accepted as the URL query `?prefix=...`.
        max_tasks: most tasks retained at once, as in `MemoryTaskStore`; `None`: no cap.
        timeout: seconds any one call may take (connecting included) before it fails
            with `StoreError`; also how long past `block_ms` the feed waits for a read.
        max_connections: size of the command connection pool.
        max_changes: about how many change-feed entries the stream keeps.
        block_ms: longest single `XREAD BLOCK` of the change-feed reader.
        tombstone_retention: seconds a removed task's tombstone is kept (`stores.flow`;
            `redis.flow`); `None` keeps none.

    Raises:
        ConfigurationError: a malformed URL, prefix or option.
    """

    scheme = "redis"
    durable = True

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        prefix: str | None = None,
        max_tasks: int | None = DEFAULT_MAX_TASKS,
        timeout: float = 5.0,
        max_connections: int = 64,
        max_changes: int = 100_000,
        block_ms: int = 10_000,
        tombstone_retention: float | None = DEFAULT_TOMBSTONE_RETENTION,
    ) -> None:
        if max_tasks is not None and max_tasks < 1:
            raise ConfigurationError(f"max_tasks must be at least 1, got {max_tasks}")
        if timeout <= 0 or max_connections < 1 or max_changes < 1 or block_ms < 1:
            raise ConfigurationError(
                "Redis task store needs timeout > 0, max_connections >= 1, max_changes >= 1 "
                "and block_ms >= 1"
            )
        if tombstone_retention is not None and tombstone_retention < 0:
            raise ConfigurationError(
                f"tombstone_retention must not be negative, got {tombstone_retention}"
            )
        self.url, feed_url, self.keys = parse_store_url(url, prefix)
        try:
            parse_url(self.url)  # redis-py's own checks (port, query options)
        except ValueError as exc:
            raise ConfigurationError(f"Redis task store URL {masked(url)!r}: {exc}") from exc
        self.where = f"{masked(self.url, query=False)} (prefix {self.keys.prefix!r})"
        self.max_tasks = max_tasks
        self.timeout = timeout
        self.max_connections = max_connections
        self.max_changes = max_changes
        self.block_ms = block_ms
        self.tombstone_retention = tombstone_retention
        self._client: aioredis.Redis | None = None
        self._scripts: dict[str, AsyncScript] = {}
        self._calls: RedisCalls | None = None
        #: Counters for benchmarks: `round_trips` sent to Redis (module doc).
        self.stats: dict[str, int] = {"round_trips": 0}
        self._start_feeds(feed_url)

    # --- lifecycle ----------------------------------------------------------------

    async def open(self) -> None:
        """Create the connection pool, register the scripts and check that Redis answers.

        Raises:
            StoreError: Redis is unreachable or refuses the connection (nothing is kept open).
        """
        if self._client is not None:
            return
        pool = aioredis.BlockingConnectionPool.from_url(
            self.url,
            decode_responses=True,
            socket_connect_timeout=self.timeout,
            socket_timeout=None,  # `_guard` bounds every call (module doc)
            max_connections=self.max_connections,
            timeout=self.timeout,
            retry=Retry(NoBackoff(), 0),
            client_name=f"fastmcp-tasks:{self.keys.prefix}",
        )
        client = aioredis.Redis(connection_pool=hiredis_packing(pool))
        try:
            await self._guard(client.ping())
        except BaseException:
            await pool.disconnect()
            raise
        self._scripts = {name: client.register_script(text) for name, text in SCRIPTS.items()}
        self._calls = RedisCalls(client, self.timeout, self.stats)
        self._client = client

    async def close(self) -> None:
        """End every subscription, stop the feed reader and close the pool. Idempotent."""
        await self._close_feeds()
        calls, self._calls = self._calls, None
        if calls is not None:
            await calls.close()
        client, self._client = self._client, None
        if client is not None:
            await client.connection_pool.disconnect()

    async def clear(self) -> int:
        """Delete every key under this store's prefix (tests, decommissioning); how many."""
        client = self._require()
        removed = 0
        async for batch in self._scan():
            removed += await self._guard(client.unlink(*batch))
        return removed

    async def _scan(self) -> AsyncIterator[list[str]]:
        client = self._require()
        cursor = 0
        while True:
            reply = await self._guard(client.scan(cursor, match=self.keys.pattern, count=BATCH))
            cursor, keys = cast("tuple[int, list[str]]", reply)  # decode_responses=True: str
            if keys:
                yield keys
            if cursor == 0:
                return

    # --- calling Redis --------------------------------------------------------------

    def _require(self) -> aioredis.Redis:
        if self._client is None:
            raise StoreError(f"Redis task store {self.where} is not open")
        return self._client

    def _batched(self) -> RedisCalls:
        if self._calls is None:
            raise StoreError(f"Redis task store {self.where} is not open")
        return self._calls

    async def _guard(self, call: Awaitable[T], *, count: bool = True) -> T:
        """Await one round trip to Redis, bounded by `timeout`; failures as `StoreError`.
        `count`: add it to `stats` (a batched call is counted by its batch)."""
        if count:
            self.stats["round_trips"] += 1
        try:
            async with asyncio.timeout(self.timeout):
                return await call
        except TimeoutError as exc:  # the whole call: pool wait, connect and reply
            raise StoreError(
                f"Redis task store {self.where} is unreachable: no reply within {self.timeout} s"
            ) from exc
        except (RedisConnectionError, RedisTimeoutError) as exc:
            raise StoreError(f"Redis task store {self.where} is unreachable: {exc}") from exc
        except RedisError as exc:
            raise StoreError(f"Redis task store {self.where}: {exc}") from exc

    async def _script(self, name: str, keys: list[str], args: list[Any]) -> Any:
        """Call a script; made while another is on its way, it goes with the next batch
        (`redis.batching`)."""
        call = self._batched().script(self._scripts[name], keys, args)
        return await self._guard(call, count=False)

    async def _task_script(self, name: str, task_id: str, *args: Any) -> Any:
        keys = [self.keys.task(task_id), *self.keys.indexes()]
        return await self._script(name, keys, [task_id, repr(time.time()), self.max_changes, *args])

    async def _record(self, name: str, task_id: str, *args: Any) -> TaskRecord | None:
        flat = await self._task_script(name, task_id, *args)
        return None if not flat else decode_task(task_id, pairs(flat))

    # --- reads and creation -------------------------------------------------------

    async def get(self, task_id: str) -> TaskRecord | None:
        call = self._batched().command("HGETALL", self.keys.task(task_id))
        fields = await self._guard(call, count=False)
        return self._live(task_id, cast("dict[str, str]", fields))

    async def peek(self, task_id: str) -> TaskRecord | None:
        """`get` without `arguments` and `context` (`stores.peeking`)."""
        flat = await self._script("peek", [self.keys.task(task_id)], [])
        return self._live(task_id, pairs(flat)) if flat else None

    def _live(self, task_id: str, fields: dict[str, str]) -> TaskRecord | None:
        if not fields or "status" not in fields:
            return None
        record = decode_task(task_id, fields)
        expires_at = record.expires_at
        return None if expires_at is not None and expires_at <= time.time() else record

    # --- changes ------------------------------------------------------------------

    async def set_status_message(self, task_id: str, message: str | None) -> TaskRecord | None:
        mode = "clear" if message is None else "set"
        text = storable_text(message) or ""
        return await self._record("set_status_message", task_id, mode, text, "0")

    async def settle_message(self, task_id: str, message: str | None) -> bool:
        """`set_status_message`, reading no record back (`stores.settling`)."""
        mode, text = "clear" if message is None else "set", storable_text(message) or ""
        return bool(await self._task_script("set_status_message", task_id, mode, text, "1"))

    async def request_input(
        self, task_id: str, requests: dict[str, Any], *, status_message: str | None = None
    ) -> TaskRecord | None:
        pairs = [x for k, v in requests.items() for x in (REQUEST_FIELD + k, dumps(v))]
        mode = "clear" if status_message is None else "set"
        details = dumps({"keys": list(requests)})
        return await self._record(
            "request_input", task_id, mode, storable_text(status_message) or "", details, *pairs
        )

    async def answer_input(self, task_id: str, responses: dict[str, Any]) -> dict[str, Any] | None:
        pairs = [x for k, v in responses.items() for x in (k, dumps(v))]
        accepted = await self._task_script("answer_input", task_id, *pairs)
        return None if accepted is None else {key: responses[key] for key in accepted}

    async def take_answers(self, task_id: str, keys: frozenset[str]) -> dict[str, Any]:
        if not keys:
            return {}
        flat = await self._script("take_answers", [self.keys.task(task_id)], sorted(keys))
        return {key: json.loads(value) for key, value in pairs(flat).items()}

    async def withdraw_input(self, task_id: str, keys: frozenset[str]) -> TaskRecord | None:
        withdrawn = sorted(keys)
        details = dumps({"withdrawn": withdrawn})
        return await self._record("withdraw_input", task_id, details, *withdrawn)

    async def request_cancel(self, task_id: str) -> TaskRecord | None:
        flat = await self._task_script("request_cancel", task_id)
        return None if not flat else self._live(task_id, pairs(flat))

    # --- retention ----------------------------------------------------------------

    async def purge_expired(self, now: float) -> int:
        removed = 0
        while True:
            args = [self.keys.task_base, repr(float(now)), BATCH]
            batch: int = await self._script("purge", [self.keys.terminal], args)
            removed += batch
            if batch < BATCH:
                return removed

    def describe(self) -> str:
        """The masked URL and the key prefix (`stores.urls.describe`)."""
        return self.where

    def __repr__(self) -> str:
        return f"RedisTaskStore({self.where})"


__all__ = ["RedisTaskStore"]
