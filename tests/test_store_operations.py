"""The operator records (`stores.operations`) of the SQL stores, beyond the contract.

`OperationsContract` (in `test_store_contract`) checks what every store answers; these
check what only a shared SQL store has: a deleted task's history leaves the table
whatever deletes the task (the expiry sweep, `purge_finished`, `delete_finished`, the
`max_tasks` sweep of a create), read with a plain connection; two store instances on
one SQLite file or PostgreSQL schema (as two processes) sharing pauses, workers,
histories and the audit log, one holding a task and the other releasing it; a task
held in a gate freeing its slot (with a `queued` change for the gate, as
`retry_later`); and the SQL bound of a history choosing exactly what the memory
store's `keeps_event` loop chooses, batches of several tasks included.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from contextlib import closing
from pathlib import Path

import anyio
import pytest

from fastmcp_tasks import MemoryTaskStore, TaskStore
from fastmcp_tasks.stores.base import TaskChange
from fastmcp_tasks.stores.operations import (
    MAX_EVENTS,
    PAUSED_UNTIL,
    AuditEntry,
    OperableTaskStore,
    Pause,
    TaskEvent,
    WorkerInfo,
)
from fastmcp_tasks.stores.sqlite import SQLiteTaskStore
from tests.test_store_contract import POSTGRES_URL, postgres_store, record
from tests.test_store_flow import twin_of

pytestmark = pytest.mark.anyio

BACKENDS = ["postgres", "sqlite"]
WAIT = 10.0


def make_store(backend: str, tmp_path: Path, **options: object) -> TaskStore:
    if backend == "sqlite":
        return SQLiteTaskStore(tmp_path / "tasks.db", **options)  # type: ignore[arg-type]
    return postgres_store(**options)


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[TaskStore]:
    instance = make_store(request.param, tmp_path, max_tasks=4)
    await instance.open()
    try:
        yield instance
    finally:
        await instance.close()


@pytest.fixture
async def twin(store: TaskStore) -> AsyncIterator[TaskStore]:
    other = twin_of(store)
    await other.open()
    try:
        yield other
    finally:
        await other.close()


def ops(store: TaskStore) -> OperableTaskStore:
    assert isinstance(store, OperableTaskStore)
    return store


def stored_events(store: TaskStore) -> int:
    """The rows of `task_events`, counted over a connection of the test's own."""
    if isinstance(store, SQLiteTaskStore):
        with closing(sqlite3.connect(store.path)) as conn:
            return int(conn.execute("SELECT count(*) FROM task_events").fetchone()[0])
    import psycopg

    schema = store.schema  # type: ignore[attr-defined]
    with psycopg.connect(POSTGRES_URL) as conn:
        row = conn.execute(f"SELECT count(*) FROM {schema}.task_events").fetchone()
        assert row is not None
        return int(row[0])


async def ended_with_history(store: TaskStore, events: int, **fields: object) -> str:
    task = record(**fields)  # type: ignore[arg-type]
    await store.create(task)
    now = time.time()
    await ops(store).add_events(
        [(task.task_id, TaskEvent(now + i / 1000, "message", {"i": i})) for i in range(events)]
    )
    await store.transition(task.task_id, "completed", result={"content": []})
    return task.task_id


async def next_change(feed: AsyncIterator[TaskChange], task_id: str) -> TaskChange:
    with anyio.fail_after(WAIT):
        async for change in feed:
            if change.task_id == task_id:
                return change
    raise AssertionError("the feed ended")


# --- histories leave with their tasks ----------------------------------------------------


async def test_histories_leave_the_table_whatever_deletes_their_task(store: TaskStore) -> None:
    live = record()
    await store.create(live)
    await ops(store).add_events([(live.task_id, TaskEvent(time.time(), "created"))])
    await ended_with_history(store, 3, retention_ms=0)  # expired, not swept yet
    assert stored_events(store) == 4
    assert await store.purge_expired(time.time() + 1) == 1
    assert stored_events(store) == 1
    await ended_with_history(store, 2)
    assert await store.purge_finished(time.time() + 1) == 1  # type: ignore[attr-defined]
    chosen = await ended_with_history(store, 2)
    assert await ops(store).delete_finished([chosen, live.task_id]) == 1
    assert stored_events(store) == 1
    for _ in range(3):  # max_tasks is 4: the next create sweeps these expired ones
        await ended_with_history(store, 5, retention_ms=0)
    assert stored_events(store) == 16
    await store.create(record())
    assert stored_events(store) == 1
    assert [e.kind for e in await ops(store).events(live.task_id)] == ["created"]


# --- two instances, as two processes ------------------------------------------------------


