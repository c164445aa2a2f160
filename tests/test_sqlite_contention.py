"""The SQLite store while other connections and processes use the file, and when idle.

Another connection holding the write lock (`BEGIN IMMEDIATE`, as another
process's long transaction would) must not stall reads; a write whose caller
gives up while it waits for that lock must never happen, and one that already
runs must report its outcome. An idle store costs the file feed polls that back
off, one index probe per `claim_queued` and no write transaction (`store.stats`),
and a change-feed poll that fails is retried without losing or repeating a
change. Also: concurrent writers never see `SQLITE_BUSY`, and another process's
writes reach this process's feed.
"""

from __future__ import annotations

import dataclasses
import logging
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import AsyncIterator
from contextlib import closing
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from fastmcp_tasks.errors import StoreError
from fastmcp_tasks.stores.base import TaskChange, TaskRecord
from fastmcp_tasks.stores.sqlite import SQLiteTaskStore
from fastmcp_tasks.stores.sqlite import schema as sqlite_schema
from fastmcp_tasks.stores.sqlite.feed import ChangeReader, Feed
from tests.test_sqlite_store import next_change, opened, record, rows

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parents[1]


async def until(condition: Any, within: float = 5.0) -> None:
    """Poll `condition()` until it is true, failing after `within` seconds."""
    with anyio.fail_after(within):
        while not condition():  # noqa: ASYNC110 - counters and thread state have no event
            await anyio.sleep(0.01)


def hold_write_lock(path: Path) -> sqlite3.Connection:
    """Another connection inside `BEGIN IMMEDIATE` (the file's write lock); COMMIT frees it."""
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    return other


# --- contention ----------------------------------------------------------------


@pytest.mark.parametrize(
    "options", [{}, {"busy_timeout": 0, "busy_retries": 12}], ids=["timeout", "backoff"]
)
async def test_concurrent_writers_never_see_busy(tmp_path: Path, options: dict[str, float]) -> None:
    path = tmp_path / "busy.db"
    async with opened(path, **options) as a, opened(path, **options) as b:

        async def churn(store: SQLiteTaskStore, n: int) -> None:
            for _ in range(n):
                task = record()
                await store.create(task)
                await store.set_status_message(task.task_id, "half")
                await store.transition(task.task_id, "completed", result={"content": []})

        async with anyio.create_task_group() as group:
            for store in (a, b, a, b):
                group.start_soon(churn, store, 40)
    assert rows(path, "tasks") == 160


async def test_a_lock_held_past_the_bound_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "locked.db"
    async with opened(path, busy_timeout=0.01, busy_retries=2) as store:
        with closing(sqlite3.connect(path, isolation_level=None)) as other:
            other.execute("BEGIN IMMEDIATE")
            with pytest.raises(StoreError, match="locked"):
                await store.create(record())
            other.execute("COMMIT")
        await store.create(record())


async def test_a_lock_released_within_the_bound_is_retried(tmp_path: Path) -> None:
    path = tmp_path / "locked.db"
    async with opened(path, busy_timeout=0.01, busy_retries=10) as store:
        other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        other.execute("BEGIN IMMEDIATE")

        def commit() -> None:
            other.execute("COMMIT")
            other.close()

        release = threading.Timer(0.3, commit)
        release.start()
        task = record()
        await store.create(task)  # waits out the lock through backoff
        release.join()
        assert await store.get(task.task_id) is not None


