"""What wakes whom on PostgreSQL: quiet notifications and the claim that begins a run,
on the machine's real server (skipped without one; failing with `CI=true`).

A task's life on a worker writes several changes; only a claimable task, a cancel
request and an answer (`feed_parts.WAKING_KINDS`) need every process to read the change
rows. A status or message change notifies ` quiet`: a reader whose subscribers want
only the waking kinds reads nothing then, and its next read still delivers every row
in order. A creation notifies with a marker (`feed_parts.QUEUED_ONLY`): such a reader
wakes its runners without reading the rows. The ungated claim begins each task's run in
its own statement (`stores.phases`: `phase` running, one more attempt, the waiting
message cleared with its `message` change), so the worker writes nothing more to start
the task.
"""

from __future__ import annotations

import math
import time
from typing import Any

import anyio
import pytest

from fastmcp_tasks.server.engine.leases import QUEUED_MESSAGE
from fastmcp_tasks.server.engine.watcher import WATCHED
from fastmcp_tasks.server.flow import retry_message
from fastmcp_tasks.stores.base import NEW_TASKS_KIND
from fastmcp_tasks.stores.postgres import PostgresTaskStore
from fastmcp_tasks.stores.postgres.feed import PostgresChangeFeed
from fastmcp_tasks.stores.postgres.feed_parts import (
    NEW_TASKS,
    QUEUED_ONLY,
    WAKING_KINDS,
    Announced,
    Heard,
)
from fastmcp_tasks.stores.postgres.sql import Statements
from fastmcp_tasks.stores.subscriptions import Subscriber
from tests import test_postgres_store
from tests.test_postgres_store import WAIT, fresh_schema, next_change
from tests.test_store_contract import postgres_store, record

pytestmark = pytest.mark.anyio

pair = test_postgres_store.pair  # the fixture: two store instances on one schema


def test_every_kind_the_engine_waits_for_wakes_every_reader() -> None:
    """A kind the watcher follows but a quiet notification could carry would be heard
    late by every worker: the two lists must agree."""
    assert frozenset(WATCHED) <= frozenset(WAKING_KINDS)


async def test_a_quiet_change_is_not_read_by_an_engine_only_reader(
    pair: tuple[PostgresTaskStore, PostgresTaskStore],
) -> None:
    engine, other = pair
    engine._feed.quiet_lag = 60.0  # no timed read (`QUIET_LAG`) within the test
    task = record(app="app")
    await other.create(task)
    with anyio.fail_after(WAIT):
        async with (
            engine.changes(kinds=frozenset(WATCHED)) as engine_feed,
            other.changes() as witness,
        ):
            reads = engine.stats["feed_reads"]
            await other.set_status_message(task.task_id, "step 1")  # quiet
            seen = await next_change(witness)  # committed and notified to every listener
            assert (seen.kind, seen.task_id) == ("message", task.task_id)
            await other.request_cancel(task.task_id)  # waking
            change = await next_change(engine_feed)
            assert (change.kind, change.task_id) == ("cancel_requested", task.task_id)
            assert engine.stats["feed_reads"] - reads == 1  # one read took both rows
            assert engine._feed.watermark is not None
            assert engine._feed.watermark >= await other._newest_change()


async def test_quiet_rows_are_read_by_quiet_lag_at_the_latest(
    pair: tuple[PostgresTaskStore, PostgresTaskStore],
) -> None:
    """Unread quiet rows do not wait for a waking change that may come only after the
    retention trim has removed them (a gap to prove): once told of, they are read
    `quiet_lag` on (`feed.QUIET_LAG`, or half the `change_retention` when that is shorter)."""
    assert postgres_store(change_retention=1.0)._feed.quiet_lag == 0.5  # type: ignore[attr-defined]
    engine, other = pair
    engine._feed.quiet_lag = 0.2
    task = record(app="app")
    await other.create(task)
    with anyio.fail_after(WAIT):
        async with engine.changes(kinds=frozenset(WATCHED)), other.changes():
            await other.set_status_message(task.task_id, "step 1")  # quiet, notified (a
            newest = await other._newest_change()  # reader wants it), nothing after
            while (engine._feed.watermark or 0) < newest:  # noqa: ASYNC110 - no event to wait on
                await anyio.sleep(0.02)


