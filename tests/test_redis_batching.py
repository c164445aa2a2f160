"""The Redis store's batched calls (`stores.redis.batching`), against real Redis servers.

Concurrent calls of one store object share round trips (counted by
`stats["round_trips"]`), a `NOSCRIPT` inside a batch is answered as it is outside one,
and a Redis that dies under a batch fails each of its calls within the store's
`timeout`, after which the same store serves again. What each call answers is the
store contract's (`ConcurrencyContract`); the NOSCRIPT and outage tests run a private
`redis-server` (`tests.private_servers.PrivateRedis`), never the shared one.
"""

from __future__ import annotations

import functools
import gc
import time
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.lowlevel
import pytest
import redis.asyncio as aioredis

from fastmcp_tasks.errors import DuplicateTask, StoreError
from fastmcp_tasks.stores.base import TaskRecord
from fastmcp_tasks.stores.redis import RedisTaskStore
from fastmcp_tasks.testing import make_record
from tests.private_servers import PrivateRedis
from tests.test_call_batching import settle
from tests.test_redis_outages import server
from tests.test_store_contract import REDIS_URL, redis_store

pytestmark = pytest.mark.anyio

__all__ = ["server"]  # the private redis-server fixture of test_redis_outages, not copied


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@asynccontextmanager
async def on_private(
    server: PrivateRedis, prefix: str, store_timeout: float
) -> AsyncIterator[tuple[RedisTaskStore, aioredis.Redis]]:
    """An opened store on the private server (its `timeout` `store_timeout`), and a plain
    client of it; both closed after."""
    store = RedisTaskStore(server.url, prefix=prefix, timeout=store_timeout)
    await store.open()
    raw = aioredis.Redis.from_url(server.url, decode_responses=True)
    try:
        yield store, raw
    finally:
        await raw.aclose()
        await store.close()


async def gather_gets(store: RedisTaskStore, ids: list[str]) -> dict[str, TaskRecord | None]:
    found: dict[str, TaskRecord | None] = {}

    async def get(task_id: str) -> None:
        found[task_id] = await store.get(task_id)

    async with anyio.create_task_group() as group:
        for task_id in ids:
            group.start_soon(get, task_id)
    return found


async def test_concurrent_calls_share_round_trips_and_idle_ones_do_not_wait() -> None:
    store = redis_store()
    assert isinstance(store, RedisTaskStore)
    await store.open()
    try:
        with anyio.fail_after(10):
            tasks = [make_record(arguments={"n": n}) for n in range(40)]
            for task in tasks:  # one at a time: one round trip each
                before = store.stats["round_trips"]
                await store.create(task)
                assert store.stats["round_trips"] == before + 1
            before = store.stats["round_trips"]
            found = await gather_gets(store, [t.task_id for t in tasks])
            assert store.stats["round_trips"] - before == 1  # made in one turn: one batch
            assert all(found[t.task_id].arguments == t.arguments for t in tasks)  # type: ignore[union-attr]
            before = store.stats["round_trips"]

            async def finish(task: TaskRecord) -> None:
                assert await store.transition(task.task_id, "completed", result={}) is not None

            async with anyio.create_task_group() as group:
                for task in tasks:
                    group.start_soon(finish, task)
            assert store.stats["round_trips"] - before <= 3
    finally:
        await store.close()


@pytest.mark.parametrize("made", ["in a batch", "alone"])
async def test_a_script_redis_lost_is_loaded_again(server: PrivateRedis, made: str) -> None:
    """A `NOSCRIPT` (Redis restarted without its script cache) is answered by loading the
    script: inside a batch, each call it failed is made again alone; a call made alone,
    sent directly on the own connection, is made again through redis-py's script object,
    which loads it once."""
    async with on_private(server, f"noscript-{made[0]}", 2) as (store, raw):
        with anyio.fail_after(15):
            first = make_record()
            await store.create(first)  # the create script is in Redis's cache
            await raw.script_flush()  # as after a restart without the cache
            tasks = [make_record(arguments={"n": n}) for n in range(10)]
            errors = (await raw.info("errorstats")).get("errorstat_NOSCRIPT", {"count": 0})
            if made == "alone":
                for task in tasks:
                    await store.create(task)
            else:
                async with anyio.create_task_group() as group:
                    for task in tasks:
                        group.start_soon(store.create, task)
            after = await raw.info("errorstats")
            noscript = after["errorstat_NOSCRIPT"]["count"] - errors["count"]
            if made == "alone":  # the first met it twice (sent directly, then redis-py's
                assert noscript == 2  # own try before it loads the script); the rest, none
            else:
                assert noscript >= len(tasks)  # each create of the batch met it (then alone)
            found = await gather_gets(store, [t.task_id for t in tasks])
            assert all(found[t.task_id] is not None for t in tasks)