async def test_reads_answer_while_another_connection_holds_the_write_lock(tmp_path: Path) -> None:
    path = tmp_path / "held.db"
    async with opened(path, busy_timeout=10, busy_retries=0) as store:
        task, blocked = record(), record()
        await store.create(task)
        other = hold_write_lock(path)
        try:
            other.execute("UPDATE tasks SET status_message = 'uncommitted'")
            async with anyio.create_task_group() as group:
                group.start_soon(store.create, blocked)  # the writer waits for the lock
                assert store._writer is not None
                await until(store._writer.lock.locked)
                with anyio.fail_after(1):  # not behind the blocked write
                    got = await store.get(task.task_id)
                    many = await store.get_many([task.task_id, blocked.task_id])
                    active = await store.active_tasks()
                    leases = await store.active_leases()
                    listed = await store.list_tasks()
                assert got is not None and got.status_message is None  # a committed snapshot
                assert list(many) == [task.task_id]
                assert [r.task_id for r in active] == [r.task_id for r in leases]
                assert [r.task_id for r in listed] == [task.task_id]
                other.execute("ROLLBACK")
        finally:
            other.close()
        assert await store.get(blocked.task_id) is not None  # read after the awaited write


async def test_a_write_abandoned_while_it_waits_for_the_lock_never_happens(tmp_path: Path) -> None:
    path = tmp_path / "abandoned.db"
    async with opened(path, busy_timeout=10, busy_retries=0) as store:
        gone = record()
        other = hold_write_lock(path)
        try:
            with anyio.move_on_after(0.3) as scope:
                await store.create(gone)
            assert scope.cancelled_caught
            other.execute("COMMIT")  # the writer now gets the lock, and skips the create
        finally:
            other.close()
        later = record()
        await store.create(later)  # queued after the abandoned one
        assert await store.get(gone.task_id) is None
        assert await store.get(later.task_id) is not None
        assert rows(path, "tasks") == 1
        assert store.stats.abandoned == 1 and store.stats.shielded == 0


