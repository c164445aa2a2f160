"""The optional listing capability (`ListableTaskStore`) of every store: list, page, purge.

Run against the memory, SQLite and Redis stores like the contract tests (Redis
skips loudly without a server, and fails when `CI=true`). The SQLite schema step
that adds the listing indexes is checked on a file written by the previous version.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import AsyncIterator
from contextlib import closing
from pathlib import Path

import pytest

from fastmcp_tasks import TaskRecord
from fastmcp_tasks.stores.listing import ListableTaskStore, page_key
from fastmcp_tasks.stores.redis import listing as redis_listing
from fastmcp_tasks.stores.sqlite import SQLiteTaskStore
from fastmcp_tasks.stores.sqlite.schema import (
    APPLICATION_ID,
    COLUMNS,
    MIGRATIONS,
    SCHEMA_VERSION,
    to_row,
)
from tests.test_store_contract import STORE_FACTORIES, record

pytestmark = pytest.mark.anyio

DAY = 86_400.0
WEEK_MS = 7 * 86_400_000


@pytest.fixture(params=sorted(STORE_FACTORIES))
async def store(request: pytest.FixtureRequest) -> AsyncIterator[ListableTaskStore]:
    instance = STORE_FACTORIES[request.param]()
    assert isinstance(instance, ListableTaskStore)
    await instance.open()
    try:
        yield instance
    finally:
        await instance.close()


def finished(status: str, *, ended: float, **fields: object) -> TaskRecord:
    """A task that ended at `ended` (created a minute before), kept for a week."""
    task = record(retention_ms=WEEK_MS, **fields)
    task.status = status  # type: ignore[assignment]
    task.created_at = task.updated_at = ended - 60
    task.terminal_at = ended
    task.arguments = None
    return task


def ids(records: list[TaskRecord]) -> list[str]:
    return [r.task_id for r in records]


async def test_lists_newest_first_filtered_by_status_and_owner(
    store: ListableTaskStore,
) -> None:
    now = time.time()
    old = finished("completed", ended=now - 2 * DAY, owner="alice")
    failed = finished("failed", ended=now - 100, owner="bob")
    working = record(owner="alice")
    asking = record(owner="bob")
    for task in (old, failed, working, asking):
        await store.create(task)
    await store.request_input(asking.task_id, {"q": {"method": "elicitation/create"}})

    everything = await store.list_tasks()
    assert ids(everything) == ids(sorted(everything, key=page_key, reverse=True))
    assert set(ids(everything)) == {old.task_id, failed.task_id, working.task_id, asking.task_id}
    assert ids(everything)[-2:] == [failed.task_id, old.task_id]  # oldest last

    active = await store.list_tasks(status=frozenset({"working", "input_required"}))
    assert set(ids(active)) == {working.task_id, asking.task_id}
    parked = await store.list_tasks(status=frozenset({"input_required"}))
    assert ids(parked) == [asking.task_id] and parked[0].input_requests is not None
    done = await store.list_tasks(status=frozenset({"completed", "failed"}))
    assert ids(done) == [failed.task_id, old.task_id]
    assert ids(await store.list_tasks(owner="alice")) == [working.task_id, old.task_id]
    alices_done = await store.list_tasks(status=frozenset({"completed"}), owner="alice")
    assert ids(alices_done) == [old.task_id]
    assert await store.list_tasks(status=frozenset({"cancelled"})) == []
    assert len(await store.list_tasks(limit=1)) == 1


async def test_pages_cover_every_task_once(
    store: ListableTaskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(redis_listing, "BATCH", 3)  # several index batches per page on Redis
    now = time.time()
    tasks = [record() for _ in range(8)]
    tasks += [finished("cancelled", ended=now - i) for i in range(7)]
    tasks[1].created_at = tasks[2].created_at = tasks[3].created_at  # ties broken by id
    for task in tasks:
        await store.create(task)
    seen: list[TaskRecord] = []
    before = None
    for _ in range(20):
        page = await store.list_tasks(limit=4, before=before)
        seen += page
        if len(page) < 4:
            break
        before = page_key(page[-1])
    assert sorted(ids(seen)) == sorted(ids(tasks))  # every task, none twice
    assert ids(seen) == ids(sorted(seen, key=page_key, reverse=True))


async def test_expired_tasks_are_not_listed(store: ListableTaskStore) -> None:
    gone, kept = record(retention_ms=0), record()
    await store.create(gone)
    await store.create(kept)
    await store.transition(gone.task_id, "completed", result={"content": []})
    assert ids(await store.list_tasks()) == [kept.task_id]


async def test_listing_checks_its_arguments(store: ListableTaskStore) -> None:
    with pytest.raises(ValueError, match="unknown task status"):
        await store.list_tasks(status=frozenset({"running"}))
    with pytest.raises(ValueError, match="limit"):
        await store.list_tasks(limit=0)


async def test_purge_removes_only_terminal_tasks_that_ended_before(
    store: ListableTaskStore,
) -> None:
    now = time.time()
    old = [finished(s, ended=now - 3 * DAY) for s in ("completed", "failed", "cancelled")]
    forever = finished("completed", ended=now - 3 * DAY)
    forever.retention_ms = None  # kept forever: still purged once old enough
    recent = finished("completed", ended=now - 60)
    stale_active = record()
    stale_active.created_at = now - 10 * DAY  # active tasks are never purged, however old
    for task in (*old, forever, recent, stale_active):
        await store.create(task)
    cutoff = now - DAY

    assert await store.purge_finished(cutoff, dry_run=True) == 4
    assert len(await store.list_tasks()) == 6  # a dry run deletes nothing
    assert await store.purge_finished(cutoff) == 4
    assert await store.purge_finished(cutoff) == 0
    for task in (*old, forever):
        assert await store.get(task.task_id) is None
    assert {r.task_id for r in await store.list_tasks()} == {recent.task_id, stale_active.task_id}
    assert await store.get(stale_active.task_id) is not None

    # a task that ends now is not purged by an earlier cutoff
    await store.transition(stale_active.task_id, "failed", error={"message": "x"})
    assert await store.purge_finished(cutoff) == 0
    assert await store.purge_finished(time.time() + 1) == 2


async def test_purge_leaves_the_indexes_consistent(store: ListableTaskStore) -> None:
    now = time.time()
    done = [finished("completed", ended=now - 3 * DAY) for _ in range(5)]
    for task in done:
        await store.create(task)
    assert await store.purge_finished(now) == 5
    if store.scheme == "redis":
        client = store._require()  # type: ignore[attr-defined]
        keys = store.keys  # type: ignore[attr-defined]
        assert await client.zcard(keys.terminal) == 0
        assert not await client.exists(*(keys.task(t.task_id) for t in done))
    if store.scheme == "sqlite":
        with closing(sqlite3.connect(store.path)) as conn:  # type: ignore[attr-defined]
            count = conn.execute("SELECT value FROM meta WHERE key = 'task_count'").fetchone()[0]
        assert count == 0
    for _ in range(5):  # the freed places count again under max_tasks
        await store.create(record())
    assert len(await store.list_tasks()) == 5


# --- SQLite: the schema step that adds the listing indexes ------------------------------


def write_v1_file(path: Path, task: TaskRecord) -> None:
    """A task store file as the previous schema version left it, holding one task."""
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        MIGRATIONS[0](conn)
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute("PRAGMA user_version = 1")
        conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', 1)")
        later = set(COLUMNS[COLUMNS.index("lease_expires") + 1 :])  # v1 ended there; v3-5 added
        row = dict(zip((*COLUMNS, "expires_at"), to_row(task), strict=True))
        v1 = {name: value for name, value in row.items() if name not in later}
        columns, values = ", ".join(v1), tuple(v1.values())
        marks = ", ".join("?" * len(values))
        conn.execute(f"INSERT INTO tasks ({columns}) VALUES ({marks})", values)
        conn.execute("UPDATE meta SET value = 1 WHERE key = 'task_count'")


async def test_a_version_1_file_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    old = finished("completed", ended=time.time() - 3 * DAY)
    write_v1_file(path, old)
    store = SQLiteTaskStore(path)
    await store.open()
    try:
        assert ids(await store.list_tasks()) == [old.task_id]
        assert await store.purge_finished(time.time() - DAY) == 1
        await store.create(record())
    finally:
        await store.close()
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        meta = dict(conn.execute("SELECT key, value FROM meta"))
        listing = "SELECT * FROM tasks WHERE (created_at, task_id) < (1, 'x') ORDER BY created_at"
        plan = str(conn.execute(f"EXPLAIN QUERY PLAN {listing}").fetchall())
        ended = "DELETE FROM tasks WHERE terminal_at < 1 AND status IN ('completed')"
        plan += str(conn.execute(f"EXPLAIN QUERY PLAN {ended}").fetchall())
    assert meta["schema_version"] == SCHEMA_VERSION and meta["task_count"] == 1
    assert "tasks_created" in plan and "tasks_ended" in plan
