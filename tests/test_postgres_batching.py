"""The PostgreSQL store's batched statements (`stores.postgres.batching`), on a real server.

Concurrent creates, reads, status changes and claims of one store object share round
trips (`stats["batched"]`); a batch's creations notify the channel once, with every
seq (`postgres.created_notes`); a statement psycopg cannot send rolls its
batch back, so the others are made alone exactly once and only it fails (a claim
among them leases its tasks once, a creation notifies alone); reads whose batch met dead
connections are retried on fresh ones. What each call answers under concurrency is
the store contract's (`ConcurrencyContract`).
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import psycopg
import pytest

from fastmcp_tasks.errors import StoreError
from fastmcp_tasks.stores.base import ActiveCaps, TaskRecord
from fastmcp_tasks.stores.postgres import PostgresTaskStore
from fastmcp_tasks.stores.postgres.batching import _lock_order
from fastmcp_tasks.stores.postgres.feed_parts import QUEUED_ONLY, Heard
from fastmcp_tasks.testing import make_record
from tests.test_call_batching import settle
from tests.test_postgres_wakeups import RUNNER, _feed_with, _got
from tests.test_store_contract import POSTGRES_URL, postgres_available, postgres_store

pytestmark = pytest.mark.anyio

#: Connections the store's pool keeps (all of them are killed by the dead-connection test).
POOL = 6


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def store() -> AsyncIterator[PostgresTaskStore]:
    made = postgres_store(pool_min=POOL, pool_max=POOL)
    assert isinstance(made, PostgresTaskStore)
    await made.open()
    try:
        yield made
    finally:
        await made.close()


def round_trips(store: PostgresTaskStore) -> int:
    return store.stats["statements"] - store.stats.get("batched", 0)


async def test_concurrent_statements_share_round_trips(store: PostgresTaskStore) -> None:
    with anyio.fail_after(20):
        tasks = [make_record(arguments={"n": n}) for n in range(30)]
        for task in tasks:  # one at a time: alone, never batched
            await store.create(task)
        assert store.stats.get("batched", 0) == 0
        found: dict[str, TaskRecord | None] = {}

        async def get(task_id: str) -> None:
            found[task_id] = await store.get(task_id)

        before = round_trips(store)
        async with anyio.create_task_group() as group:
            for task in tasks:
                group.start_soon(get, task.task_id)
        assert round_trips(store) - before == 1  # made in one turn: one batch
        assert all(found[t.task_id].arguments == t.arguments for t in tasks)  # type: ignore[union-attr]
        ended: list[TaskRecord | None] = []

        async def finish(task: TaskRecord) -> None:
            ended.append(await store.transition(task.task_id, "completed", result={}))

        before = round_trips(store)
        async with anyio.create_task_group() as group:
            for task in tasks:
                group.start_soon(finish, task)
        assert round_trips(store) - before <= 3
        assert len(ended) == len(tasks) and all(e is not None for e in ended)


async def test_a_claim_rides_the_batch_of_other_statements(store: PostgresTaskStore) -> None:
    """A worker's claim goes with the status changes made in the same turn of the event
    loop: one round trip for them all."""
    with anyio.fail_after(20):
        queued = [make_record(app="batching") for _ in range(3)]
        done = make_record(app="other")
        for task in [*queued, done]:
            await store.create(task)
        outcomes: dict[str, Any] = {}
        call = functools.partial(settle, outcomes)
        later = 10**10
        before = round_trips(store)
        async with anyio.create_task_group() as group:
            claim = functools.partial(store.claim_queued, "w", later, 5, app="batching")
            group.start_soon(call, "claim", claim)
            group.start_soon(call, "end", lambda: store.transition(done.task_id, "completed"))
        assert round_trips(store) - before == 1  # together
        assert [r.task_id for r in outcomes["claim"]] == [t.task_id for t in queued]
        assert all(r.lease_owner == "w" and r.attempts == 1 for r in outcomes["claim"])
        assert outcomes["end"] is not None and outcomes["end"].status == "completed"
        assert await store.claim_queued("v", later, 5, app="batching") == []


async def test_a_claim_leaves_capped_creates_in_the_batch(store: PostgresTaskStore) -> None:
    """Creates under the caps ride only beside writes that wait for no row: a claim is one
    (it skips locked rows), so the creates made with it stay in its batch."""
    with anyio.fail_after(20):
        queued = make_record(app="capped")
        await store.create(queued)
        made = [make_record(app="later") for _ in range(2)]
        outcomes: dict[str, Any] = {}
        call = functools.partial(settle, outcomes)
        caps = ActiveCaps(total=100_000)
        before = round_trips(store)
        async with anyio.create_task_group() as group:
            claim = functools.partial(store.claim_queued, "w", 10**10, 5, app="capped")
            group.start_soon(call, "claim", claim)
            for n, record in enumerate(made):
                create = functools.partial(store.create, record, caps=caps)
                group.start_soon(call, f"create{n}", create)
        assert round_trips(store) - before == 1  # the three together
        assert [r.task_id for r in outcomes["claim"]] == [queued.task_id]
        for record in made:
            got = await store.get(record.task_id)
            assert got is not None and got.lease_owner is None


async def test_a_claim_runs_after_every_other_statement_of_its_batch() -> None:
    """The rows a claim locks are held only from the end of its batch: no other statement
    of the batch waits for a row meanwhile (a claim itself never waits)."""
    claim = ("claim", {"owner": "w"}, False, False, True)
    end = ("end", {"id": "b"}, False, False, False)
    read = ("get", {"id": "a"}, True, False, False)
    capped = ("create", {"task_id": "c"}, False, True, False)
    assert sorted([claim, end, read, capped], key=_lock_order) == [read, capped, end, claim]


async def test_a_claim_in_a_refused_batch_is_made_again_alone_and_leases_once(
    store: PostgresTaskStore,
) -> None:
    with anyio.fail_after(20):
        queued = [make_record(app="refused") for _ in range(2)]
        for task in queued:
            await store.create(task)
        outcomes: dict[str, Any] = {}
        call = functools.partial(settle, outcomes)
        later = 10**10
        async with anyio.create_task_group() as group:
            claim = functools.partial(store.claim_queued, "w", later, 5, app="refused")
            group.start_soon(call, "claim", claim)
            group.start_soon(call, "bad", lambda: store.transition("nul\x00id", "completed"))
        assert store.stats.get("batched", 0) >= 1  # the claim and the bad call were one batch
        assert isinstance(outcomes["bad"], StoreError)
        assert [r.task_id for r in outcomes["claim"]] == [t.task_id for t in queued]
        for task in queued:
            got = await store.get(task.task_id)
            assert got is not None and got.lease_owner == "w" and got.attempts == 1


@pytest.mark.parametrize(
    ("bad_id", "raised"),
    [("nul\x00id", StoreError), ("lone\ud800surrogate", UnicodeEncodeError)],
    ids=["nul", "surrogate"],
)
async def test_a_statement_that_cannot_be_sent_fails_alone_and_the_rest_apply_once(
    store: PostgresTaskStore, bad_id: str, raised: type[Exception]
) -> None:
    with anyio.fail_after(20):
        first, second, third = make_record(), make_record(), make_record()
        await store.create(first)
        await store.create(second)
        outcomes: dict[str, Any] = {}

        call = functools.partial(settle, outcomes)

        async with anyio.create_task_group() as group:
            group.start_soon(call, "first", lambda: store.transition(first.task_id, "completed"))
            group.start_soon(call, "bad", lambda: store.get(bad_id))  # psycopg cannot send it
            group.start_soon(call, "second", lambda: store.transition(second.task_id, "failed"))
            group.start_soon(call, "third", lambda: store.create(third))
        assert store.stats.get("batched", 0) >= 3  # they were one batch
        assert isinstance(outcomes["bad"], raised)  # what the call alone raises
        # the batch was rolled back, so each write was made once, alone, and applied
        assert outcomes["first"] is not None and outcomes["first"].status == "completed"
        assert outcomes["second"] is not None and outcomes["second"].status == "failed"
        got = await store.get(third.task_id)
        assert got is not None and got.status == "working"


async def test_concurrent_reads_after_the_pools_connections_were_killed_are_answered(
    store: PostgresTaskStore,
) -> None:
    postgres_available()
    name = f"fastmcp-tasks:{store.schema}"
    count = "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
    with anyio.fail_after(20):
        tasks = [make_record(arguments={"n": n}) for n in range(10)]
        for task in tasks:
            await store.create(task)
        async with await psycopg.AsyncConnection.connect(POSTGRES_URL, autocommit=True) as raw:
            while (await (await raw.execute(count, (name,))).fetchall())[0][0] < POOL:  # noqa: ASYNC110 - another process's state
                await anyio.sleep(0.02)  # the pool has opened every connection: all die
            await raw.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = %s",
                (name,),
            )
        found: dict[str, TaskRecord | None] = {}

        async def get(task_id: str) -> None:
            found[task_id] = await store.get(task_id)

        async with anyio.create_task_group() as group:
            for task in tasks:
                group.start_soon(get, task.task_id)
        assert all(found[t.task_id] is not None for t in tasks)


async def test_a_batch_whose_connection_dies_fails_its_writes_and_retries_its_reads(
    store: PostgresTaskStore,
) -> None:
    """The batch's backend is killed while a write of it waits for a row lock: that write
    fails as it would alone ("unreachable"), the read beside it is answered."""
    postgres_available()
    held, other = make_record(), make_record()
    await store.create(held)
    await store.create(other)
    waiting = (
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND wait_event_type = 'Lock'"
    )
    outcomes: dict[str, Any] = {}
    call = functools.partial(settle, outcomes)

    with anyio.fail_after(20):
        async with await psycopg.AsyncConnection.connect(POSTGRES_URL) as locker:
            await locker.execute(
                f"SELECT 1 FROM {store.schema}.tasks WHERE task_id = %s FOR UPDATE",
                (held.task_id,),
            )
            async with await psycopg.AsyncConnection.connect(
                POSTGRES_URL, autocommit=True
            ) as watcher:
                async with anyio.create_task_group() as group:
                    group.start_soon(
                        call, "write", lambda: store.transition(held.task_id, "completed")
                    )
                    group.start_soon(call, "read", lambda: store.get(other.task_id))
                    name = f"fastmcp-tasks:{store.schema}"
                    lookup = (waiting, (name,))
                    while not (found := await (await watcher.execute(*lookup)).fetchall()):  # noqa: ASYNC110
                        await anyio.sleep(0.01)  # until the batch waits for the lock
                    await watcher.execute("SELECT pg_terminate_backend(%s)", found[0])
            await locker.rollback()
    assert store.stats.get("batched", 0) >= 1  # the write and the read were one batch
    assert isinstance(outcomes["write"], StoreError) and "unreachable" in str(outcomes["write"])
    assert isinstance(outcomes["read"], TaskRecord) and outcomes["read"].task_id == other.task_id
    got = await store.get(held.task_id)
    assert got is not None and got.status == "working"  # the write was not applied


async def heard_on_the_channel(
    store: PostgresTaskStore, make: Callable[[], Awaitable[None]]
) -> list[str]:
    """The payloads the store's channel carries while `make()` runs: on a listener of the
    test's own, read up to a marker notified after `make()` returned (PostgreSQL delivers
    notifications in commit order)."""
    connect = functools.partial(psycopg.AsyncConnection.connect, POSTGRES_URL, autocommit=True)
    async with await connect() as listener:
        await listener.execute(store.sql.listen)
        await make()
        async with await connect() as sender:
            await sender.execute("SELECT pg_notify(%s, 'end')", (store.sql.channel,))
        payloads: list[str] = []
        async for note in listener.notifies():
            if note.payload == "end":
                return payloads
            payloads.append(note.payload)
    raise AssertionError("the listener stopped")


async def queued_seqs(store: PostgresTaskStore) -> dict[str, int]:
    """The seq of each task's `queued` change row."""
    rows = await store._query(
        f"SELECT task_id, seq FROM {store.schema}.changes WHERE kind = 'queued'"
    )
    return {task_id: int(seq) for task_id, seq in rows}


