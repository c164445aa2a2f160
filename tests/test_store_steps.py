"""The durable steps (`stores.steps`) of the durable stores, beyond the contract.

`StepsContract` (in `test_store_contract`) checks what every store answers through its
own methods; these look at the raw storage with a client of the test's own (SQLite:
the `steps` table; PostgreSQL: the schema's `steps` table; Redis: a SCAN of the
prefix's step keys) and find no step left once its task is deleted, whatever deletes
it (the expiry sweep, `purge_finished`, `delete_finished`, the `max_tasks` sweep of a
create); that Redis gives a task's step keys its TTL when it ends; and that two store
instances on one file, schema or prefix (as two processes) saving at once never pass
the count bound. Each test has its own file, schema or prefix.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import AsyncIterator
from contextlib import closing
from pathlib import Path

import anyio
import pytest

from fastmcp_tasks import TaskStore
from fastmcp_tasks.errors import StepLimitExceeded
from fastmcp_tasks.stores import steps as limits
from fastmcp_tasks.stores.sqlite import SQLiteTaskStore
from fastmcp_tasks.stores.steps import StepStore
from tests.test_store_contract import POSTGRES_URL, REDIS_URL, postgres_store, record, redis_store
from tests.test_store_flow import twin_of

pytestmark = pytest.mark.anyio

BACKENDS = ["postgres", "redis", "sqlite"]


def make_store(backend: str, tmp_path: Path, **options: object) -> TaskStore:
    if backend == "sqlite":
        return SQLiteTaskStore(tmp_path / "tasks.db", **options)  # type: ignore[arg-type]
    if backend == "redis":
        return redis_store(**options)
    return postgres_store(**options)


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[TaskStore]:
    instance = make_store(request.param, tmp_path, max_tasks=4)
    await instance.open()
    try:
        yield instance
    finally:
        await instance.close()


def stepped(store: TaskStore) -> StepStore:
    assert isinstance(store, StepStore)
    return store


def stored_steps(store: TaskStore) -> int:
    """The steps left in the store's raw storage, counted over a client of the test's own
    (Redis: the entries of every step list under the prefix, plus any stray names hash)."""
    if isinstance(store, SQLiteTaskStore):
        with closing(sqlite3.connect(store.path)) as conn:
            return int(conn.execute("SELECT count(*) FROM steps").fetchone()[0])
    if getattr(store, "scheme", None) == "redis":
        import redis

        keys = store.keys  # type: ignore[attr-defined]
        with closing(redis.Redis.from_url(REDIS_URL, decode_responses=True)) as client:
            lists = list(client.scan_iter(match=keys.steps("*")))
            names = list(client.scan_iter(match=keys.step_names("*")))
            return sum(int(client.llen(key)) for key in lists) + len(names) - len(lists)
    import psycopg

    schema = store.schema  # type: ignore[attr-defined]
    with psycopg.connect(POSTGRES_URL) as conn:
        row = conn.execute(f"SELECT count(*) FROM {schema}.steps").fetchone()
        assert row is not None
        return int(row[0])


async def with_steps(store: TaskStore, count: int, **fields: object) -> str:
    task = record(**fields)  # type: ignore[arg-type]
    await store.create(task)
    for i in range(count):
        assert await stepped(store).save_step(task.task_id, f"s{i}", f'"é{i}"', time.time())
    return task.task_id


async def ended_with_steps(store: TaskStore, count: int, **fields: object) -> str:
    task_id = await with_steps(store, count, **fields)
    await store.transition(task_id, "completed", result={"content": []})
    return task_id


async def test_steps_leave_the_storage_whatever_deletes_their_task(store: TaskStore) -> None:
    live = await with_steps(store, 2)
    await ended_with_steps(store, 3, retention_ms=1000)  # ended, not expired yet
    assert stored_steps(store) == 5
    assert await store.purge_expired(time.time() + 2) == 1  # the expiry sweep
    assert stored_steps(store) == 2
    await ended_with_steps(store, 2)
    assert await store.purge_finished(time.time() + 1) == 1  # type: ignore[attr-defined]
    assert stored_steps(store) == 2
    chosen = await ended_with_steps(store, 2)
    assert await store.delete_finished([chosen]) == 1  # type: ignore[attr-defined]
    assert stored_steps(store) == 2
    assert [s.name for s in await stepped(store).steps(live)] == ["s0", "s1"]


async def test_steps_leave_with_tasks_the_max_tasks_sweep_removes(store: TaskStore) -> None:
    live = await with_steps(store, 1)
    for _ in range(3):  # max_tasks = 4: the store is full
        await ended_with_steps(store, 2, retention_ms=0)
    await store.create(record())  # sweeps the expired ones to make room
    assert stored_steps(store) == 1
    assert len(await stepped(store).steps(live)) == 1


async def test_redis_step_keys_take_their_task_ttl(tmp_path: Path) -> None:
    store = make_store("redis", tmp_path)
    await store.open()
    try:
        task_id = await ended_with_steps(store, 2, retention_ms=60_000)
        keys = store.keys  # type: ignore[attr-defined]
        import redis.asyncio as aioredis

        async with aioredis.Redis.from_url(REDIS_URL) as client:
            for key in (keys.steps(task_id), keys.step_names(task_id)):
                assert 0 < await client.pttl(key) <= 60_000
    finally:
        await store.close()


async def test_two_instances_saving_at_once_never_pass_the_count_bound(
    store: TaskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "MAX_STEPS", 5)
    twin = twin_of(store)
    await twin.open()
    try:
        task_id = await with_steps(store, 3)
        saved: list[str] = []

        async def save(on: TaskStore, name: str) -> None:
            try:
                assert await stepped(on).save_step(task_id, name, "1", time.time())
            except StepLimitExceeded:
                return
            saved.append(name)

        async with anyio.create_task_group() as group:
            for i in range(8):
                group.start_soon(save, store, f"a{i}")
                group.start_soon(save, twin, f"b{i}")
        assert len(saved) == 2
        assert stored_steps(store) == 5
        names = [s.name for s in await stepped(twin).steps(task_id)]
        assert names[:3] == ["s0", "s1", "s2"] and sorted(names[3:]) == sorted(saved)
    finally:
        await twin.close()