async def test_two_instances_share_pauses_workers_histories_and_audit(
    store: TaskStore, twin: TaskStore
) -> None:
    a, b = ops(store), ops(twin)
    now = time.time()
    assert await a.pause(Pause("app", "tool", now, "cli"))
    assert not await b.pause(Pause("app", "tool", now, "dashboard"))
    assert [(p.app, p.tool, p.by) for p in await b.paused()] == [("app", "tool", "cli")]
    worker = WorkerInfo("host:1:x", "app", "host", 1, "1.0", 4, ("tool",), 1, now - 5, now, 5.0)
    await a.beat(worker)
    assert await b.workers() == [worker]
    await b.add_audit(AuditEntry(now, "cli", "pause", 1, {"tool": "tool"}))
    assert [(e.actor, e.action, e.details) for e in await a.audit()] == [
        ("cli", "pause", {"tool": "tool"})
    ]
    task = record(app="app")
    await a.create(task)
    await b.add_events([(task.task_id, TaskEvent(now, "created", {"by": "b"}))])
    assert [e.details for e in await a.events(task.task_id)] == [{"by": "b"}]
    (taken,) = await b.claim_queued("w1", now + 60, 10)
    held = await b.hold_paused(taken.task_id, "w1", "Paused")
    assert held is not None and held.lease_owner is None
    assert await a.claim_queued("w2", time.time() + 60, 10) == []
    async with b.changes(kinds=frozenset({"queued"})) as feed:
        assert await a.resume("app", "tool") == 1  # released for both
        change = await next_change(feed, task.task_id)
    assert change.details == {"app": "app"}
    assert await b.paused() == []
    (again,) = await b.claim_queued("w2", time.time() + 60, 10)
    assert again.task_id == task.task_id and again.lease_owner == "w2"


# --- gates ----------------------------------------------------------------------------------


async def test_a_held_task_frees_its_gate_slot(store: TaskStore) -> None:
    first = record(app="app", tool="paused", gate="g", gate_limit=1)
    second = record(app="app", tool="other", gate="g", gate_limit=1)
    await store.create(first)
    await store.create(second)
    later = time.time() + 60
    assert [r.task_id for r in await store.claim_queued("w1", later, 10)] == [first.task_id]
    assert await store.claim_queued("w2", later, 10) == []  # the gate is full
    await ops(store).pause(Pause("app", "paused", time.time(), "cli"))
    async with store.changes(kinds=frozenset({"queued"})) as feed:
        held = await ops(store).hold_paused(first.task_id, "w1", "Paused")
        change = await next_change(feed, first.task_id)
    assert held is not None and held.phase == "restart" and held.not_before == PAUSED_UNTIL
    assert change.details == {"app": "app", "gate": "g"}  # as `retry_later`: waiters claim
    assert [r.task_id for r in await store.claim_queued("w2", later, 10)] == [second.task_id]
    assert await ops(store).resume("app", "paused") == 1
    assert await store.claim_queued("w3", later, 10) == []  # released, but the gate is full
    await store.transition(second.task_id, "completed", result={"content": []})
    (again,) = await store.claim_queued("w3", later, 10)
    assert again.task_id == first.task_id and again.not_before is None


# --- the bound of a history -----------------------------------------------------------------


def batches(a: str, b: str) -> list[list[tuple[str, str]]]:
    """Batches of `(task, kind)` around the bound: several tasks in one batch, the end
    arriving within a batch, twice, and after the history is full."""
    chatty = [(a, "message")] * (MAX_EVENTS - 3) + [(b, "message")] * 4
    edge = [(a, "message"), (b, "finished"), (a, "message"), (a, "message"), (a, "finished")]
    late = [(a, "finished"), (a, "message"), (b, "message")] + [(b, "message")] * MAX_EVENTS
    return [chatty, edge, [(a, "finished")], late, [(b, "finished"), (b, "finished")]]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_the_sql_bound_keeps_what_keeps_event_keeps(backend: str, tmp_path: Path) -> None:
    stores: list[Callable[[], TaskStore]] = [
        MemoryTaskStore,
        lambda: make_store(backend, tmp_path),
    ]
    kept: list[list[list[tuple[str, int]]]] = []
    for factory in stores:
        store = factory()
        await store.open()
        try:
            a, b = record(), record()
            await store.create(a)
            await store.create(b)
            step = 0
            for batch in batches(a.task_id, b.task_id):
                events = []
                for task_id, kind in batch:
                    step += 1
                    events.append((task_id, TaskEvent(float(step), kind, {"n": step})))
                await ops(store).add_events(events)
            kept.append(
                [
                    [(e.kind, e.details["n"]) for e in await ops(store).events(task.task_id)]
                    for task in (a, b)
                ]
            )
        finally:
            await store.close()
    reference, got = kept
    assert [len(history) for history in reference] == [MAX_EVENTS, MAX_EVENTS]
    assert got == reference
