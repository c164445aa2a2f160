"""The Redis store through outages: unreachable, gone, killed and restarted, black-holed.

An outage is a `StoreError` within the store's `timeout` for every call (the engine
retries), never a hang; once Redis is back the same store object serves again
without reopening, and a change-feed subscription delivers every change exactly
once. Also what an idle store costs (`stats["round_trips"]`).

The restart test runs a private `redis-server` (`tests.private_servers.PrivateRedis`)
that it SIGKILLs and restarts from its append-only file; the other tests use the
shared Redis at `REDIS_URL` (skipped without one, failed under `CI=true`), through
a proxy (`tests.private_servers.blackhole_proxy`) where they need to cut it off.
"""

from __future__ import annotations

import hashlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import anyio.abc
import pytest
import redis.asyncio as aioredis

from fastmcp_tasks.errors import StoreError
from fastmcp_tasks.stores.redis import RedisTaskStore
from fastmcp_tasks.stores.redis.scripts import SCRIPTS
from tests.private_servers import PrivateRedis, answers_within_one_bound, blackhole_proxy
from tests.test_redis_store import pair, raw
from tests.test_store_contract import REDIS_URL, record, redis_store
from tests.wire import free_port

pytestmark = pytest.mark.anyio

__all__ = ["pair", "raw"]  # fixtures shared with test_redis_store rather than copied

FEED_FAILED = "change feed read failed"


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[PrivateRedis]:
    private = PrivateRedis(tmp_path)
    private.start()
    try:
        await private.ready()
        yield private
    finally:
        private.stop()  # by pid; nothing if the test left it killed


def feed_failures(caplog: pytest.LogCaptureFixture) -> int:
    return sum(FEED_FAILED in r.getMessage() for r in caplog.records)


async def fails_in_time(store: RedisTaskStore, call: Callable[[], Awaitable[Any]]) -> None:
    """`call()` raises an "unreachable" `StoreError` within the store's `timeout`."""
    started = time.monotonic()
    with pytest.raises(StoreError, match="unreachable"):
        await call()
    assert time.monotonic() - started < store.timeout + 0.5


async def test_the_same_store_serves_again_after_redis_is_killed_and_restarted(
    server: PrivateRedis, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="fastmcp_tasks.stores.redis")
    store = RedisTaskStore(server.url, prefix="restart", timeout=1)
    await store.open()
    raw_client = aioredis.Redis.from_url(server.url, decode_responses=True)
    try:
        queued = record(app="x")
        await store.create(queued)
        async with store.changes() as feed:  # opened before the kill, kept throughout
            server.kill()
            await fails_in_time(store, lambda: store.get(queued.task_id))
            await fails_in_time(store, lambda: store.create(record()))
            with pytest.raises(StoreError):
                async with store.changes():
                    pass
            server.start()  # same port and directory: the AOF brings the data back
            await server.ready()  # answers PING: its AOF is loaded
            create_sha = hashlib.sha1(SCRIPTS["create"].encode()).hexdigest()
            assert await raw_client.script_exists(create_sha) == [False]
            back = await store.get(queued.task_id)  # never reopened
            assert back is not None and back.app == "x"
            fresh = record()
            await store.create(fresh)  # NOSCRIPT: redis-py loads the script and calls again
            assert await raw_client.script_exists(create_sha) == [True]
            claimed = await store.claim(fresh.task_id, "w", time.time() + 60)
            assert claimed is not None and claimed.lease_owner == "w"
            (taken,) = await store.claim_queued("w", time.time() + 60, 5, app="x")
            assert taken.task_id == queued.task_id
            await store.request_cancel(fresh.task_id)
            await store.set_status_message(fresh.task_id, "after the restart")
            with anyio.fail_after(10):
                seen = [await anext(feed) for _ in range(3)]
            assert [(c.task_id, c.kind) for c in seen] == [
                (fresh.task_id, "queued"),
                (fresh.task_id, "cancel_requested"),
                (fresh.task_id, "message"),
            ]  # once each, in order: nothing lost, nothing read twice
        assert feed_failures(caplog) == 1  # one warning for the outage, not one per retry
    finally:
        await raw_client.aclose()
        await store.close()


