"""Capped creations in the PostgreSQL store's batches (`stores.postgres.caps_batched`).

A batch carries up to `BATCH_CREATES` creations under the active-task caps, beside reads
only; its second needs one of `BATCH_SLOTS` batch slots, the database refuses one past
`BATCH_CREATES` in a transaction, both caps checks keep what batches add in their margin,
and the batched check never takes the caps lock exclusively. Creations of several
processes batched at once never overshoot a cap.
"""

from __future__ import annotations

import functools
from typing import Any

import anyio
import psycopg
import pytest

from fastmcp_tasks.errors import TaskLimitExceeded
from fastmcp_tasks.stores.base import ActiveCaps, TaskRecord
from fastmcp_tasks.stores.postgres import PostgresTaskStore
from fastmcp_tasks.stores.postgres.caps_batched import (
    BATCH_CREATES,
    BATCH_MARGIN,
    BATCH_SLOTS,
    CAPS_CHECK,
    CAPS_CHECK_BATCHED,
)
from fastmcp_tasks.testing import make_record
from tests.test_call_batching import settle
from tests.test_postgres_batching import anyio_backend, store
from tests.test_store_contract import POSTGRES_URL, postgres_store

pytestmark = pytest.mark.anyio

__all__ = ["anyio_backend", "store"]  # the fixtures, shared


async def test_batched_capped_creates_of_several_processes_never_overshoot_the_cap() -> None:
    """Three store objects (three processes' pools) on one schema, each with 80 capped
    creates queued behind the caps lock another transaction holds, so that when it is
    released their batches (up to `BATCH_CREATES` creates each) run at once: far from the
    cap they insert in batches, near it they are made again alone and checked exactly, and
    the cap fills exactly, never over."""
    base = postgres_store(pool_min=2, pool_max=4)
    assert isinstance(base, PostgresTaskStore)
    await base.open()
    stores = [postgres_store(schema=base.schema, pool_min=2, pool_max=4) for _ in range(3)]
    outcomes: dict[int, Any] = {}
    made = iter(range(1_000_000))
    each = 80

    async def call(make: Any) -> None:
        await settle(outcomes, next(made), make)  # TaskLimitExceeded past the cap

    try:
        for store in stores:
            await store.open()
        async with await psycopg.AsyncConnection.connect(POSTGRES_URL, autocommit=True) as raw:
            cap = await margin_of(raw) + 60  # 60 creates far from it, the rest near it
        assert each * len(stores) > cap
        caps = ActiveCaps(total=cap)
        name = f"fastmcp-tasks:{base.schema}"
        with anyio.fail_after(30):
            async with await psycopg.AsyncConnection.connect(POSTGRES_URL) as locker:
                lock = "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))"
                await locker.execute(lock, (f"{base.schema}:caps",))
                async with anyio.create_task_group() as group:
                    for store in stores:
                        for _ in range(each):
                            record = make_record()
                            group.start_soon(
                                call, functools.partial(store.create, record, caps=caps)
                            )
                    await lock_waiters(name, len(stores))  # each store's batch waits for it
                    await locker.rollback()
        async with await psycopg.AsyncConnection.connect(POSTGRES_URL, autocommit=True) as raw:
            query = f"SELECT count(*) FROM {base.schema}.tasks WHERE status = 'working'"
            active = (await (await raw.execute(query)).fetchall())[0][0]
        refused = [o for o in outcomes.values() if isinstance(o, TaskLimitExceeded)]
        assert active == cap, f"{active} active tasks under a cap of {cap}"
        assert active + len(refused) == each * len(stores)
        assert all(store.stats.get("batched", 0) for store in stores)  # creates shared trips
    finally:
        for store in stores:
            await store.close()
        await base.close()


async def margin_of(conn: psycopg.AsyncConnection[Any]) -> int:
    """The caps' margin: creates that can be in flight at once (module doc)."""
    settings = (
        "SELECT current_setting('max_connections')::int"
        " + current_setting('max_prepared_transactions')::int"
    )
    return int((await (await conn.execute(settings)).fetchall())[0][0]) + BATCH_MARGIN


async def lock_waiters(name: str, count: int) -> None:
    """Return once `count` backends of the store named `name` wait for a lock."""
    query = (
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
        "AND wait_event_type = 'Lock'"
    )
    async with await psycopg.AsyncConnection.connect(POSTGRES_URL, autocommit=True) as watcher:
        while (await (await watcher.execute(query, (name,))).fetchall())[0][0] < count:  # noqa: ASYNC110
            await anyio.sleep(0.02)


