"""The PostgreSQL store's operator records (`postgres.operations`) beyond the contract.

The migration of a version-2 schema (tasks kept; the tables, trigger and function a new
schema gets; histories of migrated tasks removed with them), and the row locks that
make the records race-free between processes, each race staged with a transaction left
open on a connection of the test's own: an append to a history neither holds back a
claim of the task nor outlives a delete of it (in either order), and a hold racing a
`resume` never leaves a task held for a pause that is gone (in either order). And a
plan: the append finds its tasks by primary key even under a generic plan the server
cached while the table was small. Each test uses a fresh schema and drops it; without a
server at `POSTGRES_URL` they skip (fail when `CI=true`).
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import anyio
import psycopg
import pytest

from fastmcp_tasks.stores.operations import PAUSED_UNTIL, Pause, TaskEvent
from fastmcp_tasks.stores.postgres import PostgresTaskStore
from fastmcp_tasks.stores.postgres.quiet_readers import UPGRADE_GRACE
from fastmcp_tasks.stores.postgres.schema import (
    COLUMNS,
    JSON_COLUMNS,
    MIGRATIONS,
    SCHEMA_VERSION,
    to_params,
)
from tests.test_store_contract import POSTGRES_URL, drop_schema, postgres_store, record

pytestmark = pytest.mark.anyio

WAIT = 10.0
#: How long a statement is given to show that it waits for a lock.
BLOCKED = 0.5


def fresh_schema() -> str:
    return f"test_{uuid.uuid4().hex[:16]}"


@pytest.fixture
async def store() -> AsyncIterator[PostgresTaskStore]:
    instance = postgres_store()
    assert isinstance(instance, PostgresTaskStore)
    await instance.open()
    try:
        yield instance
    finally:
        await instance.close()


@pytest.fixture
async def other() -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """A connection of the test's own, its transaction left open until it commits."""
    conn = await psycopg.AsyncConnection.connect(POSTGRES_URL)
    try:
        yield conn
    finally:
        await conn.close()


async def scalar(query: str, *params: Any) -> Any:
    async with await psycopg.AsyncConnection.connect(POSTGRES_URL, autocommit=True) as conn:
        cur = await conn.execute(query, params or None)
        row = await cur.fetchone()
        return None if row is None else row[0]


async def layout(schema: str) -> set[tuple[str, str]]:
    """The schema's tables, indexes, sequences, functions and triggers, by kind and name."""
    query = """
SELECT c.relkind::text, c.relname FROM pg_class c
    JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %(s)s
UNION ALL SELECT 'function', p.proname FROM pg_proc p
    JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = %(s)s
UNION ALL SELECT 'trigger', t.tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
    JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %(s)s
    AND NOT t.tgisinternal"""
    async with await psycopg.AsyncConnection.connect(POSTGRES_URL, autocommit=True) as conn:
        cur = await conn.execute(query, {"s": schema})
        return {(str(kind), str(name)) for kind, name in await cur.fetchall()}


async def test_a_version_2_schema_is_migrated_keeping_its_tasks() -> None:
    schema = fresh_schema()
    assert SCHEMA_VERSION == 5 and sorted(MIGRATIONS) == [0, 1, 2, 3, 4]
    kept, ended = record(), record()
    async with await psycopg.AsyncConnection.connect(POSTGRES_URL, autocommit=True) as conn:
        await conn.execute(f"CREATE SCHEMA {schema}")
        for step in (0, 1):
            for statement in MIGRATIONS[step]:
                await conn.execute(statement.format(s=schema))
        await conn.execute(f"INSERT INTO {schema}.meta VALUES ('schema_version', '2')")
        names = (*COLUMNS, "expires_at")
        marks = ", ".join("%s::json" if name in JSON_COLUMNS else "%s" for name in names)
        for task in (kept, ended):
            query = f"INSERT INTO {schema}.tasks ({', '.join(names)}) VALUES ({marks})"
            await conn.execute(query, to_params(task))
    store = PostgresTaskStore(POSTGRES_URL, schema=schema)
    try:
        await store.open()
        got = await store.get(kept.task_id)
        assert got is not None and got.arguments == kept.arguments
        now = time.time()
        await store.add_events([(t.task_id, TaskEvent(now, "created")) for t in (kept, ended)])
        assert [e.kind for e in await store.events(kept.task_id)] == ["created"]
        await store.transition(ended.task_id, "cancelled")
        assert await store.delete_finished([ended.task_id]) == 1
        assert await store.pause(Pause("", "tool", now, "cli"))
        await store.close()
        count = f"SELECT count(*) FROM {schema}.task_events"
        assert await scalar(count) == 1  # the deleted task's history went with it
        version = f"SELECT value FROM {schema}.meta WHERE key = 'schema_version'"
        assert await scalar(version) == str(SCHEMA_VERSION)
        # older readers may still run: every change notifies them for the upgrade's grace
        grace = f"SELECT until - extract(epoch FROM now()) FROM {schema}.quiet_readers"
        assert UPGRADE_GRACE - 60 < await scalar(grace) <= UPGRADE_GRACE
    finally:
        await store.close()
        drop_schema(schema)