async def test_a_black_hole_fails_calls_in_time_and_the_feed_catches_up(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Connections held open, no bytes: calls time out, the feed reconnects when it ends.

    `block_ms=200` (not the default 10 s) so that the feed's read deadline, the block
    plus `timeout`, passes within the test.
    """
    direct = redis_store()  # straight to Redis; its close deletes the prefix's keys
    assert isinstance(direct, RedisTaskStore)
    await direct.open()
    target = urlsplit(REDIS_URL)
    try:
        host, port = target.hostname or "127.0.0.1", target.port or 6379
        async with blackhole_proxy(port, target_host=host) as hole:
            url = f"redis://127.0.0.1:{hole.port}{target.path}"
            store = RedisTaskStore(url, prefix=direct.keys.prefix, timeout=1, block_ms=200)
            await store.open()
            try:
                task = record()
                await store.create(task)
                async with store.changes(frozenset({task.task_id})) as feed:
                    hole.black_hole()
                    await fails_in_time(store, lambda: store.get(task.task_id))  # pooled
                    await fails_in_time(store, lambda: store.get(task.task_id))  # a new one
                    await fails_in_time(store, lambda: store.claim_queued("w", time.time(), 5))
                    await direct.set_status_message(task.task_id, "in the black hole")
                    with anyio.fail_after(5):  # the feed's read passes its deadline
                        while not feed_failures(caplog):  # noqa: ASYNC110 - a log line
                            await anyio.sleep(0.02)
                    hole.resume()
                    with anyio.fail_after(10):
                        first = await anext(feed)
                    await direct.request_cancel(task.task_id)
                    with anyio.fail_after(10):
                        second = await anext(feed)
                    assert (first.kind, second.kind) == ("message", "cancel_requested")
                    got = await store.get(task.task_id)
                    assert got is not None and got.cancel_requested
            finally:
                await store.close()
    finally:
        await direct.close()


async def test_a_black_holed_redis_answers_each_request_within_one_store_timeout() -> None:
    """One request, one bound: a `tools/call` whose create times out does not wait another
    `store_timeout` for the read-back of a task that may have been created after all."""
    direct = redis_store()  # its close deletes the prefix's keys
    assert isinstance(direct, RedisTaskStore)
    await direct.open()
    target = urlsplit(REDIS_URL)
    try:
        host, port = target.hostname or "127.0.0.1", target.port or 6379
        async with blackhole_proxy(port, target_host=host) as hole:
            url = f"redis://127.0.0.1:{hole.port}{target.path}?prefix={direct.keys.prefix}"
            await answers_within_one_bound(url, hole)
    finally:
        await direct.close()


async def test_an_idle_subscribed_store_costs_one_read_per_block(raw: aioredis.Redis) -> None:
    """The default `block_ms` (10 s): about 0.1 round trips a second, counted by `stats`."""
    store = redis_store()
    assert isinstance(store, RedisTaskStore) and store.block_ms == 10_000
    await store.open()
    try:
        async with store.changes():
            subscribed = store.stats["round_trips"]
            with anyio.fail_after(2):  # the reader's first XREAD
                while store.stats["round_trips"] == subscribed:  # noqa: ASYNC110 - a counter
                    await anyio.sleep(0.01)
            idle = store.stats["round_trips"]
            until = time.monotonic() + 2
            while time.monotonic() < until:  # a 2 s window, checked as it goes
                assert store.stats["round_trips"] - idle <= 2
                await anyio.sleep(0.1)
            assert store.stats["round_trips"] - idle <= 2
            name = f"fastmcp-tasks-feed:{store.keys.prefix}"
            (reader,) = [c for c in await raw.client_list() if c["name"] == name]
            assert reader["cmd"] == "xread"  # blocked in its read, not spinning
    finally:
        await store.close()


async def test_the_feed_reconnects_without_losing_changes(
    pair: tuple[RedisTaskStore, RedisTaskStore], raw: aioredis.Redis
) -> None:
    a, b = pair
    task = record()
    await a.create(task)
    name = f"fastmcp-tasks-feed:{a.keys.prefix}"
    async with a.changes(frozenset({task.task_id})) as feed:
        with anyio.fail_after(5):  # the reader is connected (Redis is what tells)
            while not (readers := [c for c in await raw.client_list() if c["name"] == name]):  # noqa: ASYNC110
                await anyio.sleep(0.01)
        assert len(readers) == 1
        await raw.client_kill_filter(_id=readers[0]["id"])
        await b.set_status_message(task.task_id, "while the reader was down")
        await b.request_cancel(task.task_id)
        with anyio.fail_after(5):
            kinds = [(await anext(feed)).kind, (await anext(feed)).kind]
    assert kinds == ["message", "cancel_requested"]


async def test_an_unreachable_redis_is_a_store_error_without_the_password() -> None:
    port = free_port()
    store = RedisTaskStore(f"redis://:hunter2@127.0.0.1:{port}/0", timeout=1)
    started = time.monotonic()
    with pytest.raises(StoreError, match=rf"127\.0\.0\.1:{port}.*unreachable") as info:
        await store.open()
    assert time.monotonic() - started < 3
    assert "hunter2" not in str(info.value) and "hunter2" not in repr(store)
    with pytest.raises(StoreError, match="not open"):
        await store.get("x")
    await store.close()


async def test_redis_going_away_fails_operations_without_half_created_tasks(
    raw: aioredis.Redis,
) -> None:
    """Through a TCP proxy that is then shut: every operation is a `StoreError`."""
    target = raw.connection_pool.connection_kwargs
    links: list[anyio.abc.SocketStream] = []

    async def pipe(source: anyio.abc.SocketStream, sink: anyio.abc.SocketStream) -> None:
        try:
            async for chunk in source:
                await sink.send(chunk)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass
        finally:
            await sink.aclose()

    async def serve(client: anyio.abc.SocketStream) -> None:
        upstream = await anyio.connect_tcp(target["host"], target["port"])
        links.extend((client, upstream))
        async with anyio.create_task_group() as group:
            group.start_soon(pipe, client, upstream)
            group.start_soon(pipe, upstream, client)

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    prefix = f"test-{uuid.uuid4().hex[:16]}"
    store = RedisTaskStore(f"redis://127.0.0.1:{port}/{target['db']}", prefix=prefix, timeout=1)
    before, after = record(), record()
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(listener.serve, serve)
            await store.open()
            await store.create(before)
            assert await store.get(before.task_id) is not None
            group.cancel_scope.cancel()
        await listener.aclose()  # the proxy is gone: Redis is unreachable from here on
        for link in links:
            await link.aclose()
        calls = (
            lambda: store.create(after),
            lambda: store.get(before.task_id),
            store.active_tasks,
            lambda: store.active_leases(app="x"),
            lambda: store.claim_queued("w", time.time() + 60, 5),
        )
        for call in calls:
            with pytest.raises(StoreError, match="unreachable"):
                await call()
        with pytest.raises(StoreError, match="unreachable"):
            async with store.changes():
                pass
        assert store._feed._reader is None  # the failed subscription started no reader
        assert await raw.exists(store.keys.task(after.task_id)) == 0
        assert await raw.zscore(store.keys.active, after.task_id) is None
    finally:
        await store.close()
        if leftovers := [key async for key in raw.scan_iter(match=store.keys.pattern)]:
            await raw.delete(*leftovers)