async def test_a_reader_told_of_nothing_still_reads_before_the_retention_trim(
    pair: tuple[PostgresTaskStore, PostgresTaskStore],
) -> None:
    """With nobody registered for quiet changes, they are not notified at all: a worker's
    reader reads past them every `keep_up` (a quarter of `change_retention`)."""
    assert postgres_store(change_retention=100.0)._feed.keep_up == 25.0  # type: ignore[attr-defined]
    engine, other = pair
    engine._feed.keep_up = 0.3
    task = record(app="app")
    await other.create(task)
    with anyio.fail_after(WAIT):
        async with engine.changes(kinds=frozenset(WATCHED)):
            await other.set_status_message(task.task_id, "step 1")  # quiet, not notified
            newest = await other._newest_change()
            while (engine._feed.watermark or 0) < newest:  # noqa: ASYNC110 - no event to wait on
                await anyio.sleep(0.02)


async def test_a_quiet_change_reaches_a_subscriber_that_wants_it_at_once(
    pair: tuple[PostgresTaskStore, PostgresTaskStore],
) -> None:
    listener, writer = pair
    task = record(app="app")
    await writer.create(task)
    with anyio.fail_after(WAIT):
        async with listener.changes(kinds=frozenset({"status", "message"})) as feed:
            await writer.set_status_message(task.task_id, "half way")
            change = await next_change(feed)
            assert (change.kind, change.task_id) == ("message", task.task_id)
            await writer.transition(task.task_id, "completed", result={"content": []})
            change = await next_change(feed)
            assert (change.kind, change.status) == ("status", "completed")


@pytest.mark.parametrize(
    ("phase", "message"),
    [("queued", QUEUED_MESSAGE), ("retry", retry_message(2, 3, "boom")), (None, "Queued: x")],
)
async def test_a_claim_begins_the_run_and_clears_the_waiting_message(
    pair: tuple[PostgresTaskStore, PostgresTaskStore], phase: str | None, message: str
) -> None:
    """A waiting task's message is cleared whatever it says (the phase says it waits; a
    row from before phases, unleased, waits too); a task waiting to restart keeps the
    message recovery wrote, which says which attempt this is."""
    worker, front = pair
    queued = record(app="app", status_message=message, phase=phase)
    restart = "Restarted after an interruption (attempt 2)"
    again = record(app="app", status_message=restart, phase="restart", attempts=1)
    for task in (queued, again):
        await front.create(task)
    before = time.time()
    with anyio.fail_after(WAIT):
        async with front.changes(kinds=frozenset({"message"})) as feed:
            claimed = await worker.claim_queued("worker-1", time.time() + 30, 10, app="app")
            by_id = {task.task_id: task for task in claimed}
            assert set(by_id) == {queued.task_id, again.task_id}
            assert by_id[queued.task_id].status_message is None
            assert by_id[queued.task_id].updated_at >= before
            assert (by_id[queued.task_id].phase, by_id[queued.task_id].attempts) == ("running", 1)
            assert by_id[again.task_id].status_message == restart
            assert (by_id[again.task_id].phase, by_id[again.task_id].attempts) == ("running", 2)
            change = await next_change(feed)  # the cleared message is pushed, once
            assert (change.kind, change.task_id) == ("message", queued.task_id)
            stored = await front.get(queued.task_id)
            assert stored is not None and stored.status_message is None
            assert stored.lease_owner == "worker-1" and stored.phase == "running"
            kept = await front.get(again.task_id)
            assert kept is not None and kept.status_message == restart
            await front.set_status_message(again.task_id, "next")  # the next change is its own
            change = await next_change(feed)
            assert change.task_id == again.task_id
    # the engine's start finds the run begun: no second attempt, no write
    started = await worker.start_run(queued.task_id, "worker-1", None)
    assert started is not None and started.attempts == 1


