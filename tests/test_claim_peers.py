"""Workers of one application share the wake-ups of a busy queue (`engine.watcher`: peers).

On PostgreSQL every worker's `LISTEN` reader is woken by every new task, and would wake
its runner to claim up to once per window: a pool of four made about three times the
wake-ups and claim rounds of one worker. The heartbeat lists the live workers of the
application once a worker claims; the first of them by id (the primary) keeps a lone
worker's pace and the store paces the others' readers by the count (`space_wakes`),
slower while the others keep up. A store with no reader to pace (SQLite) or that shares
its wake-ups out (Redis) reads no count.
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import pytest

from fastmcp_tasks.errors import StoreError
from fastmcp_tasks.server.engine.heartbeat import WorkerHeartbeat
from fastmcp_tasks.server.engine.leases import LeaseKeeper
from fastmcp_tasks.server.engine.watcher import (
    LEFT_WAITING_SECONDS,
    QUEUE_BATCH_MAX_SECONDS,
    QUEUE_BATCH_SECONDS,
    SECONDARY_PACE_MAX_SECONDS,
    WATCHED,
    ChangeWatcher,
)
from fastmcp_tasks.stores.base import NEW_TASKS_KIND
from fastmcp_tasks.stores.operations import WorkerInfo
from fastmcp_tasks.stores.postgres import PostgresTaskStore
from fastmcp_tasks.stores.postgres import feed as feeding
from fastmcp_tasks.stores.postgres.feed import WAKE_SPACING
from fastmcp_tasks.stores.postgres.feed_parts import Pace
from fastmcp_tasks.stores.sqlite import SQLiteTaskStore
from tests.test_store_contract import postgres_store, record, redis_store

pytestmark = pytest.mark.anyio


def a_watcher(store: object = None, app: str | None = "shop") -> ChangeWatcher:
    runner = SimpleNamespace(store=store, app=app, owner="me")
    return ChangeWatcher(runner)  # type: ignore[arg-type]


def worker(worker_id: str, app: str | None = "shop", **fields: Any) -> WorkerInfo:
    now = time.time()
    made: dict[str, Any] = {
        "worker_id": worker_id,
        "app": app,
        "host": "h",
        "pid": os.getpid(),
        "version": "test",
        "concurrency": 4,
        "tools": ("echo",),
        "running": 0,
        "started_at": now - 60,
        "last_seen": now,
        "interval": 5.0,
        "stopped": False,
    }
    made.update(fields)
    return WorkerInfo(**made)


def test_peers_are_the_live_workers_of_the_application_that_run_tasks() -> None:
    watcher = a_watcher()
    now = time.time()
    listed = [
        worker("me"),
        worker("b"),
        worker("c"),
        worker("other", app="billing"),
        worker("front", concurrency=0),
        worker("left", stopped=True),
        worker("gone", last_seen=now - 600),
    ]
    watcher.count_peers(listed, now)
    assert (watcher.peers, watcher.primary) == (3, False)  # "b" comes first
    assert watcher.pace() == pytest.approx(2 * 3 * QUEUE_BATCH_SECONDS)
    watcher.count_peers([], now)  # a listing without itself (a store that lost it): one
    assert (watcher.peers, watcher.primary) == (1, True)
    assert watcher.pace() == QUEUE_BATCH_SECONDS
    watcher.count_peers(listed, now)
    watcher.count_peers(None, now)  # the listing failed: the count stands
    assert (watcher.peers, watcher.primary) == (3, False)
    watcher.count_peers([worker("b"), worker("c")], now)  # others, itself not listed (yet)
    assert (watcher.peers, watcher.primary) == (2, False)
    assert watcher.pace() == pytest.approx(2 * 2 * QUEUE_BATCH_SECONDS)
    # the first by id among the live ones, whatever order the listing has, is the primary
    watcher.count_peers([worker("x"), worker("me"), worker("a", stopped=True)], now)
    assert (watcher.peers, watcher.primary) == (2, True)
    assert watcher.pace() == QUEUE_BATCH_SECONDS


class Pacing:
    """A store with a reader to pace, whose every `space_wakes` is recorded."""

    def __init__(self) -> None:
        self.paces: list[float] = []

    def space_wakes(self, seconds: float, runner: str = "") -> None:
        self.paces.append(seconds)


def claim_round(watcher: ChangeWatcher, taken: int, filled: bool, waited: float = 0.0) -> None:
    """What `take_queued` tells the watcher after a round (`filled`: it took as many tasks
    as it had free slots; `waited`: how long ago the oldest it took was created)."""
    watcher.more_queued = filled
    watcher.claimed(taken, waited=waited)


def secondary_of_three(store: Pacing) -> ChangeWatcher:
    watcher = a_watcher(store)
    watcher.count_peers([worker("a"), worker("me"), worker("z")], time.time())
    assert not watcher.primary
    return watcher


BASE = 2 * 3 * QUEUE_BATCH_SECONDS  # a secondary's pace among three


def test_a_secondary_slows_while_the_others_keep_up() -> None:
    """Rounds that find fewer tasks than free slots, each just created: the pace doubles
    up to `SECONDARY_PACE_MAX_SECONDS` and stays there, through a beat too."""
    store = Pacing()
    watcher = secondary_of_three(store)
    assert store.paces == [pytest.approx(BASE)]
    for taken in (3, 1, 0, 2):  # some or none, never as many as it could take
        claim_round(watcher, taken, filled=False, waited=0.01)
    slowest = SECONDARY_PACE_MAX_SECONDS
    assert store.paces == [pytest.approx(p) for p in (BASE, 2 * BASE, 4 * BASE, slowest)]
    for _ in range(2_000):  # bounded: no further doubling once at the slowest
        claim_round(watcher, 0, filled=False)
    assert (watcher.pace(), watcher.spared, len(store.paces)) == (slowest, 3, 4)
    watcher.count_peers([worker("a"), worker("me"), worker("z")], time.time())
    assert watcher.pace() == store.paces[-1] == slowest  # a beat keeps it


@pytest.mark.parametrize(
    ("filled", "waited"),
    [(True, 0.0), (False, LEFT_WAITING_SECONDS), (False, -LEFT_WAITING_SECONDS)],
    ids=[
        "the queue holds more than it can take",
        "nobody else took a task it took",
        "the front end's clock is ahead of the worker's",
    ],
)
def test_a_secondary_is_back_at_its_pace_once_it_is_needed(filled: bool, waited: float) -> None:
    """A round that fills every free slot, or takes a task that waited long enough that
    nobody else is taking them (the primary is full, draining or gone), brings a slowed
    secondary back to its pace at once; a round after that which is not needed slows it
    again."""
    store = Pacing()
    watcher = secondary_of_three(store)
    for _ in range(3):
        claim_round(watcher, 1, filled=False)
    assert watcher.pace() == SECONDARY_PACE_MAX_SECONDS
    claim_round(watcher, 2, filled=filled, waited=waited)
    assert watcher.pace() == store.paces[-1] == pytest.approx(BASE)
    claim_round(watcher, 2, filled=filled, waited=waited)  # needed still: nothing to set
    assert len(store.paces) == 5
    claim_round(watcher, 2, filled=False, waited=-LEFT_WAITING_SECONDS / 2)  # near enough
    assert store.paces[-1] == pytest.approx(2 * BASE)


def test_the_primary_and_a_lone_worker_never_slow() -> None:
    """A secondary that becomes the primary takes a lone worker's pace, and starts at a
    secondary's own pace, not the slowed one, should it become one again."""
    store = Pacing()
    watcher = secondary_of_three(store)
    for _ in range(3):
        claim_round(watcher, 1, filled=False)
    now = time.time()
    watcher.count_peers([worker("me"), worker("z")], now)
    assert watcher.pace() == store.paces[-1] == QUEUE_BATCH_SECONDS
    for taken in (3, 0, 1):
        claim_round(watcher, taken, filled=False)
    assert watcher.pace() == store.paces[-1] == QUEUE_BATCH_SECONDS
    watcher.count_peers([worker("a"), worker("me"), worker("z")], now)
    assert watcher.pace() == store.paces[-1] == pytest.approx(BASE)
    lone = a_watcher(store)
    lone.count_peers([worker("me")], now)
    for taken in (3, 0, 1):
        claim_round(lone, taken, filled=False)
    assert lone.pace() == QUEUE_BATCH_SECONDS


