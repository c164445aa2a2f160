"""Redis hands each `queued` change to one worker of its application, not to all.

Through the store: a consumer group per application shares the queue stream's entries
out (each to exactly one consumer of every group), reads no more than asked, keeps
what arrives while nobody reads, and cleans up consumers; a lost group is a
`StoreError` and joining again recreates it; a runner's feed no longer hears new
tasks (but still hears a writer from before the queue stream). Through the engine,
on the real wire: each new task wakes one of two workers (one claim round a task, not
two), and a full worker leaves the wake-up to the one that can take the task (the
queue loop's safety poll is an hour, so only a wake-up can start it).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
import redis.asyncio as aioredis

from fastmcp_tasks import TaskStore
from fastmcp_tasks.errors import StoreError
from fastmcp_tasks.server.engine.queue_listener import QueueListener
from fastmcp_tasks.server.engine.watcher import WATCHED, ChangeWatcher
from fastmcp_tasks.stores.base import NEW_TASKS_KIND, TaskChange, TaskRecord
from fastmcp_tasks.stores.queue_wakes import QueueWakes
from fastmcp_tasks.stores.redis import RedisTaskStore
from fastmcp_tasks.stores.redis import queue_wakes as module
from fastmcp_tasks.stores.redis.queue_wakes import group_name
from fastmcp_tasks.testing.base import make_record
from tests.fault_server import fault_server, store_factory
from tests.test_store_contract import REDIS_URL, redis_store
from tests.wire import memory_wire

pytestmark = pytest.mark.anyio


@pytest.fixture
async def store() -> AsyncIterator[RedisTaskStore]:
    opened = redis_store(block_ms=100)
    assert isinstance(opened, RedisTaskStore)
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
async def raw() -> AsyncIterator[aioredis.Redis]:
    """A plain client of the same Redis, to look at and break what the store keeps."""
    client = aioredis.Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        yield client
    finally:
        await client.aclose()


async def claim(store: RedisTaskStore, app: str | None) -> list[TaskRecord]:
    """A worker's claim round: it clears the application's wake-up mark, so the next new
    task wakes a worker again (`stores.redis.queue_wakes`)."""
    return await store.claim_queued("claimer", time.time() + 60, 100, app=app)


async def read_all(wakes: QueueWakes, want: int, count: int = 100) -> list[TaskChange]:
    got: list[TaskChange] = []
    with anyio.fail_after(10):
        while len(got) < want:
            got += await wakes.next(count)
    return got


async def test_each_queued_change_goes_to_one_worker_of_every_application(
    store: RedisTaskStore,
) -> None:
    async with (
        store.queue_wakes("a", "one") as one,
        store.queue_wakes("a", "two") as two,
        store.queue_wakes("b", "other") as other,
    ):
        created = [make_record(app="a") for _ in range(10)]
        for task in created:  # each claimed before the next: each one wakes (`marks`)
            await store.create(task)
            await claim(store, "a")
        ids = {task.task_id for task in created}
        shared: list[str] = []
        with anyio.fail_after(10):
            while len(shared) < len(ids):  # both read; each entry comes to one of them
                for wakes in (one, two):
                    shared += [c.task_id for c in await wakes.next(3)]
        assert sorted(shared) == sorted(ids)  # every one, none twice
        everything = await read_all(other, 10)  # another application's group: all of them
        assert {c.task_id for c in everything} == ids
        assert all(c.kind == "queued" and c.details.get("app") == "a" for c in everything)


async def test_a_read_takes_no_more_than_asked_and_the_rest_waits_for_the_next(
    store: RedisTaskStore,
) -> None:
    async with store.queue_wakes(None, "early"):
        pass  # the group exists from here on; nobody reads while these are queued
    for _ in range(5):
        await store.create(make_record())
        await claim(store, None)
    async with store.queue_wakes(None, "late") as late:
        first = await late.next(2)
        assert len(first) == 2
        rest = await read_all(late, 3)
        assert len(rest) == 3
        with anyio.fail_after(5):
            assert await late.next(10) == []  # nothing more: the block ends empty


async def test_consumers_leave_their_group_and_stale_ones_are_removed(
    store: RedisTaskStore, raw: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    stream, group = store.keys.queue, group_name("app")
    async with store.queue_wakes("app", "leaving"):
        names = [c["name"] for c in await raw.xinfo_consumers(stream, group)]
        assert names == ["leaving"]
    assert await raw.xinfo_consumers(stream, group) == []
    await raw.xgroup_createconsumer(stream, group, "crashed")  # died without leaving
    monkeypatch.setattr(module, "STALE_CONSUMER_MS", -1)
    async with store.queue_wakes("app", "joining"):
        names = [c["name"] for c in await raw.xinfo_consumers(stream, group)]
        assert names == ["joining"]


async def test_a_lost_group_is_a_store_error_and_joining_again_recreates_it(
    store: RedisTaskStore, raw: aioredis.Redis
) -> None:
    async with store.queue_wakes(None, "w") as wakes:
        await raw.delete(store.keys.queue)  # as a Redis restart without persistence
        with pytest.raises(StoreError, match="queue wake-up read failed"), anyio.fail_after(5):
            await wakes.next(1)
    async with store.queue_wakes(None, "w") as wakes:
        task = make_record()
        await store.create(task)
        assert [c.task_id for c in await read_all(wakes, 1)] == [task.task_id]


async def test_a_runners_feed_hears_cancels_but_new_tasks_only_from_older_writers(
    store: RedisTaskStore, raw: aioredis.Redis
) -> None:
    async with store.changes(kinds=WATCHED | {NEW_TASKS_KIND}) as feed:
        task = make_record()
        await store.create(task)  # to the queue stream, not this feed
        await store.request_cancel(task.task_id)
        fields = {"t": "old", "k": "queued", "s": "working", "d": "{}"}
        await raw.xadd(store.keys.wakes, fields)  # what a writer before it appended
        with anyio.fail_after(5):
            got = [await feed.__anext__() for _ in range(2)]
    assert [(c.task_id, c.kind) for c in got] == [
        (task.task_id, "cancel_requested"),
        ("old", "queued"),
    ]


# --- through the engine ----------------------------------------------------------------


@pytest.fixture
async def redis_stores(tmp_path: Path) -> AsyncIterator[Callable[[], TaskStore]]:
    make, cleanup = store_factory("redis", tmp_path)
    yield make
    await cleanup()


def count_claims(tasks: Any, rounds: list[str]) -> None:
    """Record each claim round of `tasks`'s runner in `rounds` (by its owner)."""
    store = tasks.runner.store
    inner = store.inner
    claim = inner.claim_queued

    async def counted(owner: str, *args: Any, **kw: Any) -> Any:
        rounds.append(owner)
        return await claim(owner, *args, **kw)

    inner.claim_queued = counted
    store.__dict__.pop("claim_queued", None)  # the monitored store's bound copy


