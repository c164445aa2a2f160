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

import time

import anyio
import pytest

from fastmcp_tasks.server.engine.leases import QUEUED_MESSAGE
from fastmcp_tasks.server.engine.watcher import WATCHED
from fastmcp_tasks.server.flow import retry_message
from fastmcp_tasks.stores.base import NEW_TASKS_KIND
from fastmcp_tasks.stores.postgres import PostgresTaskStore
from fastmcp_tasks.stores.postgres.feed_parts import NEW_TASKS, QUEUED_ONLY, WAKING_KINDS, Heard
from tests import test_postgres_store
from tests.test_postgres_store import WAIT, next_change
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
    read per task."""
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
            await other.request_cancel(task.task_id)  # waking: read, with what waited
            rows = [await next_change(engine_feed) for _ in range(2)]
            assert [(c.kind, c.task_id) for c in rows] == [
                ("queued", task.task_id),
                ("cancel_requested", task.task_id),
            ]
            assert engine.stats["feed_reads"] - reads == 1


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