class ScriptedClaims(Pacing):
    """A paced store whose claim rounds return what the test lines up."""

    def __init__(self) -> None:
        super().__init__()
        self.rounds: list[list[Any]] = []

    async def claim_queued(
        self, owner: str, until: float, limit: int, *, app: str | None = None
    ) -> list[Any]:
        return self.rounds.pop(0)[:limit] if self.rounds else []


async def test_a_claim_round_tells_the_watcher_whether_it_was_needed() -> None:
    """Through `take_queued`: fewer than the free slots, just created, slows a secondary;
    a round that fills the slots, or that takes a task left waiting, does not."""
    store = ScriptedClaims()
    slots = [4]
    runner = SimpleNamespace(
        store=store,
        app="shop",
        owner="me",
        stopping=False,
        claiming=set(),
        missed_cancels=set(),
        free_slots=lambda: slots[0],
    )
    runner.watcher = watcher = secondary_of_three(store)
    watcher.runner = runner  # type: ignore[assignment]
    keeper = LeaseKeeper(runner, owner="me", lease_seconds=30.0)

    async def start(record: Any, tools: Any) -> None:
        slots[0] -= 1  # submitted: it holds a slot

    keeper._start = start  # type: ignore[method-assign]

    async def started(record: Any, tools: Any) -> None:
        """Submitted, and already done: its slot is free again."""

    def tasks(count: int, age: float = 0.0) -> list[Any]:
        made = time.time() - age
        return [SimpleNamespace(task_id=f"t{i}", created_at=made) for i in range(count)]

    async def round_of(*claims: list[Any]) -> float:
        slots[0] = 4
        store.rounds = list(claims)
        assert await keeper.take_queued()
        return watcher.pace()

    with anyio.fail_after(10):
        assert await round_of(tasks(2)) == pytest.approx(2 * BASE)
        assert await round_of(tasks(4)) == pytest.approx(BASE)  # it filled every slot
        assert await round_of([]) == pytest.approx(2 * BASE)
        assert await round_of(tasks(1, age=LEFT_WAITING_SECONDS + 1)) == pytest.approx(BASE)
        assert await round_of(tasks(1)) == pytest.approx(2 * BASE)
        # a round of two claims (the first filled the slots, one freed meanwhile): the
        # oldest task of the whole round counts, not only the last claim's
        store.rounds = [tasks(3) + tasks(1, age=LEFT_WAITING_SECONDS + 1), tasks(1)]
        slots[0] = 4
        keeper._start = started  # type: ignore[method-assign]
        assert await keeper.take_queued()
        assert watcher.more_queued is False  # its last claim found fewer than it could take
        assert watcher.pace() == pytest.approx(BASE)


