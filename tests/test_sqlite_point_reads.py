"""The SQLite store's point reads on the event loop's own connection (`_read_here`).

`get`, `peek` and the probe before `claim_queued` read one indexed row on a read-only
connection of the event loop's own instead of hopping to the reader thread and back.
They answer what the reader thread answers (compared read for read) and make no hop while
the file is free. The loop's connection never waits (busy timeout 0): a read that finds
the file busy goes to the reader thread, whose connection waits out the lock off the
loop (in WAL mode a reader is refused only in rare moments, such as a log being
recovered after a crash, so the refusal is played by the connection here).
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from fastmcp_tasks.errors import StoreError
from fastmcp_tasks.stores.sqlite.writer import SQLiteWriter
from tests.test_sqlite_store import opened, record

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def hops(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The reads handed to a reader thread while the test runs."""
    handed: list[str] = []
    original = SQLiteWriter.submit

    async def counting(self: SQLiteWriter, fn: Any, write: bool, **options: Any) -> Any:
        if self.read_only:
            handed.append(getattr(fn, "__qualname__", repr(fn)))
        return await original(self, fn, write, **options)

    monkeypatch.setattr(SQLiteWriter, "submit", counting)
    return handed


async def test_point_reads_answer_as_the_reader_does_without_a_hop(
    tmp_path: Path, hops: list[str]
) -> None:
    with anyio.fail_after(10):
        async with opened(tmp_path / "here.db") as store:
            task = record(status_message="half way", app="a")
            await store.create(task)
            gone = record(retention_ms=1)
            await store.create(gone)
            await store.transition(gone.task_id, "completed", result={"content": []})
            await anyio.sleep(0.01)  # `gone` expires
            del hops[:]
            for task_id in (task.task_id, gone.task_id, "no-such-task"):
                assert await store.get(task_id) == await store._read(
                    lambda tx, i=task_id: tx.load(i)  # type: ignore[misc]
                )
                assert await store.peek(task_id) == await store._read(
                    lambda tx, i=task_id: tx.load(i, lean=True)  # type: ignore[misc]
                )
            assert len(hops) == 6  # the reader's answers only
            del hops[:]
            claimed = await store.claim_queued("w", time.time() + 60, 4, app="a")
            assert [r.task_id for r in claimed] == [task.task_id]
            assert await store.claim_queued("w", time.time() + 60, 4) == []  # probe: nothing
            assert hops == []


class Busy:
    """The loop's connection as it is while the file is busy: every statement refused."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.refused = 0

    def execute(self, *args: Any) -> Any:
        self.refused += 1
        raise sqlite3.OperationalError("database is locked")


async def test_the_loops_connection_never_waits_and_a_busy_read_goes_to_the_reader(
    tmp_path: Path, hops: list[str]
) -> None:
    with anyio.fail_after(10):
        async with opened(tmp_path / "busy.db", busy_timeout=2.0) as store:
            here = store._here
            assert here is not None
            assert here.execute("PRAGMA busy_timeout").fetchone() == (0,)  # refuses at once
            assert here.execute("PRAGMA query_only").fetchone() == (1,)
            task = record(app="a")
            await store.create(task)
            busy = Busy(here)
            store._here = busy  # type: ignore[assignment]
            try:
                got, peeked = await store.get(task.task_id), await store.peek(task.task_id)
                claimed = await store.claim_queued("w", time.time() + 60, 4, app="a")
            finally:
                store._here = here
            assert busy.refused == 3 and len(hops) == 3  # each went to the reader instead
            assert got is not None and got.arguments == task.arguments
            assert peeked is not None and peeked.arguments is None
            assert [r.task_id for r in claimed] == [task.task_id]


async def test_a_point_read_of_a_closed_store_is_a_store_error(tmp_path: Path) -> None:
    async with opened(tmp_path / "closed.db") as store:
        task = record()
        await store.create(task)
    with anyio.fail_after(5), pytest.raises(StoreError, match="not open"):
        await store.get(task.task_id)


async def test_a_gated_queue_reads_its_rooms_on_the_reader_thread(
    tmp_path: Path, hops: list[str]
) -> None:
    with anyio.fail_after(10):
        async with opened(tmp_path / "gated.db") as store:
            held = record(gate="g", gate_limit=1)
            await store.create(held)
            assert [r.task_id for r in await store.claim_queued("w", time.time() + 60, 4)] == [
                held.task_id
            ]
            waiting = record(gate="g", gate_limit=1)
            await store.create(waiting)
            del hops[:]
            assert await store.claim_queued("w", time.time() + 60, 4) == []  # the gate is full
            assert len(hops) == 1  # its rooms, a seek and a count a gate: not on the loop
            await store.transition(held.task_id, "completed", result={"content": []})
            claimed = await store.claim_queued("w", time.time() + 60, 4)
            assert [r.task_id for r in claimed] == [waiting.task_id]


#: Reads on the loop's own connection racing the store's close, many times over: each
#: answers or says the store is not open; none may find its connection closed under it.
CLOSING_RACE = """
import asyncio, sys, tempfile
from pathlib import Path
from fastmcp_tasks.errors import StoreError
from fastmcp_tasks.stores.sqlite import SQLiteTaskStore
from fastmcp_tasks.testing import make_record

async def main():
    outcomes = {"read": 0, "closed": 0}
    with tempfile.TemporaryDirectory() as tmp:
        for round in range(150):
            store = SQLiteTaskStore(Path(tmp) / f"race{round}.db")
            await store.open()
            task = make_record()
            await store.create(task)

            async def reader():
                while True:
                    try:
                        await store.get(task.task_id)
                        await store.peek(task.task_id)
                        outcomes["read"] += 1
                    except StoreError:
                        outcomes["closed"] += 1
                        return
                    await asyncio.sleep(0)

            readers = [asyncio.create_task(reader()) for _ in range(4)]
            await asyncio.sleep(0)
            await store.close()
            await asyncio.gather(*readers)
    print(outcomes["read"] > 0, outcomes["closed"] == 600)

asyncio.run(main())
"""


def test_point_reads_racing_close_end_cleanly() -> None:
    done = subprocess.run(
        [sys.executable, "-X", "faulthandler", "-c", textwrap.dedent(CLOSING_RACE)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "True"]