async def test_a_redis_that_dies_under_a_batch_fails_each_call_in_time(
    server: PrivateRedis,
) -> None:
    store = RedisTaskStore(server.url, prefix="batch-outage", timeout=1)
    await store.open()
    try:
        with anyio.fail_after(20):
            task = make_record()
            await store.create(task)
            server.kill()
            failures: list[StoreError] = []

            async def get() -> None:
                try:
                    await store.get(task.task_id)
                except StoreError as exc:
                    failures.append(exc)

            started = time.monotonic()
            async with anyio.create_task_group() as group:
                for _ in range(12):
                    group.start_soon(get)
            assert len(failures) == 12 and all("unreachable" in str(e) for e in failures)
            assert time.monotonic() - started < store.timeout + 2  # a loaded machine: slack
            server.start()
            await server.ready()
            found = await gather_gets(store, [task.task_id] * 8)  # the same store, batched
            assert found[task.task_id] is not None
    finally:
        await store.close()


async def test_a_call_that_cannot_be_encoded_fails_alone_and_the_rest_apply_once() -> None:
    store = redis_store()
    assert isinstance(store, RedisTaskStore)
    await store.open()
    outcomes: dict[str, Any] = {}

    call = functools.partial(settle, outcomes)

    try:
        with anyio.fail_after(10):
            first, second = make_record(), make_record()
            await store.create(first)
            await store.create(second)
            async with anyio.create_task_group() as group:
                group.start_soon(
                    call, "first", lambda: store.transition(first.task_id, "completed")
                )
                group.start_soon(call, "bad", lambda: store.get("lone\ud800surrogate"))
                group.start_soon(call, "second", lambda: store.transition(second.task_id, "failed"))
            assert isinstance(outcomes["bad"], UnicodeEncodeError)  # as the call alone raises
            assert outcomes["first"] is not None and outcomes["first"].status == "completed"
            assert outcomes["second"] is not None and outcomes["second"].status == "failed"
    finally:
        await store.close()


async def test_a_reply_that_cannot_be_decoded_never_makes_a_batch_run_twice() -> None:
    """Bytes that are not UTF-8 in a task's hash fail the batch that read them after it
    ran: its writes are not made again (a create answered alone would then find its own
    task and report a duplicate)."""
    store = redis_store()
    assert isinstance(store, RedisTaskStore)
    await store.open()
    raw = aioredis.Redis.from_url(REDIS_URL)
    outcomes: dict[str, Any] = {}

    call = functools.partial(settle, outcomes)

    try:
        with anyio.fail_after(10):
            await raw.hset(store.keys.task("garbled"), mapping={"status": b"\xff\xfe"})
            good = make_record()
            async with anyio.create_task_group() as group:
                group.start_soon(call, "create", lambda: store.create(good))
                group.start_soon(call, "garbled", lambda: store.get("garbled"))
            assert not isinstance(outcomes["create"], DuplicateTask), outcomes
            assert await store.get(good.task_id) is not None
    finally:
        await raw.delete(store.keys.task("garbled"))
        await raw.aclose()
        await store.close()