async def test_a_migrated_schema_has_what_a_new_one_has() -> None:
    old, new = fresh_schema(), fresh_schema()
    try:
        async with await psycopg.AsyncConnection.connect(POSTGRES_URL, autocommit=True) as conn:
            await conn.execute(f"CREATE SCHEMA {old}")
            for step in (0, 1):
                for statement in MIGRATIONS[step]:
                    await conn.execute(statement.format(s=old))
            await conn.execute(f"INSERT INTO {old}.meta VALUES ('schema_version', '2')")
        for schema in (old, new):
            store = PostgresTaskStore(POSTGRES_URL, schema=schema)
            await store.open()
            await store.close()
        found = await layout(old)
        assert found == await layout(new)
        assert {("r", "task_events"), ("r", "workers"), ("r", "pauses"), ("r", "audit")} <= found
        assert {("trigger", "tasks_forget_events"), ("function", "forget_events")} <= found
        assert {("r", "steps"), ("trigger", "tasks_forget_steps")} <= found  # version 4
        assert ("r", "quiet_readers") in found  # version 5
        assert await scalar(f"SELECT count(*) FROM {new}.quiet_readers") == 0  # no grace
    finally:
        drop_schema(old)
        drop_schema(new)


# --- races, staged with a transaction left open ---------------------------------------------


async def test_an_append_neither_holds_back_a_claim_nor_outlives_a_delete(
    store: PostgresTaskStore, other: psycopg.AsyncConnection[Any]
) -> None:
    task = record(retention_ms=0)
    await store.create(task)
    params = {"ids": [task.task_id], "ats": [1.0], "kinds": ["created"], "details": ["{}"]}
    await other.execute(store.ops_sql.add_events, {**params, "now": time.time()})  # open
    with anyio.fail_after(BLOCKED):  # FOR KEY SHARE: not skipped, not waited for
        taken = await store.claim_queued("w", time.time() + 60, 10)
    assert [r.task_id for r in taken] == [task.task_id]
    await store.transition(task.task_id, "completed", result={"content": []})
    async with anyio.create_task_group() as group:
        purged: list[int] = []

        async def purge() -> None:
            purged.append(await store.purge_expired(time.time() + 1))

        group.start_soon(purge)
        await anyio.sleep(BLOCKED)
        assert purged == []  # the delete waits for the append
        await other.commit()
    assert purged == [1]
    assert await scalar(f"SELECT count(*) FROM {store.schema}.task_events") == 0


async def test_an_append_that_waited_for_a_delete_stores_nothing(
    store: PostgresTaskStore, other: psycopg.AsyncConnection[Any]
) -> None:
    task = record()
    await store.create(task)
    await store.transition(task.task_id, "cancelled")
    await other.execute(f"DELETE FROM {store.schema}.tasks WHERE task_id = %s", (task.task_id,))
    async with anyio.create_task_group() as group:
        done = anyio.Event()

        async def append() -> None:
            await store.add_events([(task.task_id, TaskEvent(time.time(), "finished"))])
            done.set()

        group.start_soon(append)
        await anyio.sleep(BLOCKED)
        assert not done.is_set()  # waits for the delete's row lock
        await other.commit()
    assert await scalar(f"SELECT count(*) FROM {store.schema}.task_events") == 0
    await store.create(dataclasses.replace(record(), task_id=task.task_id))  # the id reused
    assert await store.events(task.task_id) == []


async def test_a_hold_committing_before_a_resume_is_released_by_it(
    store: PostgresTaskStore, other: psycopg.AsyncConnection[Any]
) -> None:
    task = record(app="app")
    await store.create(task)
    await store.claim_queued("w1", time.time() + 60, 10)
    await store.pause(Pause("app", "tool", time.time(), "cli"))
    params = {"id": task.task_id, "owner": "w1", "message": "Paused", "held": PAUSED_UNTIL}
    await other.execute(store.ops_sql.hold, {**params, "now": time.time()})  # locks the pause
    async with anyio.create_task_group() as group:
        released: list[int | None] = []

        async def resume() -> None:
            released.append(await store.resume("app", "tool"))

        group.start_soon(resume)
        await anyio.sleep(BLOCKED)
        assert released == []  # the pause's DELETE waits for the hold
        await other.commit()
    assert released == [1]
    got = await store.get(task.task_id)
    assert got is not None and got.not_before is None and got.lease_owner is None
    (again,) = await store.claim_queued("w2", time.time() + 60, 10)
    assert again.task_id == task.task_id