async def test_the_reader_outlives_its_last_subscriber(
    pair: tuple[PostgresTaskStore, PostgresTaskStore],
) -> None:
    """A front end's listen streams come and go: the next one reuses the LISTEN
    connection, and starts after what was changed while nobody subscribed."""
    reader, writer = pair
    task = record(app="app")
    await writer.create(task)
    with anyio.fail_after(WAIT):
        async with reader.changes() as feed:
            await writer.set_status_message(task.task_id, "one")
            assert (await next_change(feed)).kind == "message"
        pid = reader._feed.listener_pid
        assert pid is not None
        await writer.set_status_message(task.task_id, "two")  # nobody subscribes
        async with reader.changes() as feed:
            assert reader._feed.listener_pid == pid
            await writer.request_cancel(task.task_id)
            change = await next_change(feed)
            assert (change.kind, change.task_id) == ("cancel_requested", task.task_id)


def test_a_notification_says_what_it_announces() -> None:
    """A creation's payload ends with a space, which `int()` (every reader from before
    it) ignores: an older reader takes it as any waking notification."""
    heard = Heard()
    for payload in ("5", "9 quiet", "7 ", "not a seq", "3"):
        heard.add(payload)
    assert (heard.waking, heard.quiet, heard.created) == (5, 9, 7)
    assert int(f"7{QUEUED_ONLY}") == 7


async def test_a_creation_wakes_an_engine_only_reader_without_a_read(
    pair: tuple[PostgresTaskStore, PostgresTaskStore],
) -> None:
    """A worker's reader hands its runners (`NEW_TASKS_KIND`) "new tasks" on a creation's
    notification and reads the rows later (the next waking read, or `quiet_lag`): no row
    read per task. The creation's row, once read, is not handed to them again (they were
    told; `feed_parts.Announced`); the other kinds' rows and a requeued task's `queued`
    row are, in order."""
    engine, other = pair
    engine._feed.quiet_lag = 60.0  # no timed read within the test
    task = record(app="app")
    with anyio.fail_after(WAIT):
        async with (
            engine.changes(kinds=frozenset({*WATCHED, NEW_TASKS_KIND})) as engine_feed,
            other.changes() as witness,
        ):
            reads = engine.stats["feed_reads"]
            await other.create(task)  # unleased: a `queued` row, notified as a creation
            seen = await next_change(witness)  # a reader that wants every kind reads it
            assert (seen.kind, seen.task_id) == ("queued", task.task_id)
            woken = await next_change(engine_feed)
            assert woken == NEW_TASKS
            assert engine.stats["feed_reads"] == reads  # woken without reading a row
            assert len(engine._feed.announced) == 1
            claimed = await other.claim(task.task_id, "w", time.time() + 60)
            assert claimed is not None
            assert await other.requeue(task.task_id, "w") is not None  # waking: read
            again = await next_change(engine_feed)
            assert (again.kind, again.task_id, again.details) == (
                "queued",
                task.task_id,
                {"app": "app"},
            )
            await other.request_cancel(task.task_id)
            change = await next_change(engine_feed)
            assert (change.kind, change.task_id) == ("cancel_requested", task.task_id)
            assert len(engine._feed.announced) == 0  # the creation's row was read, unsent


def _feed_with(*kinds: frozenset[str]) -> tuple[PostgresChangeFeed, list[Any]]:
    """A change feed with no reader (its logic alone) and subscribers of `kinds`."""

    async def never(query: str, params: tuple[Any, ...]) -> Any:
        raise AssertionError("no statement here")

    feed = PostgresChangeFeed(
        url="postgresql://nowhere",
        options={},
        sql=Statements("s"),
        connect_timeout=1.0,
        application_name="test",
        label="test",
        gap_timeout=1.0,
        stats={},
        scrub=str,
        pooled=never,
    )
    feed.watermark = 10
    receives = []
    for wanted in kinds:
        send, receive = anyio.create_memory_object_stream[tuple[float, Any]](math.inf)
        feed._subscribers.add(Subscriber(None, wanted, send, 0))
        receives.append(receive)
    return feed, receives


def _got(receive: Any) -> list[tuple[float, str, str]]:
    out = []
    while True:
        try:
            seq, change = receive.receive_nowait()
        except anyio.WouldBlock:
            return out
        out.append((seq, change.kind, change.task_id))


RUNNER = frozenset({*WATCHED, NEW_TASKS_KIND})


