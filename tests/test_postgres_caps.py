"""The PostgreSQL store's active-task caps under concurrency: the two lock modes.

A create far from every cap takes the caps lock shared, so creates in any number of
processes never wait for each other; one near a cap (within `max_connections` +
`max_prepared_transactions` of it) takes it exclusive and checks exactly
(`schema.CAPS_FUNCTION` has the argument). These tests hold the lock from a plain
connection to show who waits for whom, force the retry a create makes when the
counters move into the margin under it, and race two store instances across the
margin, on the real server (skipped without one, failing when `CI=true`).
"""

from __future__ import annotations

import dataclasses
import math
import uuid
from collections.abc import AsyncIterator
from typing import Any

import anyio
import psycopg
import pytest

from fastmcp_tasks.errors import TaskLimitExceeded
from fastmcp_tasks.stores.base import ActiveCaps
from fastmcp_tasks.stores.postgres import PostgresTaskStore
from fastmcp_tasks.stores.postgres.caps_batched import BATCH_MARGIN, CAPS_CHECK
from tests.test_postgres_store import WAIT, _until_waiting_on_a_lock, fresh_schema, pair, raw, rows
from tests.test_store_contract import POSTGRES_URL, postgres_store, record

pytestmark = pytest.mark.anyio

__all__ = ["pair", "raw"]  # fixtures of test_postgres_store, used below


@pytest.fixture
async def lone() -> AsyncIterator[tuple[PostgresTaskStore, psycopg.AsyncConnection[Any]]]:
    """A store in a schema of its own, and a plain connection (not autocommit) beside it."""
    store = postgres_store(schema=fresh_schema())
    assert isinstance(store, PostgresTaskStore)
    await store.open()
    conn = await psycopg.AsyncConnection.connect(POSTGRES_URL)
    try:
        yield store, conn
    finally:
        await conn.close()
        await store.close()


async def margin_of(conn: psycopg.AsyncConnection[Any]) -> int:
    """The caps' margin: how many creates can be in flight at once (one per transaction
    the server can have open, and what batches add)."""
    found = await rows(
        conn,
        "SELECT current_setting('max_connections')::int "
        "+ current_setting('max_prepared_transactions')::int",
    )
    return int(found[0][0]) + BATCH_MARGIN


async def hold_caps_lock(
    conn: psycopg.AsyncConnection[Any], store: PostgresTaskStore, total: int
) -> None:
    """In `conn`'s open transaction: the caps check a create with `total` makes."""
    await rows(
        conn,
        f"SELECT * FROM {store.schema}.{CAPS_CHECK}(%s, %s, NULL, NULL, false)",
        f"{store.schema}:caps",
        total,
    )


async def test_far_from_the_caps_creates_share_the_lock_and_near_them_one_waits(
    lone: tuple[PostgresTaskStore, psycopg.AsyncConnection[Any]],
    raw: psycopg.AsyncConnection[Any],
) -> None:
    store, holder = lone
    margin = await margin_of(raw)
    far = ActiveCaps(total=margin + 1_000)
    await hold_caps_lock(holder, store, far.total or 0)  # shared, not committed
    with anyio.fail_after(WAIT):  # does not wait for the open transaction
        await store.create(record(), caps=far)
    near = ActiveCaps(total=margin + 1)  # 1 active + margin: within the margin
    done = anyio.Event()

    async def create_near() -> None:
        await store.create(record(), caps=near)
        done.set()

    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as group:
            group.start_soon(create_near)
            await _until_waiting_on_a_lock(raw, store)
            assert not done.is_set()  # exclusive: waits for the shared holder
            await holder.commit()
    assert done.is_set() and len(await store.active_tasks()) == 2


async def test_counters_moved_into_the_margin_under_a_create_make_it_check_exactly(
    lone: tuple[PostgresTaskStore, psycopg.AsyncConnection[Any]],
    raw: psycopg.AsyncConnection[Any],
) -> None:
    """The unlocked look says "far"; by the locked read another transaction has moved
    the counter into the margin: the create inserts nothing, retries exclusive, and
    then the exact check decides (here: room for one more, then refused)."""
    store, mover = lone
    caps = ActiveCaps(total=await margin_of(raw) + 10)
    lock = "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))"
    await rows(mover, lock, f"{store.schema}:caps")
    # 10 active tasks in the counters (as if created): 10 + margin >= the cap
    await rows(
        mover,
        f"INSERT INTO {store.schema}.active_counts (key, shard, n) VALUES ('t', -1, 10) "
        "RETURNING n",
    )
    before = store.stats["statements"]
    created = record()

    async def create() -> None:
        await store.create(created, caps=caps)

    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as group:
            group.start_soon(create)
            await _until_waiting_on_a_lock(raw, store)  # chose shared, waits for it
            await mover.commit()
    assert store.stats["statements"] - before == 2  # the shared try, then the exact one
    assert await store.get(created.task_id) is not None  # 10 < margin + 10
    with pytest.raises(TaskLimitExceeded):  # exactly: 10 + 1 active
        await store.create(record(), caps=ActiveCaps(total=11))


@pytest.mark.parametrize("keyed", [False, True], ids=["plain", "idempotency-keyed"])
@pytest.mark.parametrize("limit", ["total", "per_owner"])
async def test_creates_racing_across_the_margin_fill_the_cap_exactly(
    pair: tuple[PostgresTaskStore, PostgresTaskStore],
    raw: psycopg.AsyncConnection[Any],
    limit: str,
    keyed: bool,
) -> None:
    """Two instances (two pools, as two processes) race 40 creates more than the cap
    allows: the first ones take the lock shared, the last ones exclusive. A create with
    an idempotency key (its own, `dedupe_window=inf`) is one statement too, as capped."""
    cap = await margin_of(raw) + 20
    caps = ActiveCaps(total=cap) if limit == "total" else ActiveCaps(per_owner=cap)
    accepted = refused = 0

    async def attempt(store: PostgresTaskStore) -> None:
        nonlocal accepted, refused
        made = record(owner="app|alice")
        window = {"dedupe_window": math.inf} if keyed else {}
        if keyed:
            made = dataclasses.replace(made, dedupe_key=uuid.uuid4().hex)
        try:
            await store.create(made, caps=caps, **window)
            accepted += 1
        except TaskLimitExceeded:
            refused += 1

    with anyio.fail_after(60):
        async with anyio.create_task_group() as group:
            for n in range(cap + 40):
                group.start_soon(attempt, pair[n % 2])
    assert (accepted, refused) == (cap, 40)
    assert len(await pair[0].active_tasks()) == cap


async def test_racing_resends_with_one_key_under_caps_make_one_task(
    pair: tuple[PostgresTaskStore, PostgresTaskStore],
) -> None:
    """Twelve creates with one idempotency key, capped, across two instances: one task."""
    caps = ActiveCaps(total=10_000, per_owner=1_000)
    made = [record(owner="app|alice") for _ in range(12)]
    made = [dataclasses.replace(r, dedupe_key="one-key") for r in made]
    answers: list[str] = []

    async def attempt(n: int) -> None:
        found = await pair[n % 2].create(made[n], caps=caps, dedupe_window=math.inf)
        answers.append(made[n].task_id if found is None else found.task_id)

    with anyio.fail_after(30):
        async with anyio.create_task_group() as group:
            for n in range(12):
                group.start_soon(attempt, n)
    assert len(set(answers)) == 1
    assert len(await pair[0].active_tasks()) == 1
