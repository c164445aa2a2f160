"""The SQLite store beyond the shared contract: files, processes, contention, retention.

`tests/test_store_contract.py` checks the protocol semantics; these tests check
what only a file-backed store has: persistence across reopen, several
connections and processes sharing one file (tasks and the change feed),
migration of older files and refusal of files that are not ours (left
byte-identical), bounded growth under steady load, and the URL forms. Another
connection holding the write lock, another process, and the idle cost are
`test_sqlite_contention`.
"""

from __future__ import annotations

import hashlib
import sqlite3
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, closing
from pathlib import Path

import anyio
import pytest

from fastmcp_tasks import TaskRecord, store_from_url
from fastmcp_tasks.errors import ConfigurationError, StoreError
from fastmcp_tasks.stores.base import TaskChange
from fastmcp_tasks.stores.sqlite import SQLiteTaskStore
from fastmcp_tasks.stores.sqlite.schema import (
    APPLICATION_ID,
    COLUMNS,
    MIGRATIONS,
    SCHEMA_VERSION,
    prepare,
    to_row,
)
from fastmcp_tasks.stores.sqlite.tx import ready_where

pytestmark = pytest.mark.anyio

_ids: Iterator[int] = iter(range(10**9))


def record(*, retention_ms: int | None = 60_000, **fields: object) -> TaskRecord:
    now = time.time()
    return TaskRecord(
        task_id=f"sq-{next(_ids)}",
        tool="tool",
        status="working",
        created_at=now,
        updated_at=now,
        arguments={"text": "héllo", "n": [1, 2.5, None]},
        retention_ms=retention_ms,
        poll_interval_ms=500,
        owner="alice",
        context={"trace": "abc"},
        **fields,  # type: ignore[arg-type]
    )


@asynccontextmanager
async def opened(path: Path, **options: object) -> AsyncIterator[SQLiteTaskStore]:
    store = SQLiteTaskStore(path, **options)  # type: ignore[arg-type]
    await store.open()
    try:
        yield store
    finally:
        await store.close()


async def next_change(feed: AsyncIterator[TaskChange], kind: str, within: float) -> TaskChange:
    """The first change of `kind` on the feed, or fail after `within` seconds."""
    with anyio.fail_after(within):
        async for change in feed:
            if change.kind == kind:
                return change
    raise AssertionError("feed ended")


def rows(path: Path, table: str) -> int:
    with closing(sqlite3.connect(path)) as conn:
        return conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]


def snapshot(path: Path) -> tuple[str, list[str]]:
    """The file's digest, and the names in its directory (no side files appear)."""
    names = sorted(p.name for p in path.parent.iterdir())
    return hashlib.sha256(path.read_bytes()).hexdigest(), names


# --- persistence and sharing ----------------------------------------------------


async def test_tasks_survive_close_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "tasks.db"
    done, parked = record(), record()
    result = {"content": [{"type": "text", "text": "ünïcode ✓"}], "structuredContent": {"x": 1}}
    async with opened(path) as store:
        await store.create(done)
        await store.create(parked)
        finished = await store.transition(done.task_id, "completed", result=result)
        await store.request_input(parked.task_id, {"k": {"method": "elicitation/create"}})
        await store.set_status_message(parked.task_id, "waiting")
        before = await store.get(parked.task_id)
    assert finished is not None
    async with opened(path) as store:
        again = await store.get(done.task_id)
        still = await store.get(parked.task_id)
    assert again == finished and again.result_json == finished.result_json
    assert again.result == result and again.arguments == done.arguments
    assert still == before and still is not None and still.status == "input_required"
    assert still.input_requests == {"k": {"method": "elicitation/create"}}
    assert still.arguments == done.arguments and still.context == {"trace": "abc"}


async def test_new_file_gets_marked_schema_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    path.touch()  # an empty file is a new database
    async with opened(path) as store:
        assert store._conn is not None
        assert store._conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        meta = dict(conn.execute("SELECT key, value FROM meta"))
        plan = conn.execute("EXPLAIN QUERY PLAN DELETE FROM tasks WHERE expires_at <= 1").fetchall()
        active = "SELECT * FROM tasks WHERE status IN ('working', 'input_required')"
        plan += conn.execute(f"EXPLAIN QUERY PLAN {active}").fetchall()
    assert meta["schema_version"] == SCHEMA_VERSION and meta["application"] == "fastmcp-tasks"
    assert "tasks_expiry" in str(plan)  # purge is a range delete on the expiry index
    assert "tasks_active" in str(plan)  # recovery scans only active tasks
    assert sorted(MIGRATIONS) == list(range(SCHEMA_VERSION))