async def test_a_reader_pace_made_shorter_ends_its_pause_and_a_longer_one_does_not() -> None:
    """A slowed secondary needed again is woken at its new pace (`feed_parts.Pace`), not
    after the slow pause it began before; a longer pace set meanwhile extends the pause."""
    pace = Pace(3_600.0)
    ended = anyio.Event()

    async def pause() -> None:
        await pace.wait(time.monotonic())
        ended.set()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(pause)
            await anyio.wait_all_tasks_blocked()
            pace.set(7_200.0)  # longer: the pause goes on
            await anyio.wait_all_tasks_blocked()
            assert not ended.is_set()
            pace.set(0.0)  # shorter, and already over
            await ended.wait()
        assert pace.spacing == 0.0


class CountingStore:
    """A store whose `workers()` reads are counted."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.reads = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def workers(self) -> list[WorkerInfo]:
        self.reads += 1
        return list(await self.inner.workers())


@pytest.fixture
async def sqlite(tmp_path: Path) -> AsyncIterator[SQLiteTaskStore]:
    store = SQLiteTaskStore(str(tmp_path / "peers.db"))
    await store.open()
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture
async def postgres() -> AsyncIterator[PostgresTaskStore]:
    store = postgres_store()
    assert isinstance(store, PostgresTaskStore)
    await store.open()
    try:
        yield store
    finally:
        await store.close()


def beating(store: Any) -> tuple[WorkerHeartbeat, ChangeWatcher]:
    runner = SimpleNamespace(
        server=None, owner="me", app="shop", concurrency=4, running_now=0, store=store
    )
    runner.watcher = ChangeWatcher(runner)  # type: ignore[arg-type]
    return WorkerHeartbeat(runner, store), runner.watcher  # type: ignore[arg-type]


async def test_the_heartbeat_counts_peers_once_the_worker_claims(
    postgres: PostgresTaskStore,
) -> None:
    store = CountingStore(postgres)
    with anyio.fail_after(10):
        for name in ("b", "c"):
            await postgres.beat(worker(name))
        await postgres.beat(worker("other", app="billing"))
        heart, watcher = beating(store)
        await heart.beat()
        assert (store.reads, watcher.peers) == (0, 1)  # idle: nothing read
        watcher.claimed(2)
        await heart.beat()
        assert (store.reads, watcher.peers) == (1, 3)
        await heart.beat()  # no claim since the count: nothing read
        assert store.reads == 1


async def test_the_first_claim_round_has_the_peers_counted_at_once(
    postgres: PostgresTaskStore,
) -> None:
    """A worker started with the others counts them at its first claim, not a beat later."""
    heart, watcher = beating(postgres)
    heart.interval = 3_600.0
    await postgres.beat(worker("b"))
    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(heart.wait)
            await anyio.wait_all_tasks_blocked()  # the heartbeat waits out its interval
            watcher.claimed(1)
        await heart.beat()
    assert watcher.peers == 2
    assert not watcher.first_claim.is_set()  # from now on, a beat every interval
    watcher.claimed(1)
    assert not watcher.first_claim.is_set()


async def test_postgres_wakes_a_worker_no_more_often_than_the_pool_needs(
    postgres: PostgresTaskStore,
) -> None:
    """Every worker's reader hears every new task: a secondary waits twice `peers`
    windows between two wake-ups (`space_wakes`), at most the longest claim window; the
    primary keeps a lone worker's spacing, and a secondary whose primary said goodbye
    takes its place at the next count."""
    heart, watcher = beating(postgres)
    with anyio.fail_after(10):
        for name in ("b", "c"):
            await postgres.beat(worker(name))
        watcher.claimed(1)
        await heart.beat()
        assert (watcher.peers, watcher.primary) == (3, False)
        assert postgres._feed.pace.spacing == pytest.approx(2 * 3 * QUEUE_BATCH_SECONDS)
        for name in "defghijk":  # a large pool: at most the longest claim window
            await postgres.beat(worker(name))
        claim_round(watcher, 4, filled=True)  # needed: not slowed (see the test above)
        await heart.beat()
        assert postgres._feed.pace.spacing == pytest.approx(QUEUE_BATCH_MAX_SECONDS)
        for name in "bcdefghijk":  # all the others stop: "me" is first, then alone
            await postgres.beat(worker(name, stopped=True))
        await postgres.beat(worker("z"))
        claim_round(watcher, 1, filled=False)  # slower as a secondary: then primary
        assert postgres._feed.pace.spacing == pytest.approx(2 * QUEUE_BATCH_MAX_SECONDS)
        await heart.beat()
        assert (watcher.peers, watcher.primary) == (2, True)
        assert postgres._feed.pace.spacing == WAKE_SPACING
    postgres.space_wakes(0.0)  # never less than the reader's own spacing
    assert postgres._feed.pace.spacing == WAKE_SPACING


async def test_runners_sharing_a_store_are_woken_at_the_pace_of_the_quickest(
    postgres: PostgresTaskStore,
) -> None:
    """One process may run several runners on one store instance, whose one reader wakes
    them all: a pool's primary among them keeps its pace beside a secondary, whichever
    of them counted last."""
    primary, secondary = a_watcher(postgres), a_watcher(postgres)
    primary.runner.owner = "a"  # type: ignore[attr-defined]
    now = time.time()
    listed = [worker("me"), worker("a"), worker("z")]
    for first, then in ((primary, secondary), (secondary, primary)):
        first.count_peers(listed, now)
        then.count_peers(listed, now)
        assert (primary.primary, secondary.primary) == (True, False)
        assert postgres._feed.pace.spacing == WAKE_SPACING
    listed.append(worker("0"))  # a worker with a smaller id joins: both are secondaries
    primary.count_peers(listed, now)  # the other still asks for its pace among three
    assert postgres._feed.pace.spacing == pytest.approx(2 * 3 * QUEUE_BATCH_SECONDS)
    secondary.count_peers(listed, now)
    assert postgres._feed.pace.spacing == pytest.approx(QUEUE_BATCH_MAX_SECONDS)


async def test_a_failed_listing_keeps_the_count_and_the_beat_pace(
    postgres: PostgresTaskStore,
) -> None:
    class Failing(CountingStore):
        async def workers(self) -> list[WorkerInfo]:
            self.reads += 1
            raise StoreError("the workers table is unreadable")

    store = Failing(postgres)
    heart, watcher = beating(store)
    with anyio.fail_after(10):
        watcher.claimed(1)
        await heart.beat()  # the beat itself was written: no error
    assert (store.reads, watcher.peers) == (1, 1)
    assert not watcher.first_claim.is_set()  # no early beat again and again


async def test_stores_with_no_reader_to_pace_read_no_count(sqlite: SQLiteTaskStore) -> None:
    """SQLite's workers poll, Redis hands each wake-up to one worker: nothing to pace."""
    made = redis_store()
    await made.open()
    try:
        for inner in (sqlite, made):
            store = CountingStore(inner)
            heart, watcher = beating(store)
            with anyio.fail_after(10):
                watcher.claimed(2)
                await heart.beat()
            assert (store.reads, watcher.peers) == (0, 1)
            assert not watcher.first_claim.is_set()  # the beat keeps its pace
    finally:
        await made.close()


async def test_a_paced_reader_wakes_the_runner_no_sooner_than_its_pace(
    postgres: PostgresTaskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """New tasks right after a wake-up reach a paced worker's runner one pace later, all
    in one wake-up (a lower bound on a delay: a loaded machine only adds to it)."""
    monkeypatch.setattr(feeding, "random", SimpleNamespace(random=lambda: 0.0))  # full pace
    postgres.space_wakes(3.0)
    kinds = frozenset({*WATCHED, NEW_TASKS_KIND})  # what a worker's runner follows
    async with postgres.changes(kinds=kinds) as feed:
        with anyio.fail_after(30):
            await postgres.create(record())
            await feed.__anext__()  # the reader just woke for it
            began = time.monotonic()
            for _ in range(5):
                await postgres.create(record())
            await feed.__anext__()
            waited = time.monotonic() - began
    assert waited >= 1.5, f"a paced reader woke its runner after {waited:.3f} s"
