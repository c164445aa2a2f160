"""The PostgreSQL store on a real server: what only a shared SQL backend has.

The shared contract (`test_store_contract`, `test_store_flow`, `test_store_listing`,
`test_store_text`) runs on PostgreSQL too; these cover the rest: the schema marker
(a foreign or newer schema is refused and left untouched), two store instances (two
pools, as two processes have) racing on one schema (caps, dedupe, a gate's limit, a
transition; a cancel or message racing the end of a task), the change feed across
instances, through a killed LISTEN connection and around a transaction that commits
late or rolls back, idleness (no statement while nothing happens), URLs and outages
(the server going away and back: `test_postgres_outages`). Each test uses fresh
random schemas and drops them. Without a server at `POSTGRES_URL` they skip (fail
when `CI=true`).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import anyio
import psycopg
import pytest

from fastmcp_tasks.errors import ConfigurationError, StoreError, TaskLimitExceeded
from fastmcp_tasks.stores import store_from_url
from fastmcp_tasks.stores.base import ActiveCaps, TaskChange
from fastmcp_tasks.stores.postgres import PostgresTaskStore
from fastmcp_tasks.stores.postgres.schema import SCHEMA_VERSION
from tests.test_store_contract import (
    POSTGRES_URL,
    drop_schema,
    postgres_available,
    postgres_store,
    record,
)

pytestmark = pytest.mark.anyio

WAIT = 10.0


def fresh_schema() -> str:
    return f"test_{uuid.uuid4().hex[:16]}"


@pytest.fixture
async def raw() -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """A plain autocommit connection to the test database."""
    postgres_available()
    conn = await psycopg.AsyncConnection.connect(POSTGRES_URL, autocommit=True)
    try:
        yield conn
    finally:
        await conn.close()


@pytest.fixture
async def pair() -> AsyncIterator[tuple[PostgresTaskStore, PostgresTaskStore]]:
    """Two store instances (two pools, two feeds) on one schema."""
    schema = fresh_schema()
    a, b = postgres_store(schema=schema), postgres_store(schema=schema)
    assert isinstance(a, PostgresTaskStore) and isinstance(b, PostgresTaskStore)
    await a.open()
    await b.open()
    try:
        yield a, b
    finally:
        await b.close()
        await a.close()


async def rows(conn: psycopg.AsyncConnection[Any], query: str, *params: Any) -> list[Any]:
    cur = await conn.execute(query, params or None)
    return await cur.fetchall()


async def next_change(feed: AsyncIterator[TaskChange]) -> TaskChange:
    with anyio.fail_after(WAIT):
        return await feed.__anext__()


# --- the schema marker ------------------------------------------------------------------


async def test_a_foreign_schema_is_refused_and_left_untouched(
    raw: psycopg.AsyncConnection[Any],
) -> None:
    schema = fresh_schema()
    await raw.execute(f"CREATE SCHEMA {schema}")
    try:
        await raw.execute(f"CREATE TABLE {schema}.invoices (id int)")
        await raw.execute(f"INSERT INTO {schema}.invoices VALUES (1)")
        store = PostgresTaskStore(POSTGRES_URL, schema=schema)
        with anyio.fail_after(WAIT), pytest.raises(ConfigurationError, match="another program"):
            await store.open()
        await store.close()
        tables = await rows(
            raw, "SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY 1", schema
        )
        assert tables == [("invoices",)]
        assert await rows(raw, f"SELECT id FROM {schema}.invoices") == [(1,)]
    finally:
        drop_schema(schema)


async def test_a_newer_schema_is_refused_and_left_untouched(
    raw: psycopg.AsyncConnection[Any],
) -> None:
    schema = fresh_schema()
    first = PostgresTaskStore(POSTGRES_URL, schema=schema)
    try:
        await first.open()
        task = record()
        await first.create(task)
        await first.close()
        newer = str(SCHEMA_VERSION + 1)
        await raw.execute(
            f"UPDATE {schema}.meta SET value = %s WHERE key = 'schema_version'", (newer,)
        )
        before = await rows(raw, f"SELECT task_id, status FROM {schema}.tasks")
        store = PostgresTaskStore(POSTGRES_URL, schema=schema)
        with anyio.fail_after(WAIT), pytest.raises(ConfigurationError, match="newer"):
            await store.open()
        await store.close()
        meta = dict(await rows(raw, f"SELECT key, value FROM {schema}.meta"))
        assert meta == {"application": "fastmcp-tasks", "schema_version": newer}
        assert await rows(raw, f"SELECT task_id, status FROM {schema}.tasks") == before
    finally:
        await first.close()
        drop_schema(schema)


async def test_an_empty_schema_is_adopted_and_reopening_keeps_the_tasks() -> None:
    schema = fresh_schema()
    one = postgres_store(schema=schema)
    await one.open()
    task = record()
    await one.create(task)
    again = PostgresTaskStore(POSTGRES_URL, schema=schema)  # a restart: same schema
    await again.open()
    try:
        got = await again.get(task.task_id)
        assert got is not None and got.arguments == {"a": 1}
    finally:
        await again.close()
        await one.close()


async def test_concurrent_opens_of_a_new_schema_both_succeed() -> None:
    schema = fresh_schema()
    stores = [postgres_store(schema=schema) for _ in range(4)]
    try:
        async with anyio.create_task_group() as group:
            for store in stores:
                group.start_soon(store.open)
        for store in stores:
            assert await store.get("missing") is None
    finally:
        for store in reversed(stores):
            await store.close()


# --- two instances racing -------------------------------------------------------------------


async def test_caps_hold_across_instances(pair: tuple[PostgresTaskStore, ...]) -> None:
    caps = ActiveCaps(total=5, per_owner=3)
    accepted: list[str] = []
    refused: list[str] = []

    async def attempt(store: PostgresTaskStore, owner: str | None) -> None:
        task = record(owner=owner)
        try:
            await store.create(task, caps=caps)
        except TaskLimitExceeded:
            refused.append(task.task_id)
        else:
            accepted.append(task.task_id)

    async with anyio.create_task_group() as group:
        for n in range(20):
            group.start_soon(attempt, pair[n % 2], "alice" if n % 3 else None)
    assert len(accepted) == 5 and len(refused) == 15
    active = await pair[0].active_tasks()
    assert len(active) == 5 and sum(r.owner == "alice" for r in active) <= 3


async def test_dedupe_across_instances_makes_one_task(pair: tuple[PostgresTaskStore, ...]) -> None:
    records = [record(dedupe_key="same") for _ in range(12)]
    answers: list[str | None] = []

    async def create(n: int) -> None:
        found = await pair[n % 2].create(records[n], dedupe_window=60)
        answers.append(None if found is None else found.task_id)

    async with anyio.create_task_group() as group:
        for n in range(12):
            group.start_soon(create, n)
    created = [r.task_id for r in records if await pair[0].get(r.task_id) is not None]
    assert len(created) == 1 and answers.count(None) == 1
    assert {a for a in answers if a is not None} == set(created)


async def test_a_gate_claimed_from_both_never_exceeds_its_limit(
    pair: tuple[PostgresTaskStore, ...],
) -> None:
    a, b = pair
    tasks = [record(gate="deploy", gate_limit=2, owner=f"o{n % 3}") for n in range(12)]
    for task in tasks:
        await a.create(task)
    later = time.time() + 60
    done = 0
    while done < len(tasks):
        taken: list[str] = []

        async def claim(store: PostgresTaskStore, owner: str) -> None:
            taken.extend(r.task_id for r in await store.claim_queued(owner, later, 5))  # noqa: B023

        async with anyio.create_task_group() as group:
            for n in range(8):
                group.start_soon(claim, pair[n % 2], f"w{n}")
        holding = [r for r in await a.active_leases() if r.lease_owner is not None]
        assert len(holding) <= 2, holding
        assert len(taken) == len(set(taken)) and len(taken) == len(holding)
        for task_id in taken:
            await b.transition(task_id, "completed", result={})
            done += 1
    assert await a.claim_queued("w", later, 5) == []


async def test_a_transition_race_across_instances_has_one_winner(
    pair: tuple[PostgresTaskStore, ...],
) -> None:
    for _ in range(5):
        task = record()
        await pair[0].create(task)
        winners: list[str] = []

        async def attempt(store: PostgresTaskStore, status: Any) -> None:
            if await store.transition(task.task_id, status) is not None:  # noqa: B023
                winners.append(status)  # noqa: B023

        async with anyio.create_task_group() as group:
            for n, status in enumerate(("completed", "failed", "cancelled") * 4):
                group.start_soon(attempt, pair[n % 2], status)
        assert len(winners) == 1
        final = await pair[1].get(task.task_id)
        assert final is not None and final.status == winners[0]


async def test_the_counters_caps_read_match_the_tasks(
    pair: tuple[PostgresTaskStore, ...], raw: psycopg.AsyncConnection[Any]
) -> None:
    a, b = pair
    tasks = [record(owner=("alice", "bob", None)[n % 3]) for n in range(30)]
    for n, task in enumerate(tasks):
        await pair[n % 2].create(task)
    done = record(owner="alice")
    done.status, done.terminal_at = "completed", time.time()
    await a.create(done)  # created ended: never active
    for n, task in enumerate(tasks[:14]):
        ending: Any = ("completed", "failed", "cancelled")[n % 3]
        await pair[n % 2].transition(task.task_id, ending)
    await a.transition(tasks[0].task_id, "working")  # refused (terminal): counts nothing
    await b.request_input(tasks[20].task_id, {"k": {}})  # active -> active
    s = a.schema
    counted = dict(await rows(raw, f"SELECT key, sum(n)::int FROM {s}.active_counts GROUP BY 1"))
    actual = await rows(
        raw,
        f"SELECT owner, count(*)::int FROM {s}.tasks "
        "WHERE status IN ('working', 'input_required') GROUP BY 1",
    )
    expected = {f"o:{owner}": n for owner, n in actual if owner is not None}
    expected["t"] = sum(n for _, n in actual)
    assert {k: v for k, v in counted.items() if v} == expected
    with pytest.raises(TaskLimitExceeded):
        await b.create(record(), caps=ActiveCaps(total=expected["t"]))
    await b.create(record(), caps=ActiveCaps(total=expected["t"] + 1))


# --- the change feed ----------------------------------------------------------------------


async def test_changes_made_through_one_instance_reach_the_other_in_order(
    pair: tuple[PostgresTaskStore, ...],
) -> None:
    a, b = pair
    task = record()
    await a.create(task)
    async with b.changes(frozenset({task.task_id})) as feed:
        for step in range(10):
            await a.set_status_message(task.task_id, f"step {step}")
        await a.request_cancel(task.task_id)
        await a.transition(task.task_id, "cancelled")
        seen = [await next_change(feed) for _ in range(12)]
    assert [c.kind for c in seen] == ["message"] * 10 + ["cancel_requested", "status"]
    assert seen[-1].status == "cancelled"


async def _listener_pid(conn: psycopg.AsyncConnection[Any], store: PostgresTaskStore) -> int:
    name = f"fastmcp-tasks-feed:{store.schema}"
    with anyio.fail_after(WAIT):
        while True:
            found = await rows(
                conn, "SELECT pid FROM pg_stat_activity WHERE application_name = %s", name
            )
            if found:
                return int(found[0][0])
            await anyio.sleep(0.02)


async def test_the_feed_survives_its_listen_connection_being_killed(
    pair: tuple[PostgresTaskStore, ...], raw: psycopg.AsyncConnection[Any]
) -> None:
    a, b = pair
    task = record()
    await a.create(task)
    async with b.changes(frozenset({task.task_id})) as feed:
        await a.set_status_message(task.task_id, "before")
        assert (await next_change(feed)).kind == "message"
        pid = await _listener_pid(raw, b)
        await raw.execute("SELECT pg_terminate_backend(%s)", (pid,))
        for step in range(5):  # while the listener is down (or reconnecting)
            await a.set_status_message(task.task_id, f"during {step}")
        seen = [await next_change(feed) for _ in range(5)]
        assert [c.kind for c in seen] == ["message"] * 5
        assert await _listener_pid(raw, b) != pid  # reconnected
        await a.request_cancel(task.task_id)
        assert (await next_change(feed)).kind == "cancel_requested"  # nothing twice
    current = await a.get(task.task_id)
    assert current is not None and current.status_message == "during 4"


async def test_a_change_committed_late_is_not_skipped_and_a_rollback_does_not_stall(
    pair: tuple[PostgresTaskStore, ...], raw: psycopg.AsyncConnection[Any]
) -> None:
    a, b = pair
    task = record()
    await a.create(task)
    schema = a.schema
    insert = (
        f"INSERT INTO {schema}.changes (task_id, kind, status, details, created_at) "
        "VALUES (%s, 'message', 'working', '{}', %s) RETURNING seq"
    )
    async with b.changes(frozenset({task.task_id})) as feed:
        slow = await psycopg.AsyncConnection.connect(POSTGRES_URL)  # not autocommit
        try:
            (late,) = await rows(slow, insert, task.task_id, time.time())  # takes a seq, open
            await a.request_cancel(task.task_id)  # a later seq, committed first
            with anyio.move_on_after(0.3):
                early = await feed.__anext__()
                pytest.fail(f"delivered past an open transaction's seq: {early}")
            await slow.execute(f"SELECT pg_notify('{b.sql.channel}', %s)", (str(late[0]),))
            await slow.commit()
            first, second = await next_change(feed), await next_change(feed)
            assert (first.kind, second.kind) == ("message", "cancel_requested")
            await rows(slow, insert, task.task_id, time.time())
            await slow.rollback()  # a seq that will never appear
            started = time.monotonic()
            await a.transition(task.task_id, "cancelled")
            assert (await next_change(feed)).kind == "status"
            assert time.monotonic() - started < 1.0  # proven gone, not waited out
        finally:
            await slow.close()


async def test_an_idle_subscription_sends_no_statements(
    pair: tuple[PostgresTaskStore, ...], raw: psycopg.AsyncConnection[Any]
) -> None:
    a, b = pair
    task = record()
    await a.create(task)
    names = [f"fastmcp-tasks:{b.schema}", f"fastmcp-tasks-feed:{b.schema}"]
    activity = (
        "SELECT pid, query_start, state FROM pg_stat_activity "
        "WHERE application_name = ANY(%s) ORDER BY pid"
    )
    async with b.changes() as feed:
        await a.set_status_message(task.task_id, "wake")
        assert (await next_change(feed)).kind == "message"
        listener = await _listener_pid(raw, b)
        before = await rows(raw, activity, names)
        counted = dict(b.stats)
        await anyio.sleep(3.0)  # the measured window: nothing happens in it
        after = await rows(raw, activity, names)
        assert b.stats == counted  # no statement through the pool or on the feed
        assert after == before  # and none reached the server (query_start unchanged)
        assert listener in {pid for pid, _, _ in after}  # the listener was watched too


# --- URLs and outages ---------------------------------------------------------------------


def test_urls_select_the_store_and_its_options() -> None:
    store = store_from_url(
        "postgres://app:s3cret@db.example:6543/tasks?schema=mine&pool_max=3&sslmode=disable"
        "&listen_url=postgresql://app:s3cret@db.example:5432/tasks",
        max_tasks=10,
        tombstone_retention=None,
    )
    assert isinstance(store, PostgresTaskStore) and store.scheme == "postgresql"
    assert store.schema == "mine" and store.pool_max == 3 and store.max_tasks == 10
    assert store.tombstone_retention is None
    assert "s3cret" not in store.where and "s3cret" not in repr(store)
    assert store.url.endswith("/tasks?sslmode=disable")
    assert store.listen_url == "postgresql://app:s3cret@db.example:5432/tasks"
    plain = store_from_url("postgresql://localhost/db")
    assert isinstance(plain, PostgresTaskStore) and plain.schema == "fastmcp_tasks"
    with pytest.raises(ConfigurationError, match="schema"):
        PostgresTaskStore("postgresql://localhost/db", schema="Bad-Name")
    with pytest.raises(ConfigurationError):
        PostgresTaskStore("postgresql://localhost/db?pool_max=lots")


async def test_an_unreachable_server_is_a_store_error_without_the_password() -> None:
    store = PostgresTaskStore("postgresql://app:s3cret@127.0.0.1:1/db", timeout=2)
    with anyio.fail_after(WAIT), pytest.raises(StoreError) as info:
        await store.open()
    assert "s3cret" not in str(info.value)
    with pytest.raises(StoreError, match="not open"):
        await store.get("x")
    await store.close()


async def test_the_pool_reconnects_after_its_connections_are_killed(
    raw: psycopg.AsyncConnection[Any],
) -> None:
    store = postgres_store(pool_min=2)
    assert isinstance(store, PostgresTaskStore)
    await store.open()
    try:
        task = record()
        await store.create(task)
        name = f"fastmcp-tasks:{store.schema}"
        await raw.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (name,),
        )
        assert await store.get(task.task_id) is not None  # a read retries on a fresh one
        with anyio.fail_after(WAIT):
            while True:  # a write on a dead connection fails once, then works
                try:
                    await store.set_status_message(task.task_id, "back")
                    break
                except StoreError:
                    await anyio.sleep(0.05)
        got = await store.get(task.task_id)
        assert got is not None and got.status_message == "back"
    finally:
        await store.close()


async def _until_waiting_on_a_lock(
    watcher: psycopg.AsyncConnection[Any], store: PostgresTaskStore
) -> None:
    """Return once one of the store's pooled connections waits for a row lock."""
    name = f"fastmcp-tasks:{store.schema}"
    while True:
        query = (
            "SELECT 1 FROM pg_stat_activity WHERE application_name = %s "
            "AND wait_event_type = 'Lock'"
        )
        if await rows(watcher, query, name):
            return
        await anyio.sleep(0.01)


