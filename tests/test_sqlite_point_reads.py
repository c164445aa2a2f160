"""SQLite point reads on the event loop's thread (`SQLiteWriter.read_now`).

A task by its id (`get`, `peek`: every poll) and the claim's probe run on the calling
thread while the reader's thread is idle, since a hop to that thread and back costs
several times the read. They must answer exactly what the reader's thread answers,
never wait there (a busy reader thread, a lock held by another connection: the read
goes to the thread, which waits as it always has), and leave the connection as they
found it.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from fastmcp_tasks.stores.peeking import peek
from fastmcp_tasks.stores.sqlite import SQLiteTaskStore
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