async def test_calls_made_alone_go_on_the_own_connection_that_redis_may_close(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One after another, calls take no connection from the store's pool: they go on the
    store's own; one Redis closed under it is made again by the next call, which answers."""
    store = RedisTaskStore(REDIS_URL, prefix=f"own-{time.time_ns()}")
    await store.open()
    raw = aioredis.Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        with anyio.fail_after(10):
            task = make_record(arguments={"who": "me"})
            await store.create(task)
            calls = store._batched()
            held = calls._own.connection
            taken: list[object] = []
            pool = store._require().connection_pool
            taking = pool.get_connection

            async def counted(*args: Any, **kwargs: Any) -> Any:
                taken.append(args)
                return await taking(*args, **kwargs)

            monkeypatch.setattr(pool, "get_connection", counted)
            for _ in range(20):
                assert await store.get(task.task_id) is not None
            assert taken == [] and held is not None and calls._own.connection is held
            name = f"fastmcp-tasks:{store.keys.prefix}"
            for client in await raw.client_list():
                if client.get("name") == name:
                    await raw.client_kill_filter(_id=client["id"])
            found = await store.get(task.task_id)
            assert found is not None and found.arguments == {"who": "me"}
    finally:
        await store.clear()
        await raw.aclose()
        await store.close()


async def test_a_pool_of_one_still_serves_batches_beside_the_own_connection(
    server: PrivateRedis,
) -> None:
    """The own connection is not one of `max_connections`: with a pool of one, a batch,
    a scan and calls made alone all answer."""
    store = RedisTaskStore(server.url, prefix="own-pool-of-one", timeout=1, max_connections=1)
    await store.open()
    try:
        with anyio.fail_after(15):
            tasks = [make_record(arguments={"n": n}) for n in range(6)]
            for task in tasks:
                await store.create(task)  # alone: the own connection is taken
            found: dict[str, TaskRecord | None] = {}

            async def get(task_id: str) -> None:
                found[task_id] = await store.get(task_id)

            async with anyio.create_task_group() as group:
                group.start_soon(get, tasks[0].task_id)
                await anyio.lowlevel.checkpoint()  # its turn passes: it goes alone, on the
                await anyio.lowlevel.checkpoint()  # own connection, and the others queue
                for task in tasks[1:]:  # behind it: a batch through the pool of one
                    group.start_soon(get, task.task_id)
            assert all(found[t.task_id] is not None for t in tasks)
            assert await store.clear() >= len(tasks)  # SCAN and UNLINK through the pool
    finally:
        await store.close()


@pytest.mark.parametrize("read", ["get", "peek"])  # redis-py's command, a direct script
async def test_a_call_abandoned_mid_reply_leaves_no_reply_for_the_next(
    server: PrivateRedis, read: str
) -> None:
    """A call past the store's timeout gives its connection up: the next call on it never
    reads the abandoned call's late reply as its own (the tool comes from the reply)."""
    async with on_private(server, f"batch-abandoned-{read}", 0.5) as (store, raw):
        reading = getattr(store, read)
        with anyio.fail_after(15):
            first = make_record(tool="first")
            second = make_record(tool="second")
            await store.create(first)
            await store.create(second)
            await raw.client_pause(1500, all=True)  # every client's command waits
            with pytest.raises(StoreError, match="unreachable"):
                await reading(first.task_id)
            deadline = time.monotonic() + 5
            while True:
                try:
                    found = await reading(second.task_id)
                    break
                except StoreError:  # still paused
                    assert time.monotonic() < deadline
            assert found is not None and found.tool == "second"


async def test_closing_under_a_call_made_alone_fails_it_as_a_store_error(
    server: PrivateRedis,
) -> None:
    outcome: list[BaseException | object] = []
    async with on_private(server, "own-closed", 3) as (store, raw):
        with anyio.fail_after(15):
            task = make_record()
            await store.create(task)
            await raw.client_pause(1000, all=True)

            async def get() -> None:
                try:
                    outcome.append(await store.get(task.task_id))
                except BaseException as exc:
                    outcome.append(exc)

            calls = store._batched()
            async with anyio.create_task_group() as group:
                group.start_soon(get)
                while not calls._own_busy:  # noqa: ASYNC110 - the call offers no event
                    await anyio.sleep(0.01)
                await store.close()  # (sent or not yet: either way a connection error)
    assert len(outcome) == 1 and isinstance(outcome[0], StoreError), outcome


async def test_a_closed_store_leaves_no_client_for_the_collector_to_warn_of() -> None:
    """A call made alone holds the store's own connection; `close` lets it go, so no
    redis-py client is found unclosed when the store is collected (it printed "Unclosed
    Redis client" and warned, once per store, in every process that closed one)."""
    store = redis_store()
    assert isinstance(store, RedisTaskStore)
    await store.open()
    with anyio.fail_after(10):
        task = make_record()
        await store.create(task)  # alone: on the own connection
        assert await store.get(task.task_id) is not None
        own = store._batched()._own
        assert own.connection is not None  # held, as between calls
        await store.close()
    assert own.connection is None
    del store, own
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)], caught
