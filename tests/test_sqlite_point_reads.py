"""SQLite point reads on the event loop's thread (`SQLiteWriter.read_now`).

A task by its id (`get`, `peek`: every poll) and the claim's probe run on the calling
thread while the reader's thread is idle, since a hop to that thread and back costs
several times the read. They must answer exactly what the reader's thread answers,
never wait there (a busy reader thread, a lock held by another connection: the read
goes to the thread, which waits as it always has), and leave the connection as they
found it.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from fastmcp_tasks.stores.peeking import peek
from fastmcp_tasks.stores.sqlite import SQLiteTaskStore, writer
from fastmcp_tasks.stores.sqlite.tx import Tx
from fastmcp_tasks.testing.base import make_record

pytestmark = pytest.mark.anyio


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteTaskStore]:
    store = SQLiteTaskStore(tmp_path / "tasks.db")
    await store.open()
    try:
        yield store
    finally:
        await store.close()


async def test_a_task_read_by_id_is_read_on_the_loop_thread_and_the_same(
    store: SQLiteTaskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`get` and `peek` read on the event loop's thread, count as reads, and return what
    the reader's thread returns for the same task."""
    task = make_record(app="app")
    await store.create(task)
    threads: list[int] = []
    load = Tx.load

    def recording(self: Tx, task_id: str, **kwargs: object) -> object:
        threads.append(threading.get_ident())
        return load(self, task_id, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Tx, "load", recording)
    reads = store.stats.reads
    got, lean = await store.get(task.task_id), await peek(store, task.task_id)
    assert threads == [threading.get_ident()] * 2  # this (the loop's) thread, twice
    assert store.stats.reads - reads == 2
    assert got == await store._read(lambda tx: tx.load(task.task_id))
    assert lean == await store._read(lambda tx: tx.load(task.task_id, lean=True))
    assert threads[-1] != threading.get_ident()  # those two went to the reader's thread
    assert got is not None and got.arguments == task.arguments
    assert lean is not None and lean.status == "working"


async def test_a_busy_reader_thread_takes_the_read(store: SQLiteTaskStore) -> None:
    """While the reader's thread holds its connection (a batch running), a point read is
    not run here: `read_now` declines at once and the caller queues it for the thread."""
    reader = store._reader
    assert reader is not None
    assert reader.lock.acquire()
    try:
        assert reader.read_now(lambda tx: 1, 1000) == (False, None)
    finally:
        reader.lock.release()
    assert reader.read_now(lambda tx: 1, 1000) == (True, 1)


async def test_a_read_on_the_loop_thread_never_waits_for_a_lock(
    store: SQLiteTaskStore,
) -> None:
    """While a point read runs on the loop's thread SQLite's busy timeout is 0, so a
    lock it meets fails it at once instead of blocking the loop for the timeout; the
    read then goes to the reader's thread, and the timeout is put back either way."""
    reader = store._reader
    assert reader is not None
    seen: list[int] = []

    def locked(tx: Tx) -> None:
        seen.append(tx.conn.execute("PRAGMA busy_timeout").fetchone()[0])
        raise sqlite3.OperationalError("database is locked")

    assert reader.read_now(locked, 1000) == (False, None)
    assert seen == [0]
    assert reader.conn.execute("PRAGMA busy_timeout").fetchone()[0] == 1000
    assert reader.read_now(
        lambda tx: tx.conn.execute("PRAGMA busy_timeout").fetchone()[0], 1000
    ) == (
        True,
        0,
    )
    assert reader.conn.execute("PRAGMA busy_timeout").fetchone()[0] == 1000