async def test_a_hold_after_a_resume_holds_nothing(
    store: PostgresTaskStore, other: psycopg.AsyncConnection[Any]
) -> None:
    task = record(app="app")
    await store.create(task)
    await store.claim_queued("w1", time.time() + 60, 10)
    await store.pause(Pause("app", "tool", time.time(), "cli"))
    await other.execute(f"DELETE FROM {store.schema}.pauses")  # a resume, not committed
    async with anyio.create_task_group() as group:
        held: list[object] = []

        async def hold() -> None:
            held.append(await store.hold_paused(task.task_id, "w1", "Paused"))

        group.start_soon(hold)
        await anyio.sleep(BLOCKED)
        assert held == []  # waits for the pause's row
        await other.commit()
    assert held == [None]
    got = await store.get(task.task_id)
    assert got is not None and got.lease_owner == "w1" and got.not_before is None


# --- plans ---------------------------------------------------------------------------------


#: The typed parameters, in order, of the statements whose plans are checked.
TYPES = {"ids": "text[]", "ats": "float8[]", "kinds": "text[]", "details": "text[]"}


async def plan_after_growth(store: PostgresTaskStore, statement: str, **params: Any) -> str:
    """The plan `statement` runs with once the table grew from one task to 3,001: prepared
    and run once with a generic plan while the table held one task (the plan a connection
    keeps until the table is analyzed again), then the table grown, autovacuum off."""
    placeholders = {f"%({name}){form}": name for name in (*TYPES, "now") for form in "sb"}
    names = list(dict.fromkeys(name for mark, name in placeholders.items() if mark in statement))
    for n, name in enumerate(names, 1):  # a list goes in binary (`%(ids)b`), a float as text
        statement = statement.replace(f"%({name})s", f"${n}").replace(f"%({name})b", f"${n}")
    assert "%(" not in statement
    types = [TYPES.get(name, "float8") for name in names]
    run = f"EXECUTE checked({', '.join(f'%s::{kind}' for kind in types)})"
    values = [params[name] for name in names]
    tasks = f"{store.schema}.tasks"
    connect = psycopg.AsyncConnection.connect  # client-side binding: PREPARE takes `$n`
    async with await connect(
        POSTGRES_URL, autocommit=True, cursor_factory=psycopg.AsyncClientCursor
    ) as conn:
        await conn.execute(f"ALTER TABLE {tasks} SET (autovacuum_enabled = false)")
        await conn.execute("SET plan_cache_mode = force_generic_plan")
        await conn.execute(f"PREPARE checked({', '.join(types)}) AS {statement}")
        await conn.execute(run, values)  # the generic plan, made for a one-task table
        copied = ", ".join(c for c in COLUMNS if c != "task_id")
        await conn.execute(
            f"INSERT INTO {tasks} (task_id, {copied}) SELECT task_id || '-' || g, {copied} "
            f"FROM {tasks}, generate_series(1, 3000) AS g WHERE task_id = %s",
            (params["ids"][0],),
        )
        cur = await conn.execute(f"EXPLAIN {run}", values)
        return "\n".join(str(row[0]) for row in await cur.fetchall())


async def test_an_append_finds_its_tasks_by_key_under_a_plan_made_while_the_table_was_small(
    store: PostgresTaskStore,
) -> None:
    """The plan of an append made when the store held a few tasks must not scan the table
    for every batch once it holds thousands (the history is written every fraction of a
    second by every process)."""
    first = record()
    await store.create(first)
    plan = await plan_after_growth(
        store,
        store.ops_sql.add_events,
        ids=[first.task_id],
        ats=[1.0],
        kinds=["created"],
        details=["{}"],
        now=time.time(),
    )
    assert "tasks_pkey" in plan, plan
    assert "Seq Scan on tasks" not in plan, plan
    assert await store.events(first.task_id) == [TaskEvent(1.0, "created", {})]  # EXECUTEd once


async def test_get_many_finds_its_tasks_by_key_under_a_plan_made_while_the_table_was_small(
    store: PostgresTaskStore,
) -> None:
    """`subscriptions/listen` reads each batch of changed tasks with `get_many`."""
    first = record()
    await store.create(first)
    plan = await plan_after_growth(store, store.get_many_sql, ids=[first.task_id], now=time.time())
    assert "tasks_pkey" in plan, plan
    assert "Seq Scan on tasks" not in plan, plan
    copies = [f"{first.task_id}-{n}" for n in (1, 2999)]
    found = await store.get_many([first.task_id, *copies, first.task_id, "no-such-task"])
    assert sorted(found) == sorted([first.task_id, *copies])
    assert found[copies[1]].tool == first.tool