async def test_the_batched_caps_check_never_takes_the_caps_lock_exclusively(
    store: PostgresTaskStore,
) -> None:
    """Far from every cap it takes the caps lock shared and answers no retry; near one it
    takes no lock at all and answers retry (the create is then made alone, exactly)."""
    for _ in range(30):
        await store.create(make_record())
    check = f"SELECT retry FROM {store.schema}.{CAPS_CHECK_BATCHED}(%s, %s, NULL, NULL, false)"
    held = "SELECT mode FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
    with anyio.fail_after(10):
        async with await psycopg.AsyncConnection.connect(POSTGRES_URL) as conn:
            for cap, near, modes in ((100_000, False, ["ShareLock"]), (130, True, [])):
                rows = await (await conn.execute(check, (f"{store.schema}:caps", cap))).fetchall()
                locks = [m for (m,) in await (await conn.execute(held)).fetchall()]
                await conn.rollback()
                assert rows == [(near,)] and locks == modes, (cap, rows, locks)


async def test_a_capped_create_rides_only_with_reads_and_near_a_cap_is_made_alone(
    store: PostgresTaskStore,
) -> None:
    caps = ActiveCaps(total=130)  # 30 active + the margin (over 100): near
    for _ in range(30):
        await store.create(make_record(), caps=caps)
    outcomes: dict[str, Any] = {}
    near = make_record()
    before = store.stats["statements"]
    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:  # made in one turn: one batch
            group.start_soon(settle, outcomes, "read", functools.partial(store.get, "other"))
            create = functools.partial(store.create, near, caps=caps)
            group.start_soon(settle, outcomes, "create", create)
    assert store.stats.get("batched", 0) == 1  # the read and the create were one batch
    assert outcomes["create"] is None  # created: made again alone, checked exactly
    assert store.stats["statements"] == before + 3  # the batch of 2, the create again
    assert await store.get(near.task_id) is not None
    alone = store.stats["statements"]
    async with anyio.create_task_group() as group:  # beside a write it goes alone at once
        group.start_soon(
            settle, outcomes, "end", functools.partial(store.transition, near.task_id, "completed")
        )
        group.start_soon(
            settle, outcomes, "other", functools.partial(store.create, make_record(), caps=caps)
        )
    assert store.stats.get("batched", 0) == 1 and store.stats["statements"] == alone + 2


HELD = "SELECT mode FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"


async def test_a_transaction_checks_at_most_batch_creates_and_its_second_needs_a_slot(
    store: PostgresTaskStore,
) -> None:
    """The database's own bound on what batches add to the caps' margin: in one
    transaction `caps_check_batched` passes `BATCH_CREATES` creates and answers retry to
    the next; the second takes a batch slot (an exclusive advisory lock), and with every
    slot held by other transactions it answers retry while the first still passes."""
    check = f"SELECT retry FROM {store.schema}.{CAPS_CHECK_BATCHED}(%s, 100000, NULL, NULL, false)"
    lock = f"{store.schema}:caps"

    async def retries(conn: psycopg.AsyncConnection[Any], times: int) -> list[bool]:
        return [(await (await conn.execute(check, (lock,))).fetchall())[0][0] for _ in range(times)]

    async def modes(conn: psycopg.AsyncConnection[Any]) -> list[str]:
        return sorted(m for (m,) in await (await conn.execute(HELD)).fetchall())

    with anyio.fail_after(20):
        async with await psycopg.AsyncConnection.connect(POSTGRES_URL) as conn:
            assert await retries(conn, 1) == [False]
            assert await modes(conn) == ["ShareLock"]  # one create needs no slot
            assert await retries(conn, BATCH_CREATES) == [False] * (BATCH_CREATES - 1) + [True]
            assert await modes(conn) == ["ExclusiveLock", "ShareLock"]  # the slot, once
            await conn.commit()  # as a batch ends: the count and the slot end with it
            assert await retries(conn, 2) == [False, False]  # a new transaction counts anew
            await conn.rollback()
            holders = [
                await psycopg.AsyncConnection.connect(POSTGRES_URL) for _ in range(BATCH_SLOTS)
            ]
            try:
                for holder in holders:
                    assert await retries(holder, 2) == [False, False]  # each takes a slot
                assert await retries(conn, 2) == [False, True]  # no slot free
                await holders[0].rollback()
                assert await retries(conn, 1) == [False]  # its second, now with a slot
                await conn.rollback()
            finally:
                for holder in holders:
                    await holder.close()