async def test_each_new_task_wakes_one_worker_not_both(
    redis_stores: Callable[[], TaskStore],
) -> None:
    lease = timedelta(seconds=5)
    front, _, _ = fault_server(store=redis_stores(), concurrency=0, lease=lease)
    one, one_tasks, _ = fault_server(store=redis_stores(), concurrency=2, lease=lease)
    two, two_tasks, _ = fault_server(store=redis_stores(), concurrency=2, lease=lease)
    rounds: list[str] = []
    async with memory_wire(front) as wire, one._lifespan_manager(), two._lifespan_manager():
        for tasks in (one_tasks, two_tasks):
            tasks.runner.queue_poll = 3600.0  # wake-ups only
            count_claims(tasks, rounds)
        await anyio.sleep(0.3)  # each runner's first claim (its feed subscribed) is done
        rounds.clear()
        with anyio.fail_after(30):
            for n in range(20):
                task_id = (await wire.call_tool("quick", {"text": str(n)}))["taskId"]
                assert (await wire.wait(task_id))["status"] == "completed"
    assert len(rounds) <= 22, rounds  # one a task (both hearing every task: about 28)
    assert len(set(rounds)) == 2  # both took tasks


def wake_ups_only(tasks: Any) -> None:
    """No safety poll from now on: the queue loop claims on wake-ups alone."""
    tasks.runner.queue_poll = 3600.0
    tasks.runner.watcher.wake_queue()  # its current wait ends; the next one has no poll


async def test_a_full_worker_leaves_the_wake_up_to_a_worker_with_room(
    redis_stores: Callable[[], TaskStore],
) -> None:
    lease = timedelta(seconds=5)
    front, _, _ = fault_server(store=redis_stores(), concurrency=0, lease=lease)
    full, full_tasks, probes = fault_server(store=redis_stores(), concurrency=1, lease=lease)
    # more room than it ever fills: it does not look again as slots free (as a worker
    # that filled every slot does), so a task only starts on it by a wake-up
    free, free_tasks, _ = fault_server(store=redis_stores(), concurrency=3, lease=lease)
    async with memory_wire(front) as wire, full._lifespan_manager():
        wake_ups_only(full_tasks)
        with anyio.fail_after(10):
            blocked = (await wire.call_tool("blocker", {"key": "hold"}))["taskId"]
            await probes.event("hold.started").wait()  # the only worker is full now
        async with free._lifespan_manager():
            wake_ups_only(free_tasks)
            for n in range(6):  # a full worker reading wake-ups would strand about half
                with anyio.fail_after(10):
                    task_id = (await wire.call_tool("quick", {"text": str(n)}))["taskId"]
                    assert (await wire.wait(task_id))["status"] == "completed"
        probes.release("hold")
        with anyio.fail_after(10):
            assert (await wire.wait(blocked))["status"] == "completed"


class Runner:
    """What `QueueListener` reads of a runner, set by hand."""

    def __init__(self, free: int) -> None:
        self.free, self.stopping = free, False
        self.health, self.owner, self.app = None, "w", None
        self.watcher = ChangeWatcher(self)  # type: ignore[arg-type]

    def free_slots(self) -> int:
        return self.free


def test_a_stopping_worker_has_no_room_for_wake_ups() -> None:
    runner = Runner(free=5)
    listener = QueueListener(runner, None)  # type: ignore[arg-type]
    listener.held = 2
    assert listener.room() == 3
    runner.stopping = True  # draining: it takes no new task, so it reads none
    assert listener.room() == 0


async def test_a_claim_round_spends_the_wake_ups_held_when_it_began_only() -> None:
    listener = QueueListener(Runner(free=4), None)  # type: ignore[arg-type]
    listener.held = 1

    async def round_that_hears_two_more() -> bool:
        listener.held += 2  # read while its claim was under way: the next round's
        return True  # it claimed

    with anyio.fail_after(5):
        await listener.take_queued(round_that_hears_two_more)
    assert listener.held == 2
