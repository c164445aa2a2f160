"""Flow control on the SQLite store beyond the shared contract (`FlowContract`).

Older files migrate in place to exactly a new file's schema (version 4). Tombstones
last `tombstone_retention`, at most `MAX_TOMBSTONES`. Two stores on one file, or two
processes, racing one dedupe key make one task; racing one gate never exceed it, and
share its turns. A full gate or a waiting retry costs a worker no write lock. The
ungated claim costs the same SQLite VM steps with 10,000 queued tasks as with 600.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
import time
from contextlib import closing
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest

from fastmcp_tasks import TaskRecord, store_from_url
from fastmcp_tasks.errors import ConfigurationError
from fastmcp_tasks.stores.base import ActiveCaps
from fastmcp_tasks.stores.operations import TaskEvent
from fastmcp_tasks.stores.sqlite import SQLiteTaskStore
from fastmcp_tasks.stores.sqlite import flow as sqlite_flow
from fastmcp_tasks.stores.sqlite.schema import (
    APPLICATION_ID,
    COLUMNS,
    INSERT_TASK,
    MIGRATIONS,
    SCHEMA_VERSION,
    to_row,
)
from fastmcp_tasks.stores.sqlite.tx import ready_where
from tests.test_sqlite_store import next_change, opened, record, rows

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parents[1]


def later() -> float:
    return time.time() + 3600.0


def write_old_file(path: Path, version: int, tasks: list[TaskRecord]) -> None:
    """A task store file as schema `version` left it, holding `tasks` (their columns of
    that version; the others did not exist yet)."""
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        for step in range(version):
            MIGRATIONS[step](conn)
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version = {version}")
        conn.execute(
            "INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?)", (version,)
        )
        present = {row[1] for row in conn.execute("PRAGMA table_info(tasks)")}
        for task in tasks:
            row = dict(zip((*COLUMNS, "expires_at"), to_row(task), strict=True))
            kept = {name: value for name, value in row.items() if name in present}
            marks = ", ".join("?" * len(kept))
            conn.execute(
                f"INSERT INTO tasks ({', '.join(kept)}) VALUES ({marks})", list(kept.values())
            )
        conn.execute("UPDATE meta SET value = ? WHERE key = 'task_count'", (len(tasks),))


def layout(path: Path) -> tuple[list[tuple[Any, ...]], set[tuple[str, str, str]]]:
    """The `tasks` columns (name, type, not null, default) and every table, index, trigger."""
    with closing(sqlite3.connect(path)) as conn:
        columns = [tuple(row[1:5]) for row in conn.execute("PRAGMA table_info(tasks)")]
        query = "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"
        return columns, set(conn.execute(query).fetchall())


# --- migration --------------------------------------------------------------------


@pytest.mark.parametrize("version", [1, 2, 3, 4, 5, 6])
async def test_an_older_file_migrates_in_place(tmp_path: Path, version: int) -> None:
    assert SCHEMA_VERSION == 7 and sorted(MIGRATIONS) == [0, 1, 2, 3, 4, 5, 6]
    path = tmp_path / f"v{version}.db"
    queued = record(app="billing" if version >= 3 else None)
    held = record(lease_owner="w0", lease_expires=later())
    ended = replace(record(), status="completed", terminal_at=time.time(), result_json="{}")
    tasks = [queued, held, ended]
    write_old_file(path, version, tasks)
    async with opened(path) as store:
        kept = await store.get(queued.task_id)
        assert kept is not None and kept.arguments == queued.arguments
        assert (kept.gate, kept.gate_limit, kept.not_before, kept.dedupe_key) == (None,) * 4
        assert kept.retries == 0 and kept.phase is None  # from before phases (`stores.phases`)
        taken = await store.claim_queued("w", later(), 5, app=queued.app)
        assert [r.task_id for r in taken] == [queued.task_id]
        gated = record(gate="deploy", gate_limit=1, dedupe_key="k")
        assert await store.create(gated, dedupe_window=60) is None
        found = await store.create(record(dedupe_key="k"), dedupe_window=60)
        assert found is not None and found.task_id == gated.task_id
        assert [r.task_id for r in await store.claim_queued("w", later(), 5)] == [gated.task_id]
        # the operator records (version 6) work on the tasks the file already held
        await store.add_events([(t.task_id, TaskEvent(time.time(), "created")) for t in tasks])
        assert [e.kind for e in await store.events(held.task_id)] == ["created"]
        assert await store.purge_finished(time.time() + 1) == 1
        assert await store.events(ended.task_id) == []
        stone = await store.tombstone(ended.task_id)
        assert stone is not None and stone.reason == "purged" and stone.owner == "alice"
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        meta = dict(conn.execute("SELECT key, value FROM meta"))
        where, params = ready_where("x", 0.0)
        ready = f"EXPLAIN QUERY PLAN SELECT * {where} ORDER BY created_at"
        plan = str(conn.execute(ready, params).fetchall())
        history = {row[0] for row in conn.execute("SELECT task_id FROM task_events")}
    assert meta["schema_version"] == SCHEMA_VERSION and meta["task_count"] == 3
    assert history == {queued.task_id, held.task_id}  # the purged task's went with it
    assert "tasks_ready" in plan and "TEMP B-TREE" not in plan
    async with opened(tmp_path / "new.db"):
        pass
    assert layout(path) == layout(tmp_path / "new.db")  # exactly what a new file gets


# --- tombstones -------------------------------------------------------------------


async def test_tombstones_last_their_retention(tmp_path: Path) -> None:
    path = tmp_path / "stones.db"
    async with opened(path, tombstone_retention=0.5) as store:
        task = record(retention_ms=0)
        await store.create(task)
        ended = await store.transition(task.task_id, "completed", result={})
        assert ended is not None and ended.expires_at is not None
        assert await store.get(task.task_id) is None
        unswept = await store.tombstone(task.task_id)  # from the expired row itself
        assert unswept is not None and unswept.reason == "expired"
        assert unswept.at == ended.expires_at and unswept.owner == "alice"
        await store.purge_expired(time.time())
        assert rows(path, "tasks") == 0 and rows(path, "tombstones") == 1
        assert await store.tombstone(task.task_id) == unswept
        await anyio.sleep(unswept.at + 0.5 - time.time() + 0.01)
        assert await store.tombstone(task.task_id) is None  # forgotten before the sweep
        await store.purge_expired(time.time())
        assert rows(path, "tombstones") == 0


async def test_tombstone_retention_is_an_option_and_none_keeps_none(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="tombstone_retention"):
        SQLiteTaskStore(tmp_path / "t.db", tombstone_retention=-1)
    store = store_from_url(f"sqlite:///{tmp_path / 't.db'}", tombstone_retention=5.0)
    assert isinstance(store, SQLiteTaskStore) and store.tombstone_retention == 5.0
    assert SQLiteTaskStore(tmp_path / "t.db").tombstone_retention == 24 * 3600.0
    path = tmp_path / "none.db"
    async with opened(path, tombstone_retention=None) as store:
        expired, purged = record(retention_ms=0), record()
        for task in (expired, purged):
            await store.create(task)
            await store.transition(task.task_id, "completed", result={})
        assert await store.tombstone(expired.task_id) is None
        await store.purge_expired(time.time())
        assert await store.purge_finished(time.time() + 1) == 1
        assert await store.tombstone(expired.task_id) is None
        assert await store.tombstone(purged.task_id) is None
        assert rows(path, "tombstones") == 0


async def test_the_newest_tombstones_are_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_flow, "MAX_TOMBSTONES", 3)
    path = tmp_path / "cap.db"
    async with opened(path) as store:
        tasks = [record(retention_ms=0) for _ in range(5)]
        for task in tasks:
            await store.create(task)
            await store.transition(task.task_id, "completed", result={})
            await anyio.sleep(0.002)
        assert await store.purge_expired(time.time()) == 5
        assert rows(path, "tombstones") == 3
        assert [await store.tombstone(t.task_id) is not None for t in tasks[1:3]] == [False, True]


async def test_tombstones_keep_the_file_bounded_under_steady_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_flow, "MAX_TOMBSTONES", 200)
    path = tmp_path / "steady.db"
    pages: list[int] = []
    async with opened(path, max_tasks=100, max_changes=300) as store:
        for _round in range(30):
            for _ in range(40):
                task = record(retention_ms=0)
                await store.create(task)
                await store.transition(task.task_id, "completed", result={"content": ["x" * 500]})
            await store.purge_expired(time.time())
            assert rows(path, "tasks") == 0 and rows(path, "tombstones") <= 200
            assert store._conn is not None
            pages.append(store._conn.execute("PRAGMA page_count").fetchone()[0])
    assert pages[-1] <= pages[10] + 2  # freed pages are reused once the cap is reached


# --- deduplication ----------------------------------------------------------------


async def test_two_stores_on_one_file_make_one_task_per_key(tmp_path: Path) -> None:
    path = tmp_path / "dedupe.db"
    async with opened(path) as a, opened(path) as b:
        records = [record(dedupe_key="same") for _ in range(20)]
        answers: list[str | None] = []

        async def create(store: SQLiteTaskStore, task: TaskRecord) -> None:
            found = await store.create(task, dedupe_window=60)
            answers.append(None if found is None else found.task_id)

        async with anyio.create_task_group() as group:
            for index, task in enumerate(records):
                group.start_soon(create, (a, b)[index % 2], task)
        created = [r.task_id for r in records if await b.get(r.task_id) is not None]
        caps = ActiveCaps(total=1)  # a duplicate is answered before the caps are checked
        found = await a.create(record(dedupe_key="same"), caps=caps, dedupe_window=60)
    assert len(created) == 1 and answers.count(None) == 1
    assert {answer for answer in answers if answer is not None} == set(created)
    assert found is not None and [found.task_id] == created


_RACER = textwrap.dedent(
    """
    import sys, time, anyio
    from fastmcp_tasks.stores.base import TaskRecord
    from fastmcp_tasks.stores.sqlite import SQLiteTaskStore

    async def main(path, name, start):
        store = SQLiteTaskStore(path)
        await store.open()
        await anyio.sleep(max(0.0, float(start) - time.time()))
        made = 0
        for i in range(20):
            now = time.time()
            task = TaskRecord(f"{name}-{i}", "tool", "working", now, now, dedupe_key="k")
            made += await store.create(task, dedupe_window=60) is None
        await store.close()
        print(made)

    anyio.run(main, *sys.argv[1:])
    """
)


async def test_two_processes_racing_one_key_make_one_task(tmp_path: Path) -> None:
    path = tmp_path / "race.db"
    async with opened(path):
        pass  # the schema exists before the racers open it
    start = str(time.time() + 2.0)
    racers = [
        await anyio.open_process(
            [sys.executable, "-c", _RACER, str(path), name, start],
            cwd=REPO,
            stderr=subprocess.STDOUT,
        )
        for name in ("p1", "p2")
    ]
    outputs = []
    try:
        for process in racers:
            await process.wait()  # bounded by the test's timeout
            assert process.stdout is not None
            outputs.append((await process.stdout.receive()).decode())
    finally:
        for process in racers:
            if process.returncode is None:
                process.kill()
                await process.wait()
    assert [process.returncode for process in racers] == [0, 0], outputs
    assert sum(int(output.split()[-1]) for output in outputs) == 1
    assert rows(path, "tasks") == 1


# --- gates across connections -----------------------------------------------------


async def test_two_stores_never_lease_more_than_a_gates_limit(tmp_path: Path) -> None:
    path = tmp_path / "gate.db"
    async with opened(path) as a, opened(path) as b:
        tasks = [record(gate="deploy", gate_limit=2) for _ in range(6)]
        for task in tasks:
            await a.create(task)
        taken: list[str] = []

        async def claim(store: SQLiteTaskStore, owner: str) -> None:
            for _ in range(5):
                taken.extend(r.task_id for r in await store.claim_queued(owner, later(), 5))

        async with anyio.create_task_group() as group:
            group.start_soon(claim, a, "wa")
            group.start_soon(claim, b, "wb")
        assert sorted(taken) == sorted(t.task_id for t in tasks[:2])
        await a.transition(taken[0], "completed", result={})
        assert [r.task_id for r in await b.claim_queued("wb", later(), 5)] == [tasks[2].task_id]
        assert await a.claim_queued("wa", later(), 5) == []


async def test_turns_are_shared_by_the_stores_of_one_file(tmp_path: Path) -> None:
    path = tmp_path / "turns.db"
    async with opened(path) as a, opened(path) as b:
        alice = [record(gate="g", gate_limit=1) for _ in range(3)]  # `record`'s owner: alice
        for task in alice:
            await a.create(task)
        bob = replace(record(gate="g", gate_limit=1), owner="bob")
        await b.create(bob)
        order = []
        for store in (a, b, a):
            (taken,) = await store.claim_queued("w", later(), 5)
            order.append(taken.task_id)
            await store.transition(taken.task_id, "completed", result={})
        assert order == [alice[0].task_id, bob.task_id, alice[1].task_id]
        assert rows(path, "gate_turns") == 2
        await a.purge_expired(time.time())
        assert rows(path, "gate_turns") == 2  # alice still waits in the gate
        (last,) = await b.claim_queued("w", later(), 5)
        await b.transition(last.task_id, "completed", result={})
        await a.purge_expired(time.time())
        assert rows(path, "gate_turns") == 0  # nothing active in the gate: forgotten


async def test_a_full_gate_or_a_waiting_retry_takes_no_write_lock(tmp_path: Path) -> None:
    async with opened(tmp_path / "full.db") as store:
        retry = record(app="a")
        for task in [retry, *(record(gate="g", gate_limit=1, app="a") for _ in range(3))]:
            await store.create(task)
        await store.claim(retry.task_id, "w", later())
        assert await store.retry_later(retry.task_id, "w", later(), "Retrying") is not None
        assert len(await store.claim_queued("w", later(), 5, app="a")) == 1  # the gate fills
        before = store.stats.write_transactions
        for _ in range(5):
            assert await store.claim_queued("w", later(), 5, app="a") == []
            assert await store.claim_queued("w", later(), 5) == []
        assert store.stats.write_transactions == before


async def test_another_store_hears_a_retry_and_its_time(tmp_path: Path) -> None:
    path = tmp_path / "retry.db"
    async with opened(path) as a, opened(path, poll_interval=0.02) as b:
        task = record(app="app")
        await a.create(task)
        await a.claim(task.task_id, "w", later())
        due = time.time() + 0.25
        async with b.changes(frozenset({task.task_id}), frozenset({"queued"})) as feed:
            await a.retry_later(task.task_id, "w", due, "Retrying")
            queued = await next_change(feed, "queued", within=5)
        assert queued.details == {"app": "app", "not_before": due}
        assert await b.claim_queued("v", later(), 5) == []
        await anyio.sleep(due - time.time() + 0.01)
        (taken,) = await b.claim_queued("v", later(), 5)
        assert taken.retries == 1 and taken.not_before is None
        assert (taken.phase, taken.attempts, taken.status_message) == ("running", 1, None)  # begun


# --- the ungated claim's cost -----------------------------------------------------


def fill(path: Path, count: int, app: str) -> None:
    """`count` queued ungated tasks of `app`, written in one transaction."""
    base = time.time()
    tasks = [replace(record(app=app), created_at=base + i * 1e-6) for i in range(count)]
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(INSERT_TASK, [to_row(task) for task in tasks])
        conn.execute("COMMIT")


async def claim_cost(path: Path, queued: int, app: str | None) -> tuple[int, list[str]]:
    """SQLite VM steps (hundreds, both connections) of 50 claims of 10 with `queued` tasks
    waiting, and the distinct statements the writer ran for them (transactions aside)."""
    steps: list[None] = []
    async with opened(path, max_tasks=None) as store:
        fill(path, queued, "bench")
        await store.claim_queued("w", later(), 10, app=app)  # warm
        assert store._conn is not None and store._reader is not None
        statements: set[str] = set()
        store._conn.set_trace_callback(statements.add)
        for conn in (store._conn, store._reader.conn):
            conn.set_progress_handler(lambda: steps.append(None), 100)
        for _ in range(50):
            assert len(await store.claim_queued("w", later(), 10, app=app)) == 10
        cost = len(steps)
        store._conn.set_trace_callback(None)
    control = ("BEGIN", "COMMIT", "SAVEPOINT", "RELEASE", "ROLLBACK")
    shapes = {
        s.split(" WHERE")[0].split(" SET")[0] for s in statements if not s.startswith(control)
    }
    return cost, sorted(shapes)


@pytest.mark.parametrize("app", ["bench", None])
async def test_the_ungated_claim_costs_the_same_with_10000_queued(
    tmp_path: Path, app: str | None
) -> None:
    few, few_statements = await claim_cost(tmp_path / "few.db", 600, app)
    many, many_statements = await claim_cost(tmp_path / "many.db", 10_000, app)
    assert many <= few * 1.2 + 5, (few, many)  # index ranges: nothing scans the queue
    assert many_statements == few_statements
    if app is not None:  # the range, the gated probe, the lease (any app's: one range each)
        assert len(many_statements) == 3, many_statements