async def test_two_instances_share_tasks_and_changes(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    async with opened(path, poll_interval=0.02) as a, opened(path, poll_interval=0.02) as b:
        task, asking = record(), record()
        await a.create(task)
        await a.create(asking)
        await a.request_input(asking.task_id, {"q": {}})
        seen_by_b = await b.get(task.task_id)
        assert seen_by_b is not None and seen_by_b.arguments == task.arguments
        async with a.changes(frozenset({task.task_id, asking.task_id})) as feed:
            started = time.monotonic()
            await b.request_cancel(task.task_id)
            change = await next_change(feed, "cancel_requested", within=2)
            assert change.task_id == task.task_id and time.monotonic() - started < 2
            assert await b.answer_input(asking.task_id, {"q": {"action": "accept"}})
            answered = await next_change(feed, "answered", within=2)
            assert answered.details == {"keys": ["q"]} and answered.status == "working"
        marked = await a.get(task.task_id)
        assert marked is not None and marked.cancel_requested
        assert await a.claim(asking.task_id, "process-a", time.time() + 60) is not None
        assert await b.claim(asking.task_id, "process-b", time.time() + 60) is None
        assert {r.task_id for r in await b.active_tasks()} == {task.task_id, asking.task_id}
        done = await b.transition(task.task_id, "cancelled")
        assert done is not None and await a.transition(task.task_id, "completed") is None


async def test_local_writes_wake_the_feed_without_polling(tmp_path: Path) -> None:
    async with opened(tmp_path / "t.db", poll_interval=60) as store:
        task, other = record(), record()
        await store.create(task)
        await store.create(other)
        async with store.changes(frozenset({task.task_id})) as feed:
            await store.set_status_message(other.task_id, "not followed")
            await store.set_status_message(task.task_id, "step")
            change = await next_change(feed, "message", within=1)  # not the 60 s poll
        assert change.task_id == task.task_id


async def test_closing_the_store_ends_its_feeds(tmp_path: Path) -> None:
    store = SQLiteTaskStore(tmp_path / "t.db")
    await store.open()
    async with store.changes() as feed:
        await store.close()
        assert [change async for change in feed] == []
    await store.close()  # idempotent
    with pytest.raises(StoreError, match="not open"):
        await store.get("x")


# --- files that are not ours --------------------------------------------------------


def _corrupt(path: Path) -> None:
    path.write_bytes(b"definitely not sqlite\n" * 300)


def _damaged_header(path: Path) -> None:
    path.write_bytes(b"SQLite format 3\x00" + bytes(4080))  # right magic, no marker, garbage


def _foreign(path: Path) -> None:
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO users (name) VALUES ('ada')")
        conn.commit()


def _foreign_marked(path: Path) -> None:
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA application_id = 1234")
        conn.execute("CREATE TABLE things (x)")
        conn.commit()


def _newer(path: Path) -> None:
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("BEGIN IMMEDIATE")
        prepare(conn, path)  # our current schema, as `open` writes it
        conn.execute("COMMIT")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
        conn.execute("UPDATE meta SET value = value + 1 WHERE key = 'schema_version'")


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (_corrupt, "not a SQLite database"),
        (_damaged_header, "not a database"),
        (_foreign, "another program"),
        (_foreign_marked, "another program"),
        (_newer, "newer"),
    ],
    ids=["corrupt", "damaged-header", "foreign", "foreign-marked", "newer-schema"],
)
async def test_refuses_files_that_are_not_ours_and_leaves_them_alone(
    tmp_path: Path, make: object, problem: str
) -> None:
    path = tmp_path / "precious.db"
    make(path)  # type: ignore[operator]
    before = snapshot(path)
    store = SQLiteTaskStore(path)
    with pytest.raises(ConfigurationError, match=problem) as info:
        await store.open()
    assert str(path) in str(info.value)
    assert snapshot(path) == before
    await store.close()


async def test_missing_directory_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="no such directory"):
        await SQLiteTaskStore(tmp_path / "nope" / "t.db").open()


def write_v2_file(path: Path, task: TaskRecord) -> None:
    """A task store file as schema version 2 left it (no `app` column), holding `task`."""
    later = {"app", "gate", "gate_limit", "not_before", "retries", "dedupe_key", "phase"}  # 3-5
    row = dict(zip((*COLUMNS, "expires_at"), to_row(task), strict=True))
    v2 = {name: value for name, value in row.items() if name not in later}
    columns, v2_row = ", ".join(v2), tuple(v2.values())
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        MIGRATIONS[0](conn)
        MIGRATIONS[1](conn)
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute("PRAGMA user_version = 2")
        conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', 2)")
        conn.execute(
            f"INSERT INTO tasks ({columns}) VALUES ({', '.join('?' * len(v2_row))})", v2_row
        )
        conn.execute("UPDATE meta SET value = 1 WHERE key = 'task_count'")


