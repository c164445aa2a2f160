"""Workers of one application share the claims of a busy queue (`engine.watcher`: peers).

On a store that wakes every worker for every new task (SQLite, PostgreSQL), each worker
would claim once per window and a pool of four would make four times the claim rounds
of one worker, each taking a quarter as much. The heartbeat counts the live workers of
the application once a worker claims; a busy worker's wake-up then waits its share of
the windows, jittered so that the pool's claims interleave. A quiet queue's first task
and a freed slot with tasks waiting are claimed after one window, as before.
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

from fastmcp_tasks.server.engine import watcher as watching
from fastmcp_tasks.server.engine.heartbeat import WorkerHeartbeat
from fastmcp_tasks.server.engine.watcher import (
    QUEUE_BATCH_MAX_SECONDS,
    QUEUE_BATCH_SECONDS,
    QUIET_SPELL,
    ChangeWatcher,
)
from fastmcp_tasks.stores.operations import WorkerInfo
from fastmcp_tasks.stores.postgres import PostgresTaskStore
from fastmcp_tasks.stores.postgres.feed import WAKE_SPACING
from fastmcp_tasks.stores.sqlite import SQLiteTaskStore
from tests.test_store_contract import postgres_store, redis_store

pytestmark = pytest.mark.anyio


class Clock:
    """`time.monotonic` as the test sets it."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    made = Clock()
    monkeypatch.setattr(watching.time, "monotonic", made)
    return made


def a_watcher(store: object = None, app: str | None = "shop") -> ChangeWatcher:
    return ChangeWatcher(SimpleNamespace(store=store, app=app))  # type: ignore[arg-type]


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


def test_a_lone_worker_claims_after_one_window(clock: Clock) -> None:
    watcher = a_watcher()
    for _ in range(5):
        clock.now += 0.005  # a busy queue
        assert watcher.gather_time() == QUEUE_BATCH_SECONDS


def test_busy_peers_wait_their_share_of_the_windows_jittered(clock: Clock) -> None:
    watcher = a_watcher()
    watcher.peers = 4
    assert watcher.gather_time() == QUEUE_BATCH_SECONDS  # the first after a quiet spell
    waits = []
    for _ in range(200):
        clock.now += 0.005
        waits.append(watcher.gather_time())
    share = 4 * QUEUE_BATCH_SECONDS
    assert all(0.5 * share <= w <= 1.5 * share for w in waits)
    assert min(waits) < 0.7 * share and max(waits) > 1.3 * share  # spread, not in step
    watcher.window = QUEUE_BATCH_MAX_SECONDS  # claims found nothing: capped, still jittered
    clock.now += 0.005
    assert watcher.gather_time() <= 1.5 * QUEUE_BATCH_MAX_SECONDS


def test_a_quiet_spell_or_a_backlog_claims_after_one_window(clock: Clock) -> None:
    watcher = a_watcher()
    watcher.peers = 4
    watcher.gather_time()
    clock.now += QUIET_SPELL  # nothing for a while: the next task is claimed at once
    assert watcher.gather_time() == QUEUE_BATCH_SECONDS
    clock.now += 0.005
    assert watcher.gather_time() > QUEUE_BATCH_SECONDS  # busy again
    watcher.more_queued = True  # the last claim filled the worker: tasks wait
    watcher.slot_freed()
    clock.now += 0.005
    assert watcher.gather_time() == QUEUE_BATCH_SECONDS
    clock.now += 0.005
    assert watcher.gather_time() > QUEUE_BATCH_SECONDS  # the backlog wake-up was one


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
    assert watcher.peers == 3
    watcher.count_peers([], now)  # a listing without itself (a store that lost it): one
    assert watcher.peers == 1


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


def beating(store: Any) -> tuple[WorkerHeartbeat, ChangeWatcher]:
    runner = SimpleNamespace(
        server=None, owner="me", app="shop", concurrency=4, running_now=0, store=store
    )
    runner.watcher = ChangeWatcher(runner)  # type: ignore[arg-type]
    return WorkerHeartbeat(runner, store), runner.watcher  # type: ignore[arg-type]


async def test_the_heartbeat_counts_peers_once_the_worker_claims(sqlite: SQLiteTaskStore) -> None:
    store = CountingStore(sqlite)
    with anyio.fail_after(10):
        for name in ("b", "c"):
            await sqlite.beat(worker(name))
        await sqlite.beat(worker("other", app="billing"))
        heart, watcher = beating(store)
        await heart.beat()
        assert (store.reads, watcher.peers) == (0, 1)  # idle: nothing read
        watcher.claimed(2)
        await heart.beat()
        assert (store.reads, watcher.peers) == (1, 3)
        await heart.beat()  # no claim since the count: nothing read
        assert store.reads == 1


async def test_the_first_claim_round_has_the_peers_counted_at_once(
    sqlite: SQLiteTaskStore,
) -> None:
    """A worker started with the others counts them at its first claim, not a beat later."""
    heart, watcher = beating(sqlite)
    heart.interval = 3_600.0
    await sqlite.beat(worker("b"))
    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(heart.wait)
            watcher.claimed(1)
        await heart.beat()
    assert watcher.peers == 2
    assert not watcher.first_claim.is_set()  # from now on, a beat every interval
    watcher.claimed(1)
    assert not watcher.first_claim.is_set()


async def test_postgres_wakes_a_worker_no_more_often_than_it_claims() -> None:
    """Every worker's LISTEN reader hears every new task: with peers it waits as long
    between two wake-ups as the runner between two claims (`space_wakes`)."""
    made = postgres_store()
    assert isinstance(made, PostgresTaskStore)
    await made.open()
    try:
        heart, watcher = beating(made)
        with anyio.fail_after(10):
            for name in ("b", "c"):
                await made.beat(worker(name))
            watcher.claimed(1)
            await heart.beat()
        assert watcher.peers == 3
        assert made._feed.wake_spacing == pytest.approx(3 * QUEUE_BATCH_SECONDS)
        made.space_wakes(0.0)  # never below the reader's own spacing
        assert made._feed.wake_spacing == WAKE_SPACING
    finally:
        await made.close()


async def test_a_store_that_shares_wake_ups_out_needs_no_peers() -> None:
    """Redis hands each wake-up to one worker (`stores.queue_wakes`): nothing to share."""
    made = redis_store()
    await made.open()
    try:
        store = CountingStore(made)
        heart, watcher = beating(store)
        with anyio.fail_after(10):
            watcher.claimed(2)
            await heart.beat()
        assert (store.reads, watcher.peers) == (0, 1)
        assert not watcher.first_claim.is_set()  # nothing to count: the beat keeps its pace
    finally:
        await made.close()