async def _racing(store: PostgresTaskStore, name: str, task_id: str, got: list[Any]) -> None:
    if name == "request_cancel":
        got.append(await store.request_cancel(task_id))
    else:
        got.append(await store.set_status_message(task_id, "late"))


async def test_a_cancel_or_message_racing_the_end_of_a_task_sees_it_ended(
    raw: psycopg.AsyncConnection[Any],
) -> None:
    """A task ended by a transaction the call's UPDATE waited for: `request_cancel` returns
    the ended task (not its snapshot from before), `set_status_message` None, as the
    memory store does."""
    store = postgres_store()
    assert isinstance(store, PostgresTaskStore)
    await store.open()
    watcher = await psycopg.AsyncConnection.connect(POSTGRES_URL, autocommit=True)
    try:
        for name in ("request_cancel", "set_status_message"):
            task = record()
            await store.create(task)
            got: list[Any] = []
            with anyio.fail_after(WAIT):
                async with anyio.create_task_group() as group:
                    async with raw.transaction():  # ends the task; commits once the call waits
                        await raw.execute(
                            f"UPDATE {store.schema}.tasks SET status = 'completed' "
                            "WHERE task_id = %s",
                            (task.task_id,),
                        )
                        group.start_soon(_racing, store, name, task.task_id, got)
                        await _until_waiting_on_a_lock(watcher, store)
            if name == "request_cancel":
                assert got[0] is not None and got[0].status == "completed", got
                assert not got[0].cancel_requested
            else:
                assert got == [None]
    finally:
        await watcher.close()
        await store.close()
