"""SQLite's and Redis's ungated `claim_queued` begin each task's run, as PostgreSQL's does.

The contract (`testing.phases`) accepts a claim that leaves the run waiting (the memory
store's); these stores begin it in the claim itself (`stores.phases`): `phase` running,
one more attempt, the waiting message cleared with one `message` change, unless the
task waits to restart. A gated task's run is never begun by the claim.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from fastmcp_tasks.stores.base import TaskChange, TaskStore
from fastmcp_tasks.stores.sqlite import SQLiteTaskStore
from tests.test_store_contract import record, redis_store

pytestmark = pytest.mark.anyio

WAITING = "Queued: waiting for a free worker slot"
RESTART = "Restarted after an interruption (attempt 2)"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=["sqlite", "redis"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[TaskStore]:
    if request.param == "sqlite":
        instance: TaskStore = SQLiteTaskStore(tmp_path / "claims.db")
    else:
        instance = redis_store()  # its own prefix, deleted on close
    await instance.open()
    try:
        yield instance
    finally:
        await instance.close()


async def _kinds_until(feed: AsyncIterator[TaskChange], sentinel: str) -> list[TaskChange]:
    """The changes before the `cancel_requested` of `sentinel` (written after the claim)."""
    seen: list[TaskChange] = []
    with anyio.fail_after(5):
        async for change in feed:
            if change.task_id == sentinel and change.kind == "cancel_requested":
                return seen
            seen.append(change)
    raise AssertionError("feed ended")


async def test_the_claim_begins_each_ungated_run(store: TaskStore) -> None:
    before = time.time() - 100
    queued = record(phase="queued", status_message=WAITING, updated_at=before)
    retry = record(phase="retry", retries=1, status_message="Retrying", updated_at=before)
    restart = record(phase="restart", attempts=1, status_message=RESTART, updated_at=before)
    legacy = record(updated_at=before)  # no phase (before phases), no message
    sentinel = record(phase="running", attempts=1, lease_owner="elsewhere")
    tasks = (queued, retry, restart, legacy)
    for task in (*tasks, sentinel):
        await store.create(task)
    ids = frozenset(task.task_id for task in (*tasks, sentinel))
    async with store.changes(ids) as feed:
        taken = {r.task_id: r for r in await store.claim_queued("w", time.time() + 60, 10)}
        await store.request_cancel(sentinel.task_id)
        changes = await _kinds_until(feed, sentinel.task_id)
    assert taken.keys() == {task.task_id for task in tasks}
    expected = {
        queued.task_id: (1, None),
        retry.task_id: (1, None),
        restart.task_id: (2, RESTART),
        legacy.task_id: (1, None),
    }
    for task_id, (attempts, message) in expected.items():
        for got in (taken[task_id], await store.get(task_id)):
            assert got is not None and got.lease_owner == "w"
            assert (got.phase, got.attempts, got.status_message) == ("running", attempts, message)
    for task in (queued, retry):  # a message cleared: `updated_at` moves
        stored = await store.get(task.task_id)
        assert stored is not None and stored.updated_at > before + 50
    for task in (restart, legacy):  # nothing shown changed
        stored = await store.get(task.task_id)
        assert stored is not None and stored.updated_at == pytest.approx(before)
    messages = sorted(c.task_id for c in changes if c.kind == "message")
    assert messages == sorted([queued.task_id, retry.task_id])  # one each, none for the others
    assert all(c.status == "working" for c in changes if c.kind == "message")


async def test_a_claim_through_the_gates_begins_only_the_ungated_runs(store: TaskStore) -> None:
    gated = record(phase="queued", gate="deploy", gate_limit=1, status_message=WAITING)
    free = record(phase="queued", status_message=WAITING)
    for task in (gated, free):
        await store.create(task)
    taken = {r.task_id: r for r in await store.claim_queued("w", time.time() + 60, 5)}
    assert taken.keys() == {gated.task_id, free.task_id}
    assert (taken[gated.task_id].phase, taken[gated.task_id].attempts) == ("queued", 0)
    assert taken[gated.task_id].status_message == WAITING
    assert (taken[free.task_id].phase, taken[free.task_id].attempts) == ("running", 1)
    assert taken[free.task_id].status_message is None


async def test_one_applications_claim_begins_its_runs(store: TaskStore) -> None:
    mine = record(phase="queued", app="a", status_message=WAITING)
    theirs = record(phase="queued", app="b", status_message=WAITING)
    for task in (mine, theirs):
        await store.create(task)
    (taken,) = await store.claim_queued("w", time.time() + 60, 5, app="a")
    assert taken.task_id == mine.task_id
    assert (taken.phase, taken.attempts, taken.status_message) == ("running", 1, None)
    other = await store.get(theirs.task_id)
    assert other is not None and (other.phase, other.attempts) == ("queued", 0)
    assert other.lease_owner is None and other.status_message == WAITING


async def test_an_unleased_running_task_gets_no_other_attempt(store: TaskStore) -> None:
    """A task whose phase already says `running` is leased as it is (`rules.begin`)."""
    task = record(phase="running", attempts=1, status_message="Working on it")
    await store.create(task)
    (taken,) = await store.claim_queued("w", time.time() + 60, 5)
    assert (taken.phase, taken.attempts, taken.status_message) == ("running", 1, "Working on it")
    stored = await store.get(task.task_id)
    assert stored is not None and (stored.attempts, stored.lease_owner) == (1, "w")
