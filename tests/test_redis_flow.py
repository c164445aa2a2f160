"""Flow control on the Redis store where only a shared backend can get it wrong.

The flow contract (`test_store_flow`) runs on Redis too; these tests cover what it
cannot: two store instances (two connections, as two processes) racing dedupe
creates and gated claims, retry waits across instances, tombstones of hashes Redis
evicts itself, the key space left behind once tasks end (no dedupe, gate or turn
keys beyond their TTLs), and a seeded differential run of the gate bookkeeping
against the in-memory store (the reference semantics of `stores.flow.plan_claims`).
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
import redis.asyncio as aioredis

from fastmcp_tasks import MemoryTaskStore
from fastmcp_tasks.stores.base import TaskRecord
from fastmcp_tasks.stores.flow import gates_of, tombstone_key
from fastmcp_tasks.stores.phases import start_message
from fastmcp_tasks.stores.redis import RedisTaskStore
from fastmcp_tasks.stores.redis.queue_wakes import WAKE_PENDING_MS
from tests.test_redis_store import pair, raw
from tests.test_store_contract import record, redis_store

pytestmark = pytest.mark.anyio

__all__ = ["pair", "raw"]  # fixtures shared with test_redis_store rather than copied

Pair = tuple[RedisTaskStore, RedisTaskStore]


@pytest.fixture
async def store() -> AsyncIterator[RedisTaskStore]:
    instance = redis_store()
    assert isinstance(instance, RedisTaskStore)
    await instance.open()
    try:
        yield instance
    finally:
        await instance.close()


def _state(r: TaskRecord) -> tuple[object, ...]:
    """What the differential run compares (timestamps are each store's own clock)."""
    return (r.status, r.lease_owner, r.not_before, r.retries, r.attempts, r.status_message)


async def keys_of(raw: aioredis.Redis, store: RedisTaskStore) -> dict[str, int]:
    """Every key under the store's prefix, with its TTL in ms (-1: none)."""
    return {key: await raw.pttl(key) async for key in raw.scan_iter(match=store.keys.pattern)}


async def test_the_record_round_trips_with_flow_fields_absent_when_unset(
    store: RedisTaskStore, raw: aioredis.Redis
) -> None:
    soon = time.time() + 1e-6
    full = record(gate="g\x1fk", gate_limit=3, not_before=soon, retries=2, dedupe_key="d" * 64)
    plain = record()
    await store.create(full)
    await store.create(plain)
    assert await store.get(full.task_id) == full
    assert await store.get(plain.task_id) == plain
    fields = set(await raw.hkeys(store.keys.task(plain.task_id)))
    assert not fields & {"gate", "gate_limit", "not_before", "retries", "dedupe_key"}


async def test_racing_dedupe_creates_from_two_instances_make_one_task(pair: Pair) -> None:
    a, b = pair
    for round_ in range(5):
        records = [record(dedupe_key=f"same-{round_}") for _ in range(20)]
        answers: list[str | None] = []

        async def create(store: RedisTaskStore, task: TaskRecord, out: list[str | None]) -> None:
            found = await store.create(task, dedupe_window=60)
            out.append(None if found is None else found.task_id)

        async with anyio.create_task_group() as group:
            for index, task in enumerate(records):
                group.start_soon(create, (a, b)[index % 2], task, answers)
        made = [r.task_id for r in records if await b.get(r.task_id) is not None]
        assert len(made) == 1 and answers.count(None) == 1
        assert {x for x in answers if x is not None} == set(made)
        assert len(await a.active_tasks()) == round_ + 1


async def test_two_instances_never_exceed_a_gate_limit(pair: Pair, raw: aioredis.Redis) -> None:
    a, b = pair
    limit = 3
    tasks = [record(gate="deploy", gate_limit=limit, owner=f"o{i % 4}") for i in range(40)]
    for task in tasks:
        await a.create(task)
    ids = [t.task_id for t in tasks]
    done: list[str] = []
    peak = 0

    async def leased_now() -> int:
        async with raw.pipeline(transaction=True) as pipe:  # one atomic snapshot
            for task_id in ids:
                pipe.hmget(a.keys.task(task_id), ["status", "lease_owner"])
            rows = await pipe.execute()
        return sum(1 for status, holder in rows if holder and status == "working")

    async def work(name: str, store: RedisTaskStore) -> None:
        nonlocal peak
        while len(done) < len(tasks):
            taken = await store.claim_queued(name, time.time() + 60, 2)
            peak = max(peak, await leased_now())
            assert peak <= limit
            for got in taken:
                await anyio.sleep(0.002)
                await store.transition(got.task_id, "completed", result={})
                done.append(got.task_id)
            if not taken:
                await anyio.sleep(0.001)

    with anyio.fail_after(20):
        async with anyio.create_task_group() as group:
            for index in range(3):
                group.start_soon(work, f"a{index}", a)
                group.start_soon(work, f"b{index}", b)
    assert sorted(done) == sorted(ids) and peak == limit
    assert await raw.exists(f"{a.keys.base}gate-run:deploy", f"{a.keys.base}gate:deploy") == 0


async def test_a_delayed_retry_is_claimable_once_due_from_another_instance(pair: Pair) -> None:
    a, b = pair
    gated, other = record(gate="g", gate_limit=1), record(gate="g", gate_limit=1)
    for task in (gated, other):
        await a.create(task)
    (first,) = await a.claim_queued("w1", time.time() + 60, 5)
    assert first.task_id == gated.task_id
    due = time.time() + 0.3
    back = await a.retry_later(gated.task_id, "w1", due, "Retrying soon")
    assert back is not None and back.not_before == due and back.retries == 1
    (next_,) = await b.claim_queued("w2", time.time() + 60, 5)  # the slot it gave back
    assert next_.task_id == other.task_id
    assert await b.claim_queued("w2", time.time() + 60, 5) == []
    await b.transition(other.task_id, "completed", result={})
    assert await b.claim_queued("w2", time.time() + 60, 5) == []  # not due yet
    await anyio.sleep(max(0.0, due - time.time()) + 0.01)
    (again,) = await b.claim_queued("w2", time.time() + 60, 5)
    assert again.task_id == gated.task_id and again.not_before is None
    assert (again.retries, again.attempts, again.lease_owner) == (1, 0, "w2")
    assert again.phase == "retry"  # until the engine's `start_run` begins its run


async def test_gate_limits_hold_across_applications(store: RedisTaskStore) -> None:
    alpha, beta = record(gate="g", app="alpha"), record(gate="g", app="beta")
    for task in (alpha, beta):
        await store.create(task)
    later = time.time() + 60
    assert await store.claim_queued("w", later, 5, app="gamma") == []
    assert [r.task_id for r in await store.claim_queued("w", later, 5, app="beta")] == [
        beta.task_id
    ]
    assert await store.claim_queued("w", later, 5, app="alpha") == []  # the gate is full
    await store.transition(beta.task_id, "failed", error={"code": 1, "message": "x"})
    assert [r.task_id for r in await store.claim_queued("w", later, 5)] == [alpha.task_id]


async def test_native_expiry_leaves_a_dated_tombstone_seen_by_every_instance(
    pair: Pair, raw: aioredis.Redis
) -> None:
    a, b = pair
    task = record(retention_ms=200, owner="alice", dedupe_key="k")
    await a.create(task, dedupe_window=60)
    assert await raw.pttl(a.keys.dedupe("k")) == -1  # active: kept while the task is
    ended = await a.transition(task.task_id, "completed", result={})
    assert ended is not None and ended.expires_at is not None
    assert 0 < await raw.pttl(a.keys.dedupe("k")) <= 200
    assert await b.tombstone(task.task_id) is None  # still retained
    with anyio.fail_after(5):
        while await raw.exists(a.keys.task(task.task_id)):  # noqa: ASYNC110
            await anyio.sleep(0.02)
    stone = await b.tombstone(task.task_id)
    assert stone is not None and (stone.owner, stone.reason) == ("alice", "expired")
    assert stone.at == ended.expires_at
    tomb = a.keys.tomb(tombstone_key(task.task_id))
    assert 0 < await raw.pttl(tomb) <= 24 * 3600 * 1000 + 200
    assert await raw.exists(a.keys.dedupe("k")) == 0
    keeps_none = redis_store(prefix=a.keys.prefix, tombstone_retention=None)
    assert isinstance(keeps_none, RedisTaskStore)
    assert await keeps_none.tombstone(task.task_id) is None


async def test_ended_and_purged_tasks_leave_no_flow_keys(
    store: RedisTaskStore, raw: aioredis.Redis
) -> None:
    later = time.time() + 60
    tasks = [
        record(gate=f"g{i % 3}", gate_limit=2, owner=f"o{i % 2}", app=("x", None)[i % 2])
        for i in range(12)
    ]
    tasks += [record(dedupe_key=f"d{i}", retention_ms=(None, 60_000)[i % 2]) for i in range(4)]
    tasks += [record(gate="g0", dedupe_key="dg", retention_ms=None, owner="o0")]
    for task in tasks:
        await store.create(task, dedupe_window=60)
    taken = await store.claim_queued("w", later, 100)
    await store.retry_later(taken[0].task_id, "w", time.time() + 3600, "later")
    await store.requeue(taken[1].task_id, "w")
    cancelled = 0
    for task in tasks:  # end everything: leased or waiting, delayed or not
        await store.transition(task.task_id, ("completed", "cancelled")[cancelled % 2])
        cancelled += 1
    assert await store.purge_finished(time.time() + 1) == len(tasks)
    await store.purge_expired(time.time() + 1)
    left = await keys_of(raw, store)
    for key, ttl in left.items():
        kind = key.removeprefix(store.keys.base)
        streams = ("changes", "changes:wake", "changes:queue")
        marked = kind.startswith("changes:queue:pending:")  # a wake-up's, for a moment
        assert kind in streams or (
            kind.startswith(("tomb:", "changes:queue:pending:")) and ttl > 0
        ), (
            key,
            ttl,
        )
        assert not marked or ttl <= WAKE_PENDING_MS
    tombs = [key for key in left if key.removeprefix(store.keys.base).startswith("tomb:")]
    assert len(tombs) == len(tasks)  # besides the streams, one tombstone per task
    assert await raw.exists(store.keys.delayed) == 0


@pytest.mark.parametrize("app", [None, "x"])
async def test_the_gate_bookkeeping_matches_the_memory_store(
    raw: aioredis.Redis, app: str | None
) -> None:
    """A seeded random run of creates, claims, ends, requeues, retries and direct claims:
    every claim takes what the memory store takes, and each gate's running set stays
    exactly its leased active tasks."""
    redis = redis_store(prefix=f"test-{uuid.uuid4().hex[:16]}")
    assert isinstance(redis, RedisTaskStore)
    memory = MemoryTaskStore(max_tasks=None)
    await redis.open()
    rng = random.Random(20261201)
    clock = time.time() - 1000
    tasks: list[TaskRecord] = []

    async def both_create(**fields: Any) -> None:
        nonlocal clock
        clock += 0.001
        task = record(app=app, **fields)
        task.created_at = task.updated_at = clock
        tasks.append(task)
        for store in (memory, redis):
            await store.create(task)

    try:
        for name, cap in (("g1", 2), ("g2", 3)):  # a task that never ends: gates never idle
            await both_create(gate=name, gate_limit=cap, lease_owner="keeper")
        for _step in range(250):
            roll = rng.random()
            live = {r.task_id: r for r in await memory.active_tasks()}
            leased = sorted(i for i, r in live.items() if r.lease_owner not in (None, "keeper"))
            waiting = sorted(i for i, r in live.items() if r.lease_owner is None)
            if roll < 0.35:
                gate = rng.choice(["g1", "g2", None])
                owner = rng.choice(["alice", "bob", "carol", None])
                size = {"g1": 2, "g2": 3}.get(gate or "")
                await both_create(gate=gate, gate_limit=size, owner=owner)
            elif roll < 0.6:
                most, until = rng.randint(1, 4), time.time() + 600
                mine = await memory.claim_queued("w", until, most, app=app)
                theirs = await redis.claim_queued("w", until, most, app=app)
                assert [r.task_id for r in theirs] == [r.task_id for r in mine]
                for waiting_run, taken in zip(mine, theirs, strict=True):
                    # Redis's claim began each ungated run; the engine begins the memory
                    # store's (and every gated one) with `start_run` (`stores.phases`)
                    assert (taken.phase == "running") == (taken.gate is None)
                    if taken.gate is None:
                        message = start_message(waiting_run)
                        await memory.start_run(taken.task_id, "w", message)
            elif roll < 0.72 and leased:
                chosen = rng.choice(leased)
                for store in (memory, redis):
                    await store.transition(chosen, "completed", result={})
            elif roll < 0.8 and leased:
                chosen = rng.choice(leased)
                holder = live[chosen].lease_owner or ""
                for store in (memory, redis):
                    await store.requeue(chosen, holder)
            elif roll < 0.88 and leased:
                chosen, due = rng.choice(leased), time.time() + rng.choice([-1.0, 3600.0])
                holder = live[chosen].lease_owner or ""
                for store in (memory, redis):
                    await store.retry_later(chosen, holder, due, "retry")
            elif roll < 0.94 and waiting:
                chosen = rng.choice(waiting)
                for store in (memory, redis):
                    await store.claim(chosen, "direct", time.time() + 600)
            elif waiting:
                chosen = rng.choice(waiting)
                for store in (memory, redis):
                    await store.transition(chosen, "cancelled")
            mine = await memory.get_many([t.task_id for t in tasks])
            theirs = await redis.get_many([t.task_id for t in tasks])
            assert {i: _state(r) for i, r in theirs.items()} == {
                i: _state(r) for i, r in mine.items()
            }
            running = gates_of(list(mine.values()))
            for gate in ("g1", "g2"):
                assert await raw.scard(f"{redis.keys.base}gate-run:{gate}") == running.get(gate, 0)
    finally:
        await redis.close()