async def test_a_write_cancelled_while_it_runs_reports_its_outcome(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started, proceed = threading.Event(), threading.Event()
    real_to_row = sqlite_schema.to_row

    def slow_to_row(task: TaskRecord) -> tuple[Any, ...]:  # runs on the writer thread
        started.set()
        assert proceed.wait(10)
        return real_to_row(task)

    async with opened(tmp_path / "running.db") as store:
        task = record()
        scope = anyio.CancelScope()
        reported: list[str] = []

        async def create() -> None:
            with scope:
                await store.create(task)
                reported.append("committed")

        monkeypatch.setattr(sqlite_schema, "to_row", slow_to_row)
        async with anyio.create_task_group() as group:
            group.start_soon(create)
            assert await anyio.to_thread.run_sync(started.wait, 10)
            scope.cancel()  # the create is past BEGIN: it is awaited, not abandoned
            await until(lambda: store.stats.shielded == 1)
            proceed.set()
        assert reported == ["committed"]
        assert await store.get(task.task_id) is not None
        assert store.stats.abandoned == 0


async def _drain(feed: AsyncIterator[TaskChange], into: list[TaskChange]) -> None:
    async for change in feed:
        into.append(change)


async def test_an_idle_store_takes_no_write_lock(tmp_path: Path) -> None:
    async with opened(tmp_path / "idle.db") as store:  # poll 25 ms, idle 1 s
        seen: list[TaskChange] = []
        async with store.changes() as feed, anyio.create_task_group() as group:
            group.start_soon(_drain, feed, seen)
            before = dataclasses.replace(store.stats)
            deadline, probes = anyio.current_time() + 1.5, 0
            while anyio.current_time() < deadline:  # a worker looking for queued tasks
                assert await store.claim_queued("w", time.time() + 60, 4, app="a") == []
                assert await store.claim_queued("w", time.time() + 60, 4) == []
                probes += 2
                await anyio.sleep(0.05)
            after = dataclasses.replace(store.stats)
            group.cancel_scope.cancel()
    assert seen == []
    assert after.write_transactions == before.write_transactions
    assert probes <= after.reads - before.reads <= probes + 1  # + the feed's first row read
    assert 1 <= after.feed_polls - before.feed_polls <= 12  # backed off: 60 at a fixed 25 ms


async def test_an_idle_feed_backs_off_and_comes_back(tmp_path: Path) -> None:
    path = tmp_path / "backoff.db"
    async with opened(path, idle_poll_interval=0.2) as a, opened(path) as b:
        task = record()
        await a.create(task)
        seen: list[tuple[TaskChange, float]] = []

        async def follow(feed: Feed) -> None:
            async for change in feed:
                seen.append((change, feed.interval))

        async with a.changes(frozenset({task.task_id})) as feed, anyio.create_task_group() as g:
            assert isinstance(feed, Feed)
            g.start_soon(follow, feed)
            await until(lambda: feed.interval == 0.2)  # 25 ms doubled while nothing came
            await b.request_cancel(task.task_id)  # another instance: no local wake-up
            await until(lambda: len(seen) == 1, within=2)
            g.cancel_scope.cancel()
    (change, interval) = seen[0]
    assert change.kind == "cancel_requested" and interval == a.poll_interval


async def test_the_feed_survives_failing_polls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "flaky.db"
    real_poll = ChangeReader.poll
    failures = [StoreError(f"disk I/O error (injected {n})") for n in range(3)]

    def flaky_poll(self: ChangeReader, after: int, seen: int) -> tuple[int, list[Any]]:
        if failures:
            raise failures.pop()
        return real_poll(self, after, seen)

    caplog.set_level(logging.INFO, logger="fastmcp_tasks.stores.sqlite")
    async with opened(path) as a, opened(path) as b:
        task = record()
        await a.create(task)
        async with a.changes(frozenset({task.task_id})) as feed:
            monkeypatch.setattr(ChangeReader, "poll", flaky_poll)
            await b.request_input(task.task_id, {"q": {}})
            first = await next_change(feed, "inputs", within=5)
            await b.request_cancel(task.task_id)
            second = await anext(feed)  # the very next change: nothing delivered twice
    assert failures == []
    assert first.details == {"keys": ["q"]} and second.kind == "cancel_requested"
    logged = [
        (r.levelno, r.getMessage()) for r in caplog.records if "change feed" in r.getMessage()
    ]
    assert [level for level, _ in logged] == [logging.WARNING, logging.INFO]
    assert "injected" in logged[0][1]


# --- two processes -----------------------------------------------------------------

_OTHER_PROCESS = textwrap.dedent(
    """
    import sys, anyio
    from fastmcp_tasks.stores.sqlite import SQLiteTaskStore

    async def main(path, cancel_id, answer_id):
        store = SQLiteTaskStore(path)
        await store.open()
        try:
            marked = await store.request_cancel(cancel_id)
            accepted = await store.answer_input(answer_id, {"q": {"action": "accept"}})
            print(marked.cancel_requested, sorted(accepted))
        finally:
            await store.close()

    anyio.run(main, *sys.argv[1:])
    """
)


async def test_another_process_reaches_this_process_change_feed(tmp_path: Path) -> None:
    path = tmp_path / "ipc.db"
    async with opened(path, poll_interval=0.02) as store:
        running, asking = record(), record()
        await store.create(running)
        await store.create(asking)
        await store.request_input(asking.task_id, {"q": {"method": "elicitation/create"}})
        async with store.changes(frozenset({running.task_id, asking.task_id})) as feed:
            command = [sys.executable, "-c", _OTHER_PROCESS, str(path)]
            command += [running.task_id, asking.task_id]
            process = await anyio.open_process(command, cwd=REPO, stderr=subprocess.STDOUT)
            try:
                cancel = await next_change(feed, "cancel_requested", within=20)
                answered = await next_change(feed, "answered", within=5)
                with anyio.fail_after(10):
                    await process.wait()
                    assert process.stdout is not None
                    output = (await process.stdout.receive()).decode()
            finally:
                if process.returncode is None:
                    process.kill()
                    await process.wait()
        assert process.returncode == 0, output
        assert output.strip() == "True ['q']"
        assert cancel.task_id == running.task_id
        assert answered.task_id == asking.task_id and answered.details == {"keys": ["q"]}
        resumed = await store.get(asking.task_id)
        assert resumed is not None and resumed.status == "working"
        assert await store.take_answers(asking.task_id, frozenset({"q"})) == {
            "q": {"action": "accept"}
        }