@pytest.mark.parametrize("function", [CAPS_CHECK, CAPS_CHECK_BATCHED])
async def test_both_caps_checks_keep_the_batches_share_in_their_margin(
    store: PostgresTaskStore, function: str
) -> None:
    """Near a cap means within `max_connections` + `max_prepared_transactions` +
    `BATCH_MARGIN` of it, for the check a create made alone runs and for the batched
    one: the first takes the caps lock exclusive there, the batched one answers
    retry; one task further from the cap both take it shared."""
    for _ in range(30):
        await store.create(make_record())
    check = f"SELECT retry FROM {store.schema}.{function}(%s, %s, NULL, NULL, false)"
    with anyio.fail_after(10):
        async with await psycopg.AsyncConnection.connect(POSTGRES_URL) as conn:
            margin = await margin_of(conn)
            await conn.rollback()
            near = {CAPS_CHECK: (False, ["ExclusiveLock"]), CAPS_CHECK_BATCHED: (True, [])}
            for cap, expected in (
                (30 + margin, near[function]),
                (31 + margin, (False, ["ShareLock"])),
            ):
                rows = await (await conn.execute(check, (f"{store.schema}:caps", cap))).fetchall()
                locks = [m for (m,) in await (await conn.execute(HELD)).fetchall()]
                await conn.rollback()
                assert (rows[0][0], locks) == expected, (cap, rows, locks)


async def test_capped_creates_ride_together_with_reads_each_made_once(
    store: PostgresTaskStore,
) -> None:
    """Far from the caps, concurrent capped creates and a read share one batch (up to
    `BATCH_CREATES` creates; the others are made alone at once), and each is inserted
    exactly once: none had to be made again."""
    records = [make_record(owner="alice") for _ in range(BATCH_CREATES + 2)]
    caps = ActiveCaps(total=100_000, per_owner=100_000)
    statements, batched = await create_beside_a_read(store, records, caps)
    # the read, 8 creates and their one notification (`created_notes`): one round trip
    assert batched == BATCH_CREATES + 1
    assert statements == 1 + len(records) + 1  # none made again


async def create_beside_a_read(
    store: PostgresTaskStore, records: list[TaskRecord], caps: ActiveCaps
) -> tuple[int, int]:
    """Create `records` under `caps` beside a read, all made in one turn of the event loop
    (so they form one batch), and check each was created, waiting; the statements made
    and those that shared a round trip meanwhile."""
    outcomes: dict[str, Any] = {}
    before = store.stats["statements"], store.stats.get("batched", 0)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(settle, outcomes, "read", functools.partial(store.get, "other"))
            for i, record in enumerate(records):
                create = functools.partial(store.create, record, caps=caps)
                group.start_soon(settle, outcomes, f"create {i}", create)
    made = store.stats["statements"] - before[0], store.stats.get("batched", 0) - before[1]
    assert all(outcomes[f"create {i}"] is None for i in range(len(records))), outcomes
    for record in records:
        got = await store.get(record.task_id)
        assert got is not None and got.status == "working"
    return made


async def test_with_every_batch_slot_taken_a_batchs_second_capped_create_is_made_alone(
    store: PostgresTaskStore,
) -> None:
    """Other transactions hold every batch slot: a batch's first capped create is made in
    it, the others insert nothing there and are each made again alone, exactly once."""
    slot = "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))"
    records = [make_record() for _ in range(3)]
    holders = [await psycopg.AsyncConnection.connect(POSTGRES_URL) for _ in range(BATCH_SLOTS)]
    try:
        for i, holder in enumerate(holders, start=1):
            await holder.execute(slot, (f"{store.schema}:caps:batch{i}",))
        statements, batched = await create_beside_a_read(store, records, ActiveCaps(total=100_000))
    finally:
        for holder in holders:
            await holder.close()
    # the read, 3 creates and their one notification (`created_notes`): one round trip
    assert batched == len(records) + 1
    assert statements == 5 + 2  # two made again alone