async def test_a_version_2_file_gains_the_app_column(tmp_path: Path) -> None:
    path = tmp_path / "v2.db"
    old, new = record(), record(app="billing")
    write_v2_file(path, old)
    async with opened(path) as store:
        kept = await store.get(old.task_id)
        assert kept is not None and kept.app is None and kept.arguments == old.arguments
        await store.create(new)
        got = await store.get(new.task_id)
        assert got is not None and got.app == "billing"
        later = time.time() + 60
        taken = await store.claim_queued("w", later, 5, app="billing")
        assert [r.task_id for r in taken] == [new.task_id]
        assert [r.task_id for r in await store.claim_queued("w", later, 5)] == [old.task_id]
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        meta = dict(conn.execute("SELECT key, value FROM meta"))
        where, params = ready_where("x", 0.0)
        queued = f"SELECT task_id {where} ORDER BY created_at"
        plan = str(conn.execute(f"EXPLAIN QUERY PLAN {queued}", params).fetchall())
    assert meta["schema_version"] == SCHEMA_VERSION and meta["task_count"] == 2
    assert "tasks_ready" in plan and "TEMP B-TREE" not in plan  # an index range, in order


# --- retention ---------------------------------------------------------------------


async def test_purge_keeps_the_file_bounded_under_steady_load(tmp_path: Path) -> None:
    path = tmp_path / "steady.db"
    pages: list[int] = []
    # tombstones (one per removed task, kept for a day) are bounded apart: test_sqlite_flow
    async with opened(path, max_tasks=100, max_changes=300, tombstone_retention=None) as store:
        for _round in range(30):
            for _ in range(40):
                task = record(retention_ms=0)
                await store.create(task)
                await store.set_status_message(task.task_id, "busy")
                await store.transition(task.task_id, "completed", result={"content": ["x" * 500]})
            await store.purge_expired(time.time())
            assert rows(path, "tasks") == 0
            assert rows(path, "changes") <= 300
            assert store._conn is not None
            pages.append(store._conn.execute("PRAGMA page_count").fetchone()[0])
            count = store._conn.execute("SELECT value FROM meta WHERE key='task_count'")
            assert count.fetchone()[0] == 0
    assert pages[-1] <= pages[5] + 2  # freed pages are reused: no growth after warm-up


async def test_purge_trims_old_feed_rows(tmp_path: Path) -> None:
    path = tmp_path / "trim.db"
    async with opened(path, change_retention=0) as store:
        task = record(lease_owner="me", lease_expires=time.time() + 60)  # no `queued` row
        await store.create(task)
        await store.set_status_message(task.task_id, "a")
        assert rows(path, "changes") == 1
        assert await store.purge_expired(time.time()) == 0
        assert rows(path, "changes") == 0
        async with store.changes() as feed:  # seq keeps rising after a full trim
            await store.set_status_message(task.task_id, "b")
            assert (await next_change(feed, "message", within=1)).task_id == task.task_id


# --- URLs --------------------------------------------------------------------------


async def test_url_forms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    relative = store_from_url("sqlite:///data.db", max_tasks=7)
    assert isinstance(relative, SQLiteTaskStore) and relative.scheme == "sqlite"
    assert relative.path == tmp_path / "data.db" and relative.max_tasks == 7
    absolute = store_from_url(f"sqlite:///{tmp_path}/abs.db")
    assert isinstance(absolute, SQLiteTaskStore) and absolute.path == tmp_path / "abs.db"
    spaced = store_from_url("sqlite:///a%20b.db")
    assert isinstance(spaced, SQLiteTaskStore) and spaced.path == tmp_path / "a b.db"
    await relative.open()
    await relative.close()
    assert (tmp_path / "data.db").exists()
    for bad in ("sqlite://:memory:", "sqlite:///:memory:", "sqlite://host/x.db", "sqlite://"):
        with pytest.raises(ConfigurationError):
            store_from_url(bad)
    with pytest.raises(ConfigurationError, match="in-memory"):
        store_from_url("sqlite://:memory:")
    with pytest.raises(ConfigurationError):
        store_from_url("sqlite:///x.db?mode=ro")
    with pytest.raises(ConfigurationError):
        SQLiteTaskStore(":memory:")