async def test_the_creations_of_a_batch_notify_once_with_every_seq(
    store: PostgresTaskStore,
) -> None:
    """A creation made alone notifies its seq as before; the creations of one batch share
    one notification that lists their seqs, and a reader takes each of them."""
    lone, batch = make_record(), [make_record() for _ in range(5)]

    async def make() -> None:
        await store.create(lone)
        before = round_trips(store)
        async with anyio.create_task_group() as group:
            for task in batch:
                group.start_soon(store.create, task)
        assert round_trips(store) - before == 1  # one batch, its notification included

    with anyio.fail_after(20):
        payloads = await heard_on_the_channel(store, make)
        seqs = await queued_seqs(store)
    listed = ",".join(str(seq) for seq in sorted(seqs[t.task_id] for t in batch))
    assert payloads == [f"{seqs[lone.task_id]}{QUEUED_ONLY}", f"{listed}{QUEUED_ONLY}"]
    heard = Heard()
    heard.add(payloads[1])
    assert sorted(heard.created_seqs) == sorted(seqs[t.task_id] for t in batch)
    assert (heard.created, heard.waking, heard.quiet) == (max(heard.created_seqs), 0, 0)


async def test_the_creations_of_a_refused_batch_notify_alone(store: PostgresTaskStore) -> None:
    """The batch is rolled back (a write psycopg cannot send, after the creations that
    deferred their notification: it sorts after their task ids), nothing of it is
    notified; each creation is made again alone and notifies its own seq, once."""
    tasks = [make_record() for _ in range(3)]
    outcomes: dict[str, Any] = {}
    call = functools.partial(settle, outcomes)
    bad = "zz-nul\x00id"  # task ids are hex: a write for it runs after their creations
    assert all(
        _lock_order(("", {"task_id": t.task_id}, False, False, False))
        < _lock_order(("", {"id": bad}, False, False, False))
        for t in tasks
    )

    async def make() -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(call, "bad", lambda: store.transition(bad, "completed"))
            for task in tasks:
                group.start_soon(store.create, task)

    with anyio.fail_after(20):
        payloads = await heard_on_the_channel(store, make)
        seqs = await queued_seqs(store)
    assert isinstance(outcomes["bad"], StoreError)
    assert sorted(payloads) == sorted(f"{seqs[t.task_id]}{QUEUED_ONLY}" for t in tasks)


def test_a_batchs_notification_wakes_runners_once_and_holds_back_each_row() -> None:
    """The runners of a reader are told "new tasks" once for the batch; each listed row,
    read later, is held back, and a row between them (another statement's) goes."""
    feed, (runner,) = _feed_with(RUNNER)
    heard = Heard()
    heard.add(f"12,14{QUEUED_ONLY}")
    assert feed._announce(heard)
    assert _got(runner) == [(14, "queued", "")]  # NEW_TASKS, once
    rows = [(seq, f"t{seq}", "queued", "working", '{"app": "a"}') for seq in (11, 12, 13, 14)]
    assert feed._dispatch_rows(rows) is None
    assert _got(runner) == [(11, "queued", "t11"), (13, "queued", "t13")]
    assert len(feed.announced) == 0