def test_only_a_creation_announced_before_its_row_is_read_is_held_back() -> None:
    """A creation heard first: "new tasks" now, and its row, read later, not again. A
    creation whose row a read took before its notification was heard (it committed
    after a later seq's): the row itself, and the late notification announces nothing.
    A `queued` row of another statement (a requeue, a gate's turn) always goes."""
    feed, (runner,) = _feed_with(RUNNER)
    heard = Heard()
    heard.add(f"12{QUEUED_ONLY}")
    assert feed._announce(heard)
    assert _got(runner) == [(12, "queued", "")]  # NEW_TASKS
    rows = [
        (11, "t11", "queued", "working", '{"app": "a"}'),  # its notification not heard yet
        (12, "t12", "queued", "working", '{"app": "a"}'),  # announced: held back
        (13, "t13", "queued", "working", '{"app": "a"}'),  # a requeue's (waking)
    ]
    assert feed._dispatch_rows(rows) is None
    assert _got(runner) == [(11, "queued", "t11"), (13, "queued", "t13")]
    assert len(feed.announced) == 0
    late = Heard()
    late.add(f"11{QUEUED_ONLY}")  # heard after its row was read
    assert not feed._announce(late)
    assert _got(runner) == []


def test_a_subscriber_not_told_still_gets_every_creation_row() -> None:
    """With a subscriber that takes no announcements nothing is announced (every row is
    read and handed to everyone); a row announced earlier, while only runners listened,
    still reaches a subscriber that came since and wants it."""
    feed, (runner, plain) = _feed_with(RUNNER, frozenset(WATCHED))
    heard = Heard()
    heard.add(f"11{QUEUED_ONLY}")
    assert not feed._announce(heard)
    feed.announced.add([12], 10)  # told while only runners listened
    feed._dispatch_rows(
        [
            (11, "t11", "queued", "working", '{"app": "a"}'),
            (12, "t12", "queued", "working", '{"app": "a"}'),
        ]
    )
    assert _got(runner) == [(11, "queued", "t11")]
    assert _got(plain) == [(11, "queued", "t11"), (12, "queued", "t12")]


def test_announced_creations_are_forgotten_once_passed_unread() -> None:
    """With no subscriber the watermark moves past unread rows: what was announced for
    them is dropped, so the set holds only rows still to come."""
    announced = Announced()
    announced.add([5, 9, 12], 8)  # 5: read already (at or under the watermark)
    assert len(announced) == 2
    announced.forget_through(10)
    assert len(announced) == 1 and announced.take(12) and not announced.take(12)


async def test_an_announced_creation_trimmed_unread_is_forgotten() -> None:
    """A creation's row the retention trim removed before the reader read it (more than
    `max_changes` changes within `quiet_lag`) is passed as a gap, and what was announced
    for it is forgotten then: a worker's reader keeps nothing for rows it will never read."""
    schema = fresh_schema()
    engine = postgres_store(schema=schema)
    other = postgres_store(schema=schema, max_changes=1)
    assert isinstance(engine, PostgresTaskStore) and isinstance(other, PostgresTaskStore)
    await engine.open()
    await other.open()
    try:
        engine._feed.quiet_lag = 60.0
        first, second = record(app="app"), record(app="app")
        with anyio.fail_after(WAIT):
            async with engine.changes(kinds=RUNNER) as feed:
                await other.create(first)
                await other.create(second)
                while len(engine._feed.announced) < 2:  # both heard, neither read
                    assert await next_change(feed) == NEW_TASKS
                await other.purge_expired(time.time())  # trims the first creation's row
                await other.request_cancel(second.task_id)  # waking: read now
                change = await next_change(feed)
                while change == NEW_TASKS:
                    change = await next_change(feed)
                assert (change.kind, change.task_id) == ("cancel_requested", second.task_id)
                assert len(engine._feed.announced) == 0
    finally:
        await other.close()
        await engine.close()


async def test_a_creation_is_read_for_a_subscriber_that_takes_no_announcements(
    pair: tuple[PostgresTaskStore, PostgresTaskStore],
) -> None:
    """Without `NEW_TASKS_KIND` a subscriber of the same kinds gets the row itself, as the
    store contract says: every change in order, each with its task."""
    engine, other = pair
    engine._feed.quiet_lag = 60.0
    task = record(app="app")
    with anyio.fail_after(WAIT):
        async with engine.changes(kinds=frozenset(WATCHED)) as plain:
            await other.create(task)
            change = await next_change(plain)
            assert (change.kind, change.task_id) == ("queued", task.task_id)
