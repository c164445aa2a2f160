"""The Redis store across instances and processes' worth of connections, on a real Redis.

The shared contract (`test_store_contract`, `test_store_leases`) runs against Redis
too; these tests cover what only a shared backend has: two store instances on one
Redis, key prefixes, applications sharing one prefix (their queues, `queued` wake-ups,
narrow lease reads), TTL expiry. Outages (unreachable, killed, black-holed Redis)
are `test_redis_outages`. Each test uses its own key prefix and deletes its keys
afterwards. Without a Redis at `REDIS_URL` they skip (fail when `CI=true`), like
the contract's Redis parameter.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
import redis.asyncio as aioredis

from fastmcp_tasks.errors import ConfigurationError
from fastmcp_tasks.stores import store_from_url
from fastmcp_tasks.stores.base import TaskChange, active_leases
from fastmcp_tasks.stores.redis import RedisTaskStore
from fastmcp_tasks.stores.redis.feed import BATCH
from tests.test_store_contract import REDIS_URL, record, redis_store

pytestmark = pytest.mark.anyio


@pytest.fixture
async def pair() -> AsyncIterator[tuple[RedisTaskStore, RedisTaskStore]]:
    """Two store instances (as two processes would have) on one Redis and prefix."""
    prefix = f"test-{uuid.uuid4().hex[:16]}"
    a, b = redis_store(prefix=prefix), redis_store(prefix=prefix)
    assert isinstance(a, RedisTaskStore) and isinstance(b, RedisTaskStore)
    await a.open()
    await b.open()
    try:
        yield a, b
    finally:
        await b.close()
        await a.close()


@pytest.fixture
async def raw() -> AsyncIterator[aioredis.Redis]:
    redis_store()  # skips (or fails under CI) when Redis is unreachable
    client = aioredis.Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        yield client
    finally:
        await client.aclose()


async def first_change(feed: AsyncIterator[TaskChange], kind: str) -> TaskChange:
    async for change in feed:
        if change.kind == kind:
            return change
    raise AssertionError(f"feed ended before a {kind!r} change")


async def test_two_instances_share_tasks_and_changes(
    pair: tuple[RedisTaskStore, RedisTaskStore],
) -> None:
    a, b = pair
    task = record()
    await a.create(task)
    seen = await b.get(task.task_id)
    assert seen is not None and seen.arguments == {"a": 1} and seen.created_at == task.created_at
    async with a.changes(frozenset({task.task_id})) as feed:
        started = time.monotonic()
        marked = await b.request_cancel(task.task_id)
        assert marked is not None and marked.cancel_requested
        with anyio.fail_after(2):
            change = await first_change(feed, "cancel_requested")
        assert change.task_id == task.task_id and change.status == "working"
        assert time.monotonic() - started < 2
        await b.transition(task.task_id, "cancelled")
        with anyio.fail_after(2):
            change = await first_change(feed, "status")
        assert change.status == "cancelled"
    done = await a.get(task.task_id)
    assert done is not None and done.status == "cancelled" and done.cancel_requested


async def test_every_change_after_subscribing_arrives_in_order(
    pair: tuple[RedisTaskStore, RedisTaskStore],
) -> None:
    a, b = pair
    task, other = record(), record()
    await a.create(task)
    await a.create(other)
    await b.set_status_message(task.task_id, "before")  # made before: not delivered
    async with a.changes(frozenset({task.task_id})) as feed:
        for step in range(50):
            await b.set_status_message(task.task_id, f"step {step}")
            await b.set_status_message(other.task_id, f"step {step}")  # filtered out
        got: list[TaskChange] = []
        with anyio.fail_after(5):
            async for change in feed:
                got.append(change)
                if len(got) == 50:
                    break
    assert {c.task_id for c in got} == {task.task_id}
    assert all(c.kind == "message" for c in got)
    current = await a.get(task.task_id)
    assert current is not None and current.status_message == "step 49"


async def test_terminal_states_hold_under_concurrent_transitions_from_two_instances(
    pair: tuple[RedisTaskStore, RedisTaskStore],
) -> None:
    a, b = pair
    tasks = [record() for _ in range(25)]
    for task in tasks:
        await a.create(task)
    winners: dict[str, list[str]] = {task.task_id: [] for task in tasks}

    async def attempt(store: RedisTaskStore, task_id: str, status: Any) -> None:
        if await store.transition(task_id, status, result={"n": 1}) is not None:
            winners[task_id].append(status)

    async with anyio.create_task_group() as group:
        for task in tasks:
            for store, status in ((a, "completed"), (b, "cancelled"), (b, "failed")) * 2:
                group.start_soon(attempt, store, task.task_id, status)
    for task in tasks:
        assert len(winners[task.task_id]) == 1
        final_a, final_b = await a.get(task.task_id), await b.get(task.task_id)
        assert final_a is not None and final_b is not None
        assert final_a.status == final_b.status == winners[task.task_id][0]
        assert await b.transition(task.task_id, "working") is None
        assert await a.request_input(task.task_id, {"k": {}}) is None


async def test_ttl_expiry_removes_the_keys(
    pair: tuple[RedisTaskStore, RedisTaskStore], raw: aioredis.Redis
) -> None:
    a, _ = pair
    # long enough that the checks before it expires pass on a loaded machine too
    brief, unpinned = record(retention_ms=2_000), record(retention_ms=2_000)
    await a.create(brief)
    await a.create(unpinned)
    await a.transition(brief.task_id, "completed", result={"content": []})
    await a.transition(unpinned.task_id, "completed", result={"content": []})
    key, pinned = a.keys.task(brief.task_id), a.keys.task(unpinned.task_id)
    assert 0 < await raw.pttl(key) <= 2_000
    assert await a.get(brief.task_id) is not None
    await raw.persist(pinned)  # Redis would keep it: `get` must still hide it once expired
    with anyio.fail_after(15):  # until Redis evicted the hash and the retention has passed
        while await raw.exists(key) or await a.get(unpinned.task_id) is not None:  # noqa: ASYNC110
            await anyio.sleep(0.02)
    assert await raw.exists(key) == 0  # Redis evicted the hash itself
    assert await raw.exists(pinned) == 1
    assert await a.get(brief.task_id) is None
    assert await a.get(unpinned.task_id) is None
    assert await raw.zcard(a.keys.terminal) == 2
    assert await a.purge_expired(time.time()) == 2
    assert await raw.zcard(a.keys.terminal) == 0
    assert await raw.exists(pinned) == 0  # the purge deletes what Redis kept


async def test_a_second_prefix_is_isolated(raw: aioredis.Redis) -> None:
    first, second = redis_store(), redis_store()
    assert isinstance(first, RedisTaskStore) and isinstance(second, RedisTaskStore)
    await first.open()
    await second.open()
    try:
        task = record()
        await first.create(task)
        assert await second.get(task.task_id) is None
        assert await second.active_tasks() == []
        assert await second.claim_queued("w", time.time() + 60, 10) == []
        assert await second.request_cancel(task.task_id) is None
        async with second.changes() as other_feed, first.changes() as own_feed:
            await first.request_cancel(task.task_id)
            with anyio.fail_after(2):
                await first_change(own_feed, "cancel_requested")
            with anyio.move_on_after(0.3) as idle:
                await first_change(other_feed, "cancel_requested")
            assert idle.cancelled_caught  # nothing crossed over
        await second.clear()
        assert await first.get(task.task_id) is not None
        keys = [key async for key in raw.scan_iter(match=f"*{first.keys.prefix}*")]
        assert keys and all(key.startswith(first.keys.base) for key in keys)
    finally:
        await second.close()
        await first.close()


async def test_claim_queued_from_two_instances_hands_each_task_to_one(
    pair: tuple[RedisTaskStore, RedisTaskStore],
) -> None:
    a, b = pair
    tasks = [record() for _ in range(40)]
    for task in tasks:
        await a.create(task)
    taken: dict[str, list[str]] = {"a": [], "b": []}

    async def drain(name: str, store: RedisTaskStore) -> None:
        while batch := await store.claim_queued(name, time.time() + 60, 3):
            taken[name].extend(r.task_id for r in batch)

    async with anyio.create_task_group() as group:
        for _ in range(3):
            group.start_soon(drain, "a", a)
            group.start_soon(drain, "b", b)
    assert not set(taken["a"]) & set(taken["b"])
    assert sorted(taken["a"] + taken["b"]) == sorted(t.task_id for t in tasks)
    assert len(taken["a"] + taken["b"]) == len(tasks)
    for name, store in (("a", a), ("b", b)):
        for task_id in taken[name]:
            got = await store.get(task_id)
            assert got is not None and got.lease_owner == name
            assert got.attempts == 1  # the ungated claim began its run, once (`stores.phases`)


async def test_close_ends_open_feeds(
    pair: tuple[RedisTaskStore, RedisTaskStore], raw: aioredis.Redis
) -> None:
    a, _ = pair
    following, ended = anyio.Event(), anyio.Event()
    name = f"fastmcp-tasks-feed:{a.keys.prefix}"

    async def follow() -> None:
        async with a.changes() as feed:
            following.set()  # no await before the loop's: close meets it inside `anext`
            async for _ in feed:
                pass
        ended.set()

    async with anyio.create_task_group() as group:
        group.start_soon(follow)
        with anyio.fail_after(5):  # the feed is open and its reader is in Redis
            await following.wait()
            while not [c for c in await raw.client_list() if c["name"] == name]:  # noqa: ASYNC110
                await anyio.sleep(0.01)
        assert not ended.is_set()
        await a.close()
        with anyio.fail_after(2):
            await ended.wait()


async def test_the_feed_stream_stays_bounded(raw: aioredis.Redis) -> None:
    store = redis_store(max_changes=50)
    assert isinstance(store, RedisTaskStore)
    await store.open()
    try:
        task = record()
        await store.create(task)
        for step in range(600):
            await store.set_status_message(task.task_id, str(step))
        assert await raw.xlen(store.keys.changes) < 300
    finally:
        await store.close()


async def test_apps_share_a_prefix_each_with_its_own_queue(
    pair: tuple[RedisTaskStore, RedisTaskStore], raw: aioredis.Redis
) -> None:
    a, b = pair
    keys = a.keys
    alpha, beta, plain, alpha2 = (
        record(app="alpha"),
        record(app="beta"),
        record(),
        record(app="alpha"),
    )
    for task in (alpha, beta, plain, alpha2):
        await a.create(task)
    got, untagged = await b.get(alpha.task_id), await b.get(plain.task_id)
    assert got is not None and got.app == "alpha" and untagged is not None and untagged.app is None
    assert await raw.zrange(keys.queued_for("alpha"), 0, -1) == [alpha.task_id, alpha2.task_id]
    assert await raw.zcard(keys.queued) == 4  # every application's (None: the old key)
    later = time.time() + 60
    taken = await b.claim_queued("w-alpha", later, 10, app="alpha")
    assert [r.task_id for r in taken] == [alpha.task_id, alpha2.task_id]
    assert all(r.app == "alpha" and r.lease_owner == "w-alpha" for r in taken)
    assert await b.claim_queued("w-gamma", later, 10, app="gamma") == []
    rest = await b.claim_queued("anyone", later, 10)  # app=None: any application's
    assert [r.task_id for r in rest] == [beta.task_id, plain.task_id]
    assert await b.claim_queued("w-beta", later, 10, app="beta") == []  # it left both sets
    assert await raw.zcard(keys.queued_for("beta")) == 0 and await raw.zcard(keys.queued) == 0
    for task in (alpha, alpha2):  # back in both sets; a claim or an end takes it out of both
        await a.requeue(task.task_id, "w-alpha")
    assert await raw.zcard(keys.queued_for("alpha")) == 2 and await raw.zcard(keys.queued) == 2
    await a.claim(alpha.task_id, "direct", later)
    await a.transition(alpha2.task_id, "cancelled")
    assert await raw.zcard(keys.queued_for("alpha")) == 0 and await raw.zcard(keys.queued) == 0


async def test_unleased_creates_and_requeues_announce_queued(
    pair: tuple[RedisTaskStore, RedisTaskStore],
) -> None:
    a, b = pair
    later = time.time() + 60
    held = record(app="alpha", lease_owner="front", lease_expires=later)
    alpha, plain = record(app="alpha"), record()
    async with a.changes(kinds=frozenset({"queued"})) as feed:
        await b.create(held)  # leased: nothing for a worker to take
        await b.create(alpha)
        await b.create(plain)
        await b.requeue(held.task_id, "front")
        await b.claim(plain.task_id, "w", later)  # claims are not announced
        await b.requeue(plain.task_id, "w")
        with anyio.fail_after(5):
            got = [await anext(feed) for _ in range(4)]
    assert [(c.task_id, c.kind, c.status, c.details) for c in got] == [
        (alpha.task_id, "queued", "working", {"app": "alpha"}),
        (plain.task_id, "queued", "working", {"app": None}),
        (held.task_id, "queued", "working", {"app": "alpha"}),
        (plain.task_id, "queued", "working", {"app": None}),
    ]


async def test_active_leases_read_lease_fields_only_in_one_round_trip_per_batch(
    pair: tuple[RedisTaskStore, RedisTaskStore],
) -> None:
    a, _ = pair
    later = time.time() + 60
    mine = record(app="alpha", owner="alice", context={"c": 1}, phase="running", attempts=1)
    parked, theirs, done = record(app="alpha"), record(app="beta"), record(app="alpha")
    for task in (mine, parked, theirs, done):
        await a.create(task)
    await a.claim(mine.task_id, "w1", later)
    await a.set_status_message(mine.task_id, "step 1")
    await a.request_input(parked.task_id, {"k": {"method": "elicitation/create"}})
    await a.transition(done.task_id, "completed", result={"content": []})
    sent = a.stats["round_trips"]
    leases = {r.task_id: r for r in await active_leases(a, "alpha")}
    assert a.stats["round_trips"] - sent == 2  # ZRANGE, then one pipeline of HMGETs
    assert set(leases) == {mine.task_id, parked.task_id}
    lease = leases[mine.task_id]
    assert (lease.tool, lease.status, lease.status_message, lease.attempts) == (
        "tool",
        "working",
        "step 1",
        1,
    )
    assert (lease.app, lease.lease_owner, lease.lease_expires) == ("alpha", "w1", later)
    assert lease.phase == "running" and leases[parked.task_id].phase is None
    assert lease.arguments is None and lease.context is None and lease.owner is None
    assert leases[parked.task_id].status == "input_required"
    assert leases[parked.task_id].input_requests is None and leases[parked.task_id].attempts == 0
    every = {r.task_id for r in await a.active_leases()}
    assert every == {mine.task_id, parked.task_id, theirs.task_id}
    for _ in range(BATCH):
        await a.create(record(app="bulk"))
    sent = a.stats["round_trips"]
    assert len(await a.active_leases(app="bulk")) == BATCH
    assert a.stats["round_trips"] - sent == 3  # 503 active tasks: two batches


def test_urls_and_prefixes() -> None:
    store = store_from_url("redis://127.0.0.1:6379/15?prefix=app.one", max_tasks=10)
    assert isinstance(store, RedisTaskStore)
    assert (store.scheme, store.durable, store.keys.prefix) == ("redis", True, "app.one")
    assert store.keys.task("t") == "{app.one}:task:t" and "prefix" not in store.url
    assert store.keys.queued_for(None) == store.keys.queued == "{app.one}:queued"
    assert store.keys.queued_for("billing {x}") == "{app.one}:queued:billing {x}"
    secure = store_from_url("rediss://:secret@cache.example:6380/2")
    assert isinstance(secure, RedisTaskStore) and secure.keys.prefix == "fastmcp-tasks"
    assert "secret" not in secure.where and "secret" not in repr(secure)
    for bad in ("redis://h/0?prefix=a%20b", "redis://h/0?prefix={x}", "redis://h/notadb"):
        with pytest.raises(ConfigurationError):
            store_from_url(bad)
    with pytest.raises(ConfigurationError, match="disagrees"):
        RedisTaskStore("redis://h/0?prefix=a", prefix="b")
