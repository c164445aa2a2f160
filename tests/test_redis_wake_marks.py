"""Redis wakes one worker per claim on its way, not one per new task (`redis.queue_wakes`).

Through the store: tasks queued while a wake-up's claim has not run add no wake-up; a
claim clears its application's mark so the next task wakes a worker again; a claim that
fills its limit while more wait wakes another worker; a wake-up for a later time always
goes; each application, and tasks without one, are marked apart; a mark lapses by
itself. Through the engine, with the queue loop's safety poll an hour away (so only a
wake-up starts a task): a burst that fills one worker reaches the next, and a burst on an
idle pool of three is claimed in fewer rounds than it has tasks; tasks queued after a
wake-up went to a worker that had filled up, and a retry that comes due while the worker
told of it is full, start on the idle one (a claim round that cannot claim hands on what
woke it, and a failed hand-on is made again by the next round).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta

import anyio
import pytest
import redis.asyncio as aioredis
from fastmcp import FastMCP

from fastmcp_tasks import TasksExtension, TaskStore
from fastmcp_tasks.errors import StoreError
from fastmcp_tasks.server.engine.queue_listener import QueueListener
from fastmcp_tasks.server.monitored_store import innermost
from fastmcp_tasks.stores.base import TaskChange, TaskRecord
from fastmcp_tasks.stores.queue_wakes import queue_wakes_of
from fastmcp_tasks.stores.redis import RedisTaskStore
from fastmcp_tasks.stores.redis.queue_wakes import WAKE_PENDING_MS
from fastmcp_tasks.testing.base import make_record
from tests.fault_server import Probes, fault_server
from tests.test_redis_queue_wakes import (
    Runner,
    count_claims,
    raw,
    redis_stores,
    store,
    wake_ups_only,
)
from tests.wire import memory_wire

pytestmark = pytest.mark.anyio

Server = tuple[FastMCP, TasksExtension, Probes]

__all__ = ["raw", "redis_stores", "store"]  # test_redis_queue_wakes's fixtures, not copied


async def claim(store: RedisTaskStore, app: str | None, limit: int = 100) -> list[TaskRecord]:
    return await store.claim_queued("claimer", time.time() + 60, limit, app=app)


async def wakes_now(wakes: object) -> list[TaskChange]:
    """Every wake-up waiting for this consumer (the store's block is 0.1 s)."""
    got: list[TaskChange] = []
    with anyio.fail_after(10):
        while batch := await wakes.next(100):  # type: ignore[attr-defined]
            got += batch
    return got


def mark(store: RedisTaskStore, app: str | None) -> str:
    return f"{store.keys.queue}:pending:" + ("*" if app is None else f"a:{app}")


async def test_tasks_queued_before_the_claim_share_one_wake_up(
    store: RedisTaskStore, raw: aioredis.Redis
) -> None:
    async with store.queue_wakes("a", "w") as wakes:
        first = [make_record(app="a") for _ in range(5)]
        for task in first:
            await store.create(task)
        # read at once: the mark lapses by itself WAKE_PENDING_MS after it was set, and
        # collecting the wake-ups takes a 0.1 s block at least (more on a loaded machine)
        left = await raw.pttl(mark(store, "a"))
        woken = await wakes_now(wakes)
        assert [change.task_id for change in woken] == [first[0].task_id]
        assert 0 < left <= WAKE_PENDING_MS
        assert {task.task_id for task in await claim(store, "a")} == {t.task_id for t in first}
        assert await raw.exists(mark(store, "a")) == 0  # the claim cleared it
        later = make_record(app="a")
        await store.create(later)
        assert [change.task_id for change in await wakes_now(wakes)] == [later.task_id]


async def test_a_claim_that_fills_its_limit_wakes_another_worker(
    store: RedisTaskStore, raw: aioredis.Redis
) -> None:
    async with store.queue_wakes("a", "w") as wakes:
        for _ in range(5):
            await store.create(make_record(app="a"))
        assert len(await wakes_now(wakes)) == 1
        assert len(await claim(store, "a", limit=2)) == 2  # full, three wait: wake again
        assert await raw.exists(mark(store, "a")) == 1  # at once: it lapses by itself
        again = await wakes_now(wakes)
        assert len(again) == 1 and again[0].details == {"app": "a"}
        assert len(await claim(store, "a", limit=3)) == 3  # full, but none is left
        assert await wakes_now(wakes) == []
        assert await raw.exists(mark(store, "a")) == 0


async def test_a_wake_up_for_a_later_time_always_goes(store: RedisTaskStore) -> None:
    async with store.queue_wakes("a", "w") as wakes:
        task = make_record(app="a")
        await store.create(task)
        await claim(store, "a")
        await store.create(make_record(app="a"))  # marks a claim on its way
        due = time.time() + 30
        assert await store.retry_later(task.task_id, "claimer", due, "again soon") is not None
        woken = await wakes_now(wakes)
        assert len(woken) == 3  # both creations, and the retry despite the mark
        assert woken[-1].task_id == task.task_id
        assert woken[-1].details.get("not_before") == pytest.approx(due)


async def test_each_application_and_tasks_without_one_are_marked_apart(
    store: RedisTaskStore, raw: aioredis.Redis
) -> None:
    async with store.queue_wakes("a", "one") as one, store.queue_wakes("b", "two") as two:
        a, b, none = make_record(app="a"), make_record(app="b"), make_record()
        for task in (a, b, none, make_record(app="a"), make_record(app="b"), make_record()):
            await store.create(task)
        marks = [mark(store, "a"), mark(store, "b"), mark(store, None)]
        assert await raw.exists(*marks) == 3
        await claim(store, "a")  # clears a's mark only
        assert await raw.exists(*marks) == 2 and await raw.exists(marks[0]) == 0
        await claim(store, None)  # a claim of any application's tasks clears the unnamed one
        assert await raw.exists(marks[2]) == 0
        # every group gets every entry: one wake-up each for a, b and no application
        assert [c.task_id for c in await wakes_now(one)] == [a.task_id, b.task_id, none.task_id]
        assert [c.task_id for c in await wakes_now(two)] == [a.task_id, b.task_id, none.task_id]


async def test_a_mark_whose_claim_never_comes_lapses(
    store: RedisTaskStore, raw: aioredis.Redis
) -> None:
    async with store.queue_wakes("a", "w") as wakes:
        await store.create(make_record(app="a"))  # its wake-up's worker "dies" unclaimed
        assert len(await wakes_now(wakes)) == 1
        with anyio.fail_after(5):
            while await raw.exists(mark(store, "a")):  # noqa: ASYNC110 - Redis expires it
                await anyio.sleep(0.02)
        task = make_record(app="a")
        await store.create(task)
        assert [change.task_id for change in await wakes_now(wakes)] == [task.task_id]


# --- through the engine ----------------------------------------------------------------


def server(make: Callable[[], TaskStore], concurrency: int) -> Server:
    """A fault server on the shared store: a front end (0) or a worker (its slots)."""
    return fault_server(store=make(), concurrency=concurrency, lease=timedelta(seconds=5))


async def test_a_burst_that_fills_one_worker_reaches_the_next(
    redis_stores: Callable[[], TaskStore],
) -> None:
    front, _, _ = server(redis_stores, 0)
    one, one_tasks, one_probes = server(redis_stores, 2)
    two, two_tasks, two_probes = server(redis_stores, 2)
    keys = [f"k{n}" for n in range(4)]

    def started(key: str) -> bool:
        return any(p.event(f"{key}.started").is_set() for p in (one_probes, two_probes))

    async with memory_wire(front) as wire, one._lifespan_manager(), two._lifespan_manager():
        wake_ups_only(one_tasks)
        wake_ups_only(two_tasks)
        await anyio.sleep(0.3)  # the claims the wake-ups above asked for are done
        with anyio.fail_after(20):
            async with anyio.create_task_group() as group:
                for key in keys:  # one wake-up for all four; two fill the worker it woke
                    group.start_soon(wire.call_tool, "blocker", {"key": key})
            while not all(started(key) for key in keys):  # noqa: ASYNC110 - two servers' events
                await anyio.sleep(0.02)  # all four at once: the full claim woke the other
        assert sorted(one_probes.runs + two_probes.runs) == keys
        assert len(one_probes.runs) == len(two_probes.runs) == 2
        for key in keys:
            one_probes.release(key)
            two_probes.release(key)


async def test_a_burst_on_an_idle_pool_is_claimed_in_fewer_rounds_than_tasks(
    redis_stores: Callable[[], TaskStore],
) -> None:
    front, _, _ = server(redis_stores, 0)
    workers = [server(redis_stores, 8) for _ in range(3)]
    rounds: list[str] = []
    async with memory_wire(front) as wire:
        async with (
            workers[0][0]._lifespan_manager(),
            workers[1][0]._lifespan_manager(),
            workers[2][0]._lifespan_manager(),
        ):
            for _, tasks, _ in workers:
                wake_ups_only(tasks)
                count_claims(tasks, rounds)
            await anyio.sleep(0.3)  # the claims the wake-ups above asked for are done
            rounds.clear()
            store = innermost(workers[0][1].runner.store)
            assert isinstance(store, RedisTaskStore)
            before = await store._require().xlen(store.keys.queue)  # wake-ups sent so far
            ids: list[str] = []

            async def create(n: int) -> None:
                ids.append((await wire.call_tool("quick", {"text": str(n)}))["taskId"])

            with anyio.fail_after(30):
                async with anyio.create_task_group() as group:
                    for n in range(24):
                        group.start_soon(create, n)
                for task_id in ids:
                    assert (await wire.wait(task_id))["status"] == "completed"
            queue = innermost(workers[0][1].runner.store)
            assert isinstance(queue, RedisTaskStore)
            woken = await queue._require().xlen(queue.keys.queue) - before
    assert len(rounds) < 24, rounds  # one wake-up a task would make 24 rounds or more
    assert woken < 12, woken  # without the marks: one a task, 24


async def test_tasks_after_a_wake_up_a_full_worker_read_start_on_the_idle_one(
    redis_stores: Callable[[], TaskStore],
) -> None:
    """The full worker's listener was still waiting for one more wake-up (it had room for
    one when it began the read), so it reads the next task's; its claim round cannot
    claim and hands the wake-up on, instead of holding the mark until it lapses."""
    front, _, _ = server(redis_stores, 0)
    full, full_tasks, probes = server(redis_stores, 2)
    idle, idle_tasks, _ = server(redis_stores, 3)
    async with memory_wire(front) as wire, full._lifespan_manager():
        wake_ups_only(full_tasks)
        await anyio.sleep(0.3)  # the claim its wake-up above asked for is done
        async with anyio.create_task_group() as group:  # one burst, one wake-up
            for key in ("h0", "h1"):
                group.start_soon(wire.call_tool, "blocker", {"key": key})
        with anyio.fail_after(10):
            await probes.event("h0.started").wait()
            await probes.event("h1.started").wait()
        try:
            async with idle._lifespan_manager():
                wake_ups_only(idle_tasks)
                await anyio.sleep(0.3)  # its first claim is done; it waits behind the full one
                with anyio.fail_after(10):
                    for n in range(3):
                        task_id = (await wire.call_tool("quick", {"text": str(n)}))["taskId"]
                        assert (await wire.wait(task_id))["status"] == "completed"
        finally:
            probes.release("h0")
            probes.release("h1")


class Source:
    """A wake-up source that records what the listener hands on (the first `fail` fail)."""

    def __init__(self, fail: int = 0) -> None:
        self.handed_on: list[str | None] = []
        self.fail = fail

    async def hand_on(self, app: str | None) -> None:
        self.handed_on.append(app)
        if len(self.handed_on) <= self.fail:
            raise StoreError("blip")


async def could_not() -> bool:
    return False


async def claimed() -> bool:
    return True


async def test_a_round_that_could_not_claim_hands_on_what_woke_it() -> None:
    runner = Runner(free=0)
    runner.app = "app"
    source = Source()
    listener = QueueListener(runner, source)  # type: ignore[arg-type]
    with anyio.fail_after(5):
        listener.held = 1
        await listener.take_queued(claimed)  # its claim cleared the mark itself
        assert source.handed_on == []
        listener.held = 2
        await listener.take_queued(could_not)  # full: its wake-ups go to another worker
        assert source.handed_on == ["app"] and listener.held == 0
        await listener.take_queued(could_not)  # a retry came due, or its poll: the same
        assert source.handed_on == ["app", "app"]


async def test_a_failed_hand_on_is_made_again_by_the_next_round() -> None:
    runner = Runner(free=0)
    source = Source(fail=1)
    listener = QueueListener(runner, source)  # type: ignore[arg-type]
    listener.held = 1
    with anyio.fail_after(5):
        with pytest.raises(StoreError):
            await listener.take_queued(could_not)
        await listener.take_queued(could_not)  # the supervisor's next round
    assert source.handed_on == [None, None]
    runner.stopping = True  # stopping: best effort, the store may be closing
    source.fail = 10
    with anyio.fail_after(5):
        await listener.take_queued(could_not)
    assert len(source.handed_on) == 3


async def test_a_retry_due_while_the_worker_told_of_it_is_full_starts_elsewhere(
    redis_stores: Callable[[], TaskStore],
) -> None:
    """The retry's wake-up went to one worker, which is full when the retry comes due:
    its round cannot claim and hands it on to the idle worker."""
    front, front_tasks, _ = server(redis_stores, 0)
    busy, busy_tasks, probes = server(redis_stores, 2)
    idle, idle_tasks, _ = server(redis_stores, 3)
    async with memory_wire(front) as wire:
        retried = (await wire.call_tool("quick", {"text": "r"}))["taskId"]
        store = innermost(front_tasks.runner.store)
        assert isinstance(store, RedisTaskStore)
        app = front_tasks.runner.app
        [taken] = await store.claim_queued("claimer", time.time() + 60, 1, app=app)
        assert taken.task_id == retried
        async with busy._lifespan_manager():
            wake_ups_only(busy_tasks)
            await anyio.sleep(0.3)  # the claim its wake-up above asked for is done
            with anyio.fail_after(10):
                await wire.call_tool("blocker", {"key": "h0"})
                await probes.event("h0.started").wait()
            due = time.time() + 1.5  # its wake-up goes to the busy worker, which has room
            assert await store.retry_later(retried, "claimer", due, "again") is not None
            await anyio.sleep(0.3)
            with anyio.fail_after(10):
                await wire.call_tool("blocker", {"key": "h1"})  # now it is full
                await probes.event("h1.started").wait()
            try:
                async with idle._lifespan_manager():
                    wake_ups_only(idle_tasks)
                    with anyio.fail_after(8):
                        assert (await wire.wait(retried))["status"] == "completed"
            finally:
                probes.release("h0")
                probes.release("h1")


async def test_a_store_with_queue_wakes_but_no_hand_on_is_followed_by_its_feed(
    store: RedisTaskStore,
) -> None:
    class Older:  # a store of its own offering only the older half of the capability
        def queue_wakes(self, app: str | None, consumer: str) -> object:
            return store.queue_wakes(app, consumer)

    assert queue_wakes_of(store) is store
    assert queue_wakes_of(Older()) is None  # type: ignore[arg-type]
