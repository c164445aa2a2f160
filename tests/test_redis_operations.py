"""The Redis store's operator records where only a shared backend can get them wrong.

The operations contract (`fastmcp_tasks.testing.operations`, in `test_store_contract`)
runs on Redis too; these tests cover what it cannot see: a history's key gets its
task's TTL when the task ends (or when written after) and goes when Redis evicts the
task; every path that deletes a task hash (purges, `delete_finished`, the expiry sweep,
the `max_tasks` sweep) deletes its history key; two store instances on one prefix
share pauses, workers, audit and histories; a held gated task gives its gate's slot
back and returns to its gate on `resume`. Each test uses its own key prefix.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator

import anyio
import pytest
import redis.asyncio as aioredis

from fastmcp_tasks.stores.operations import (
    PAUSED_UNTIL,
    RESUMED_MESSAGE,
    AuditEntry,
    Pause,
    TaskEvent,
    WorkerInfo,
)
from fastmcp_tasks.stores.redis import RedisTaskStore
from tests.test_redis_flow import keys_of
from tests.test_redis_store import pair, raw
from tests.test_store_contract import record, redis_store

pytestmark = pytest.mark.anyio

__all__ = ["pair", "raw"]  # fixtures shared with test_redis_store rather than copied

Pair = tuple[RedisTaskStore, RedisTaskStore]


def event(kind: str, **details: object) -> TaskEvent:
    return TaskEvent(time.time(), kind, dict(details))


def worker(worker_id: str, app: str | None) -> WorkerInfo:
    now = time.time()
    return WorkerInfo(worker_id, app, "host", 1, "1.0", 2, ("tool",), 0, now - 1, now, 5.0)


async def history_keys(raw: aioredis.Redis, store: RedisTaskStore) -> list[str]:
    return [key async for key in raw.scan_iter(match=f"{store.keys.base}events:*")]


@pytest.fixture
async def store() -> AsyncIterator[RedisTaskStore]:
    instance = redis_store()
    assert isinstance(instance, RedisTaskStore)
    await instance.open()
    try:
        yield instance
    finally:
        await instance.close()


async def test_a_history_takes_its_tasks_ttl_and_expires_with_it(
    store: RedisTaskStore, raw: aioredis.Redis
) -> None:
    early, late = record(retention_ms=400), record(retention_ms=400)
    for task in (early, late):
        await store.create(task)
    await store.add_events([(early.task_id, event("created")), (early.task_id, event("taken"))])
    history = store.keys.events(early.task_id)
    assert await raw.pttl(history) == -1  # active: kept as long as the task is
    for task in (early, late):
        await store.transition(task.task_id, "completed", result={"content": []})
    assert 0 < await raw.pttl(history) <= 400  # set by the terminal transition
    # written only after the end: the new key gets the task's remaining TTL
    await store.add_events([(late.task_id, event("finished", outcome="completed"))])
    late_history = store.keys.events(late.task_id)
    assert 0 < await raw.pttl(late_history) <= await raw.pttl(store.keys.task(late.task_id)) + 5
    assert [e.kind for e in await store.events(early.task_id)] == ["created", "taken"]
    with anyio.fail_after(5):
        while await raw.exists(history, late_history):  # noqa: ASYNC110
            await anyio.sleep(0.02)
    assert await raw.exists(store.keys.task(early.task_id)) == 0
    assert await store.events(early.task_id) == []
    assert await store.events(late.task_id) == []


async def test_an_expired_task_shows_no_history_before_redis_evicts_it(
    store: RedisTaskStore, raw: aioredis.Redis
) -> None:
    task = record(retention_ms=100)
    await store.create(task)
    await store.add_events([(task.task_id, event("created"))])
    await store.transition(task.task_id, "cancelled")
    await raw.persist(store.keys.task(task.task_id))  # as if Redis were late to evict it
    await raw.persist(store.keys.events(task.task_id))
    await anyio.sleep(0.15)
    assert await store.events(task.task_id) == []
    await store.add_events([(task.task_id, event("finished"))])  # dropped: expired
    assert await raw.llen(store.keys.events(task.task_id)) == 1
    await store.purge_expired(time.time())  # the expiry sweep deletes what Redis kept
    assert await history_keys(raw, store) == []


async def test_every_deletion_of_a_task_deletes_its_history_key(
    store: RedisTaskStore, raw: aioredis.Redis
) -> None:
    purged, chosen, forever = record(), record(), record(retention_ms=None)
    active = record()
    tasks = (purged, chosen, forever, active)
    for task in tasks:
        await store.create(task)
    await store.add_events([(t.task_id, event("created")) for t in tasks])
    for task in (purged, chosen, forever):
        await store.transition(task.task_id, "completed", result={"content": []})
    assert len(await history_keys(raw, store)) == 4
    assert await store.delete_finished([chosen.task_id, active.task_id]) == 1
    assert await raw.exists(store.keys.events(chosen.task_id)) == 0
    assert await store.purge_finished(time.time() + 1) == 2
    assert await history_keys(raw, store) == [store.keys.events(active.task_id)]
    left = await keys_of(raw, store)
    assert not [k for k in left if k.startswith(store.keys.task_base) and active.task_id not in k]


async def test_the_max_tasks_sweep_deletes_expired_histories(raw: aioredis.Redis) -> None:
    capped = redis_store(max_tasks=1)
    assert isinstance(capped, RedisTaskStore)
    await capped.open()
    try:
        old = record(retention_ms=50)
        await capped.create(old)
        await capped.add_events([(old.task_id, event("created"))])
        await capped.transition(old.task_id, "completed", result={"content": []})
        await raw.persist(capped.keys.task(old.task_id))  # Redis has not evicted them yet
        await raw.persist(capped.keys.events(old.task_id))
        await anyio.sleep(0.1)
        await capped.create(record())  # at the cap: the sweep makes room
        assert await raw.exists(capped.keys.task(old.task_id)) == 0
        assert await history_keys(raw, capped) == []
    finally:
        await capped.close()


async def test_a_reused_id_starts_a_fresh_history(
    store: RedisTaskStore, raw: aioredis.Redis
) -> None:
    task = record()
    stale = store.keys.events(task.task_id)
    await raw.rpush(stale, '{"at": 1.0, "kind": "created"}')  # left by an evicted hash
    await store.create(task)
    assert await store.events(task.task_id) == []
    assert await raw.exists(stale) == 0


async def test_two_instances_share_pauses_workers_audit_and_histories(pair: Pair) -> None:
    a, b = pair
    now = time.time()
    assert await a.pause(Pause("app", "tool", now, "cli"))
    assert not await b.pause(Pause("app", "tool", now, "dashboard"))
    assert [(p.app, p.tool, p.by) for p in await b.paused()] == [("app", "tool", "cli")]
    task = record(app="app")
    await a.create(task)
    (taken,) = await b.claim_queued("w-b", now + 60, 5)
    held = await b.hold_paused(taken.task_id, "w-b", "Paused")
    assert held is not None and held.not_before == PAUSED_UNTIL
    assert await a.claim_queued("w-a", now + 60, 5) == []
    assert await a.resume("app", "tool") == 1
    assert await b.paused() == []
    (again,) = await a.claim_queued("w-a", time.time() + 60, 5)
    assert again.task_id == task.task_id and again.not_before is None
    # held before its body, the run its claim began was taken back (`rules.hold_back`):
    # this claim begins its first run again
    assert (again.phase, again.attempts) == ("running", 1)
    await a.beat(worker("w-a", app="app"))
    await b.beat(worker("w-b", app=None))
    assert {w.worker_id for w in await a.workers()} == {"w-a", "w-b"}
    assert {w.worker_id for w in await b.workers()} == {"w-a", "w-b"}
    await a.add_audit(AuditEntry(time.time(), "cli", "pause", 1, {"tool": "tool"}))
    await b.add_audit(AuditEntry(time.time(), "ops", "resume", 1))
    assert [e.action for e in await a.audit()] == ["resume", "pause"]
    await a.add_events([(task.task_id, event("created", by="a"))])
    await b.add_events([(task.task_id, event("taken", worker="w-b"))])
    assert [e.kind for e in await a.events(task.task_id)] == ["created", "taken"]


async def test_a_held_gated_task_frees_its_slot_and_returns_to_its_gate(
    store: RedisTaskStore, raw: aioredis.Redis
) -> None:
    first, second = record(gate="g", gate_limit=1), record(gate="g", gate_limit=1)
    for task in (first, second):
        await store.create(task)
    later = time.time() + 60
    (taken,) = await store.claim_queued("w1", later, 5)
    assert taken.task_id == first.task_id
    await store.start_run(first.task_id, "w1", None)
    await store.pause(Pause("", "tool", time.time(), "cli"))
    async with store.changes(frozenset({first.task_id}), frozenset({"queued"})) as feed:
        held = await store.hold_paused(first.task_id, "w1", "Paused by an operator")
        # held before its body (the engine holds before the tool starts): the run begun is
        # taken back (`rules.hold_back`)
        assert held is not None and held.phase == "queued" and held.attempts == 0
        with anyio.fail_after(2):
            freed = await anext(aiter(feed))
        assert freed.details == {"gate": "g"}  # the gate's waiters may claim now
    assert await raw.zscore(store.keys.delayed, first.task_id) == PAUSED_UNTIL
    assert await raw.scard(f"{store.keys.base}gate-run:g") == 0
    (next_,) = await store.claim_queued("w2", later, 5)  # the slot it gave back
    assert next_.task_id == second.task_id
    assert await store.resume("", "tool") == 1
    assert await raw.zscore(store.keys.delayed, first.task_id) is None
    assert await store.claim_queued("w3", later, 5) == []  # back in its gate, which is full
    await store.transition(second.task_id, "completed", result={"content": []})
    (last,) = await store.claim_queued("w3", later, 5)
    assert last.task_id == first.task_id and last.status_message == RESUMED_MESSAGE


async def test_pause_fields_keep_apps_and_tools_apart(store: RedisTaskStore) -> None:
    await store.pause(Pause("", "tool", time.time(), "cli"))  # tasks without an app
    mine, other = record(app="x"), record()
    for task in (mine, other):
        await store.create(task)
    await store.claim_queued("w", time.time() + 60, 5)
    assert await store.hold_paused(mine.task_id, "w", None) is None  # app x is not paused
    held = await store.hold_paused(other.task_id, "w", None)
    assert held is not None and held.status_message is None
    assert await store.resume("x", "tool") is None
    assert await store.resume("", "tool") == 1


def test_keys_are_under_the_prefix() -> None:
    store = RedisTaskStore(prefix=f"test-{uuid.uuid4().hex[:8]}")
    base = store.keys.base
    for key in (store.keys.events("t"), store.keys.pauses, store.keys.workers, store.keys.audit):
        assert key.startswith(base)
