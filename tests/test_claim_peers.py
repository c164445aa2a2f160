"""Workers of one application share the wake-ups of a busy queue (`engine.watcher`: peers).

On PostgreSQL every worker's `LISTEN` reader is woken by every new task, and would wake
its runner to claim up to once per window: a pool of four made about three times the
wake-ups and claim rounds of one worker. The heartbeat lists the live workers of the
application once a worker claims; the first of them by id (the primary) keeps a lone
worker's pace and the store paces the others' readers by the count (`space_wakes`). A
store with no reader to pace (SQLite) or that shares its wake-ups out (Redis) reads no
count.
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
from fastmcp_tasks.server.engine.watcher import (
    QUEUE_BATCH_MAX_SECONDS,
    QUEUE_BATCH_SECONDS,
    WATCHED,
    ChangeWatcher,
)
from fastmcp_tasks.stores.base import NEW_TASKS_KIND
from fastmcp_tasks.stores.operations import WorkerInfo
from fastmcp_tasks.stores.postgres import PostgresTaskStore
from fastmcp_tasks.stores.postgres import feed as feeding
from fastmcp_tasks.stores.postgres.feed import WAKE_SPACING
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
        assert postgres._feed.wake_spacing == pytest.approx(2 * 3 * QUEUE_BATCH_SECONDS)
        for name in "defghijk":  # a large pool: at most the longest claim window
            await postgres.beat(worker(name))
        watcher.claimed(1)
        await heart.beat()
        assert postgres._feed.wake_spacing == pytest.approx(QUEUE_BATCH_MAX_SECONDS)
        for name in "bcdefghijk":  # all the others stop: "me" is first, then alone
            await postgres.beat(worker(name, stopped=True))
        await postgres.beat(worker("z"))
        watcher.claimed(1)
        await heart.beat()
        assert (watcher.peers, watcher.primary) == (2, True)
        assert postgres._feed.wake_spacing == WAKE_SPACING
    postgres.space_wakes(0.0)  # never less than the reader's own spacing
    assert postgres._feed.wake_spacing == WAKE_SPACING


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
        assert postgres._feed.wake_spacing == WAKE_SPACING
    listed.append(worker("0"))  # a worker with a smaller id joins: both are secondaries
    primary.count_peers(listed, now)  # the other still asks for its pace among three
    assert postgres._feed.wake_spacing == pytest.approx(2 * 3 * QUEUE_BATCH_SECONDS)
    secondary.count_peers(listed, now)
    assert postgres._feed.wake_spacing == pytest.approx(QUEUE_BATCH_MAX_SECONDS)


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