async def test_a_bad_row_goes_to_the_thread_which_reports_it(store: SQLiteTaskStore) -> None:
    """Anything a point read meets on the loop's thread (here, the function raising)
    sends it to the reader's thread, whose answer is the one a caller always got."""
    reader = store._reader
    assert reader is not None

    def broken(tx: Tx) -> None:
        raise ValueError("a row that does not decode")

    assert reader.read_now(broken, 1000) == (False, None)
    with pytest.raises(Exception) as raised:
        await store._point_read(broken)
    with pytest.raises(Exception) as through_thread:
        await store._read(broken)
    assert type(raised.value) is type(through_thread.value)
    assert str(raised.value) == str(through_thread.value)


async def test_a_closed_store_answers_not_open(tmp_path: Path) -> None:
    """After `close`, a point read neither touches the closed connection nor answers
    anything but the store's own "not open"."""
    store = SQLiteTaskStore(tmp_path / "tasks.db")
    await store.open()
    reader = store._reader
    assert reader is not None
    await store.close()
    assert reader.read_now(lambda tx: 1, 1000) == (False, None)
    with pytest.raises(Exception, match="not open"):
        await store.get("sq-missing")


async def test_a_read_by_id_still_yields_to_the_loop_and_can_be_cancelled(
    store: SQLiteTaskStore,
) -> None:
    """Each read takes a turn of the event loop, as a hop to the thread did: a loop of
    reads lets other tasks run between them, and a cancelled scope stops at the read."""
    task = make_record(app="app")
    await store.create(task)
    ran = anyio.Event()

    async def other() -> None:
        ran.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(other)  # ready to run at the next turn of the loop
        assert await store.get(task.task_id) is not None
        assert ran.is_set()  # it ran during the read
    reached = False
    with anyio.CancelScope() as scope:
        scope.cancel()
        await store.get(task.task_id)
        reached = True
    assert not reached


async def test_a_slow_read_sends_the_next_reads_to_the_thread_for_a_while(
    store: SQLiteTaskStore, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """SQLite's WAL read setup may retry for seconds whatever the busy timeout (another
    process holding its locks): a read on the loop that took longer than `SLOW_INLINE`
    sends the next ones to the reader thread for `INLINE_PAUSE`, and says so."""
    reader = store._reader
    assert reader is not None
    now = [1000.0]
    monkeypatch.setattr(writer, "_clock", lambda: now[0])

    def slow(tx: Tx) -> int:
        now[0] += writer.SLOW_INLINE * 2
        return 7

    with caplog.at_level(logging.INFO, logger="fastmcp_tasks.stores.sqlite"):
        assert reader.read_now(slow, 1000) == (True, 7)  # this one had run
    assert "on the event loop" in caplog.text
    assert reader.read_now(lambda tx: 1, 1000) == (False, None)
    now[0] += writer.INLINE_PAUSE
    assert reader.read_now(lambda tx: 1, 1000) == (True, 1)


class _FailingRestore:
    """The reader's connection, failing once to put the busy timeout back."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self.failed = False

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if sql == "PRAGMA busy_timeout = 1000" and not self.failed:
            self.failed = True
            raise sqlite3.OperationalError("out of memory")
        return self._conn.execute(sql, *args)

    def __getattr__(self, name: str) -> object:
        return getattr(self._conn, name)


async def test_a_timeout_not_put_back_is_put_back_by_the_thread(store: SQLiteTaskStore) -> None:
    """Should putting the busy timeout back fail after a read on the loop, no read runs
    there again and the reader thread puts it back before its next batch: its reads wait
    for a lock as before, never with a timeout of 0."""
    reader = store._reader
    assert reader is not None
    real = reader.conn
    failing = _FailingRestore(real)
    reader.conn = failing  # type: ignore[assignment]
    try:
        assert reader.read_now(lambda tx: 1, 1000) == (False, None)
        assert failing.failed
        assert real.execute("PRAGMA busy_timeout").fetchone()[0] == 0  # not put back
        assert reader.read_now(lambda tx: 1, 1000) == (False, None)  # none here again
        timeout = await store._read(lambda tx: tx.conn.execute("PRAGMA busy_timeout").fetchone())
        assert timeout[0] == 1000
    finally:
        reader.conn = real
