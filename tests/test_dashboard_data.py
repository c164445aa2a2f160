"""The dashboard's data layer: `TaskIndex`, `overview`, the charts and the workers view.

The index is checked on the memory store, a real SQLite file, Redis and PostgreSQL
(the last two skip loudly without a server and fail when `CI=true`), with tasks made
and moved through the store API, against a reference computed from
`store.list_tasks` itself: page order and cursors, filters, pages before the load
finished, refresh, polling for new tasks, reload after a purge. Stats, charts and
workers run on constructed sets with times fixed relative to one `NOW`.
"""

from __future__ import annotations

import math
import statistics
import time
import xml.etree.ElementTree as ET
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from fastmcp_tasks import MemoryTaskStore, TaskRecord
from fastmcp_tasks.dashboard import stats
from fastmcp_tasks.dashboard.charts import backlog_chart, throughput_chart
from fastmcp_tasks.dashboard.index import Gone, TaskIndex, TaskQuery, TaskSummary, parse_before
from fastmcp_tasks.dashboard.workers import parse_owner, workers
from fastmcp_tasks.stores.listing import ListableTaskStore, page_key
from fastmcp_tasks.stores.sqlite import SQLiteTaskStore
from fastmcp_tasks.wire.names import ACTIVE_STATUSES, TERMINAL_STATUSES
from tests.test_store_contract import postgres_store, redis_store
from tests.test_store_contract import record as new_record

pytestmark = pytest.mark.anyio

NOW = float(int(time.time()))  # near real time: stores do not list expired tasks
WEEK_MS = 7 * 86_400_000
FACTORIES: dict[str, Callable[[Path], Any]] = {
    "memory": lambda _: MemoryTaskStore(),
    "sqlite": lambda tmp: SQLiteTaskStore(tmp / "tasks.db"),
    "redis": lambda _: redis_store(),
    "postgres": lambda _: postgres_store(),
}


@pytest.fixture(params=sorted(FACTORIES))
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    instance = FACTORIES[request.param](tmp_path)
    assert isinstance(instance, ListableTaskStore)
    await instance.open()
    try:
        yield instance
    finally:
        await instance.close()


@pytest.fixture
async def memory() -> AsyncIterator[MemoryTaskStore]:
    instance = MemoryTaskStore()
    await instance.open()
    try:
        yield instance
    finally:
        await instance.close()


TOOLS = ("alpha", "beta", "gamma")


def record(*, retention_ms: int = 60_000, **fields: Any) -> TaskRecord:
    """A new `working` task with `fields` set (`tool` included)."""
    task = new_record(retention_ms=retention_ms)
    for name, value in fields.items():
        setattr(task, name, value)
    return task


async def populate(store: Any, n: int = 24) -> list[str]:
    """`n` tasks over three tools and owners, in every status, made through the store API."""
    made, base = [], time.time()
    for i in range(n):
        task = record(tool=TOOLS[i % 3], owner=f"user-{i % 2}", retention_ms=WEEK_MS)
        # distinct times, but every sixth task created at one instant (ordered by id)
        task.created_at = task.updated_at = base - 100 if i % 6 == 5 else base - (n - i)
        await store.create(task)
        made.append(task.task_id)
        if i % 4 == 1:
            await store.transition(task.task_id, "completed", result={"content": []})
        elif i % 4 == 2:
            await store.transition(task.task_id, "failed", error={"code": 1, "message": "boom"})
        elif i % 8 == 3:
            await store.request_input(task.task_id, {f"k{i}": {"method": "elicitation/create"}})
    return made


async def everything(store: Any) -> list[TaskRecord]:
    records: list[TaskRecord] = await store.list_tasks(limit=10_000)
    return records


def ids(tasks: list[Any]) -> list[str]:
    return [t.task_id for t in tasks]


async def all_pages(index: TaskIndex, query: TaskQuery) -> list[str]:
    """Every task of `query`, following `next_before` from page to page."""
    seen: list[str] = []
    while True:
        page = await index.page(query)
        seen += ids(page.tasks)
        assert len(page.tasks) <= query.limit
        if page.next_before is None:
            return seen
        query = TaskQuery(**{**query.__dict__, "before": page.next_before})


QUERIES = [
    TaskQuery(limit=5),
    TaskQuery(status=ACTIVE_STATUSES, limit=4),
    TaskQuery(status=TERMINAL_STATUSES, limit=3),
    TaskQuery(status=frozenset({"failed"}), limit=2),
    TaskQuery(tool="beta", limit=3),
    TaskQuery(owner="user-1", limit=4),
    TaskQuery(tool="gamma", owner="user-0", status=TERMINAL_STATUSES, limit=2),
    TaskQuery(tool="nothing"),
]


def brute(records: list[TaskRecord], query: TaskQuery) -> list[str]:
    return [r.task_id for r in records if query.matches(TaskSummary.of(r))]


async def test_pages_follow_the_store_listing_order_and_cursors(store: Any) -> None:
    await populate(store)
    index = TaskIndex(store, page_size=7)  # a load of several pages
    await index.load()
    assert index.loaded and len(index) == 24
    records = await everything(store)
    assert ids(list(index.summaries())) == ids(records)
    assert await all_pages(index, TaskQuery(limit=5)) == ids(records)
    cursor = None
    while True:  # each page is the store's page from the same cursor
        page = await index.page(TaskQuery(limit=5, before=cursor))
        assert ids(page.tasks) == ids(await store.list_tasks(limit=5, before=cursor))
        if page.next_before is None:
            break
        assert page.next_before == page_key(records[ids(records).index(page.tasks[-1].task_id)])
        cursor = page.next_before


def _query_id(query: TaskQuery) -> str:
    """A stable id (the same in every process: a frozenset's order is not)."""
    shown = {
        name: sorted(value) if isinstance(value, frozenset) else value
        for name, value in vars(query).items()
        if value is not None and name != "limit"
    }
    return ",".join(f"{name}={value}" for name, value in shown.items()).replace(" ", "") or "all"


@pytest.mark.parametrize("query", QUERIES, ids=_query_id)
async def test_filters_match_a_brute_force_filter_before_and_after_the_load(
    store: Any, query: TaskQuery
) -> None:
    made = await populate(store)
    prefix = TaskQuery(id_prefix=made[5][: len(made[5]) - 1], limit=2)
    records = await everything(store)
    for q in (query, prefix):
        loading = TaskIndex(store)  # not loaded: straight from the store
        before_load = await all_pages(loading, q)
        first_before = await loading.page(q)
        assert first_before.matching is None
        index = TaskIndex(store, page_size=5)
        await index.load()
        expected = brute(records, q)
        assert await all_pages(index, q) == expected == before_load
        first = await index.page(q)
        assert ids(first.tasks) == ids(first_before.tasks)
        assert first.next_before == first_before.next_before
        assert first.matching == len(expected)


async def test_refresh_applies_changes_and_removals(store: Any) -> None:
    working, finished, other = record(), record(retention_ms=WEEK_MS), record()
    for task in (working, finished, other):
        await store.create(task)
    await store.transition(finished.task_id, "completed", result={"content": []})
    index = TaskIndex(store)
    await index.load()
    assert await store.purge_finished(time.time() + 1) == 1  # `finished` is gone
    await store.set_status_message(working.task_id, "halfway")
    await store.transition(other.task_id, "failed", error={"code": 1, "message": "x" * 900})
    changed = await index.refresh([working.task_id, finished.task_id, other.task_id])
    by_id = {c.task_id: c for c in changed if isinstance(c, TaskSummary)}
    assert [c.task_id for c in changed if isinstance(c, Gone)] == [finished.task_id]
    assert by_id[working.task_id].status_message == "halfway"
    assert by_id[other.task_id].status == "failed"
    assert len(by_id[other.task_id].error_message or "") == 500  # cut
    assert index.get(finished.task_id) is None and len(index) == 2
    assert await index.refresh([working.task_id]) == []  # nothing new
    assert ids(list(index.summaries())) == ids(await everything(store))
    assert index.counts()["failed"] == 1 and index.counts()["completed"] == 0


async def test_a_task_created_and_finished_between_polls_is_added_by_refresh(store: Any) -> None:
    index = TaskIndex(store)
    await index.load()
    quick = record(retention_ms=WEEK_MS)
    await store.create(quick)
    await store.transition(quick.task_id, "completed", result={"content": []})
    assert await index.poll_new() == []  # not active: the poll cannot see it
    [added] = await index.refresh([quick.task_id])  # the feed's "status" change names it
    assert isinstance(added, TaskSummary) and added.status == "completed"
    assert (await index.page(TaskQuery())).tasks == [added]


async def test_poll_new_finds_new_tasks_over_several_pages(store: Any) -> None:
    old = record()
    await store.create(old)
    index = TaskIndex(store, poll_page=3)
    await index.load()
    fresh = [record() for _ in range(8)]
    for task in fresh:
        await store.create(task)
    found = await index.poll_new()
    assert sorted(ids(found)) == sorted(ids(fresh))
    assert await index.poll_new() == []
    assert ids(list(index.summaries())) == ids(await everything(store))
    assert (await index.page(TaskQuery(limit=3))).matching == 9


async def test_reload_drops_purged_tasks_and_keeps_new_ones(store: Any) -> None:
    await populate(store)
    index = TaskIndex(store, page_size=4)
    await index.load()
    ended = {r.task_id for r in await everything(store) if r.status in TERMINAL_STATUSES}
    assert await store.purge_finished(time.time() + 1) == len(ended)
    dropped = await index.reload()
    assert {c.task_id for c in dropped if isinstance(c, Gone)} == ended
    assert all(c.summary.status in TERMINAL_STATUSES for c in dropped if isinstance(c, Gone))
    assert ids(list(index.summaries())) == ids(await everything(store))
    assert all(index.counts()[s] == 0 for s in TERMINAL_STATUSES)


async def test_counts_and_states(store: Any) -> None:
    """The state comes from the record's `phase` and lease, never from the message: a
    running tool that writes "Queued: ..." itself is running; a task leased to a process
    that has not begun its run yet (waiting for a slot there) is queued."""
    now = time.time()
    queued, expired, parked, done = (record() for _ in range(4))
    running, mimic = record(phase="running"), record(phase="running")
    waiting, legacy = record(phase="queued"), record()  # legacy: no phase, leased
    for task in (queued, running, expired, waiting, parked, done, mimic, legacy):
        await store.create(task)
    for task in (running, waiting, mimic, legacy):
        await store.claim(task.task_id, "host:1:a", now + 30)
    await store.claim(expired.task_id, "host:2:b", now - 1)
    await store.set_status_message(waiting.task_id, "Queued: waiting for a free worker slot")
    await store.set_status_message(mimic.task_id, "Queued: the tool wrote this itself")
    await store.request_input(parked.task_id, {"k": {"method": "elicitation/create"}})
    await store.transition(done.task_id, "completed", result={"content": []})
    index = TaskIndex(store, clock=lambda: now)
    await index.load()
    state = {s.task_id: s.state_at(now) for s in index.summaries()}
    expected = ["queued", "running", "queued", "queued", "parked", "completed"]
    expected += ["running", "running"]
    made = ids([queued, running, expired, waiting, parked, done, mimic, legacy])
    assert state == dict(zip(made, expected, strict=True))
    assert index.get(waiting.task_id).to_json(now)["phase"] == "queued"  # type: ignore[union-attr]
    states = dict(zip(("queued", "running", "parked"), (3, 3, 1), strict=True))
    assert index.counts() == {**dict.fromkeys(TERMINAL_STATUSES, 0), **states, "completed": 1,
                              "working": 6, "input_required": 1, "error": 0}  # fmt: skip
    row = index.get(parked.task_id)
    assert row is not None
    shown = row.to_json(now + 5)
    assert shown["state"] == "parked" and shown["inputs"][0]["key"] == "k"
    assert shown["inputs"][0]["waited"] == pytest.approx(now + 5 - row.input_since[0], abs=1e-3)
    assert row.input_since[0] == row.updated_at  # parked then: when the index first saw it
    assert shown["created"].endswith("+00:00")
    assert index.tools() == ["tool"] and index.owners() == []


async def test_a_refresh_during_the_load_is_not_undone_by_a_later_page(store: Any) -> None:
    tasks = [record() for _ in range(6)]
    for task in tasks:
        await store.create(task)
    stale = await everything(store)  # read before the change: what a slow scan may hold
    listing = store.list_tasks
    index = TaskIndex(store, page_size=2)

    async def slow_listing(**options: Any) -> list[TaskRecord]:
        if options.get("before") is None:  # the first page: the change happens meanwhile
            await store.transition(tasks[0].task_id, "completed", result={"content": []})
            await index.refresh([tasks[0].task_id])
            await store.set_status_message(tasks[1].task_id, "moved on")
            await store.purge_finished(time.time() + 1)
            await index.refresh([tasks[0].task_id])  # now gone
            return await listing(**options)
        page: list[TaskRecord] = [r for r in stale if page_key(r) < options["before"]]
        return page[: options["limit"]]  # the old snapshots, tasks[0] still working

    store.list_tasks = slow_listing
    try:
        await index.load()
    finally:
        del store.list_tasks
    assert index.get(tasks[0].task_id) is None  # removed while loading: not brought back
    assert ids(list(index.summaries())) == ids(await everything(store))
    assert index.counts()["working"] == 5
    [moved] = await index.refresh([tasks[1].task_id])  # its feed change, read after
    assert isinstance(moved, TaskSummary) and moved.status_message == "moved on"


def test_query_from_params() -> None:
    q = TaskQuery.from_params(
        {"status": "active", "tool": " beta ", "owner": "bob", "q": " ab" + "c" * 62}
    )
    assert q.status == ACTIVE_STATUSES and q.tool == "beta" and q.owner == "bob"
    assert q.id_prefix == "ab" + "c" * 62 and q.limit == 50
    with pytest.raises(ValueError, match="at most 64"):
        TaskQuery.from_params({"q": "ab" + "c" * 63})  # never cut silently
    finished = TaskQuery.from_params({"status": "finished"}).status
    assert finished == TERMINAL_STATUSES | {"error"}  # tool errors end tasks too
    assert TaskQuery.from_params({"status": "failed"}).status == frozenset({"failed"})
    assert TaskQuery.from_params({}) == TaskQuery()
    before = TaskQuery.from_params({"before": "1700000000.25:task-1:x", "limit": "200"})
    assert before.before == (1700000000.25, "task-1:x") and before.limit == 200
    for bad in ({"status": "done"}, {"before": "yesterday"}, {"before": "nan:x"}, {"limit": "0"}):
        with pytest.raises(ValueError, match=r"status|cursor|limit"):
            TaskQuery.from_params(bad)
    link = q.params(before=(NOW, "t-1"))
    assert TaskQuery.from_params(link) == TaskQuery(**{**q.__dict__, "before": (NOW, "t-1")})
    assert q.params(status=None, q=None, tool=None) == {"owner": "bob"}
    assert parse_before(f"{NOW + 0.1!r}:a") == (NOW + 0.1, "a")


# --- stats, charts, workers on a constructed set ----------------------------------------


async def constructed(memory: MemoryTaskStore) -> TaskIndex:
    """Finished tasks of known durations per tool, created over the last 90 minutes."""
    for i in range(90):
        tool = "fast" if i % 3 else "slow"
        task = record(tool=tool, retention_ms=WEEK_MS)
        task.created_at = task.updated_at = NOW - 5400 + i * 60 + 1
        if i < 80:
            task.status = "failed" if i % 10 == 0 else "completed"
            took = (i % 7 + 1) * (10 if tool == "slow" else 1)
            task.terminal_at = task.updated_at = task.created_at + took
        await memory.create(task)
    index = TaskIndex(memory, clock=lambda: NOW)
    await index.load()
    return index


async def test_overview_percentiles_failure_rates_and_buckets(memory: MemoryTaskStore) -> None:
    index = await constructed(memory)
    rows = list(index.summaries())
    view = stats.overview(index, stats.BacklogSampler(), NOW)
    for tool_stats in view.tools:
        mine = [s for s in rows if s.tool == tool_stats.tool]
        ended = [s.duration(NOW) for s in mine if s.terminal_at is not None]
        failed = sum(1 for s in mine if s.status == "failed")
        figures = (tool_stats.count, tool_stats.finished, tool_stats.failed)
        assert figures == (len(mine), len(ended), failed)
        assert tool_stats.failure_rate == pytest.approx(failed / len(ended))
        cuts = statistics.quantiles(ended, n=100, method="inclusive")
        assert tool_stats.p50 == pytest.approx(cuts[49])
        assert tool_stats.p95 == pytest.approx(cuts[94])
        assert tool_stats.p99 == pytest.approx(cuts[98])
    window = view.window
    assert window.bucket == 60 and len(view.per_minute) <= stats.MAX_BUCKETS
    assert window.start <= min(s.created_at for s in rows) and window.end > NOW
    for b in view.per_minute:  # reference: every task placed by its own times
        assert b.created == sum(1 for s in rows if b.start <= s.created_at < b.start + 60)
        ends = [s.terminal_at for s in rows if s.terminal_at is not None]
        assert b.finished == sum(1 for t in ends if b.start <= t < b.start + 60)
        end = b.start + 60
        alive = sum(
            1
            for s in rows
            if s.created_at < end and (s.terminal_at is None or s.terminal_at >= end)
        )
        assert b.active == alive
    assert sum(b.created for b in view.per_minute) == 90
    assert view.to_json()["window"]["bucket_seconds"] == 60


def test_windows_get_coarser_buckets() -> None:
    for age, bucket in ((600, 60), (3 * 3600, 120), (20 * 3600, 900), (30 * 86_400, 900)):
        window = stats.window_of(NOW - age, NOW)
        assert window.bucket == bucket
        count = (window.end - window.start) / window.bucket
        assert count <= stats.MAX_BUCKETS and count == int(count)
        assert window.end - window.start <= stats.MAX_WINDOW + window.bucket


def test_percentile_matches_statistics() -> None:
    data = sorted([3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0, 5.0, 3.0, 5.0])
    cuts = statistics.quantiles(data, n=100, method="inclusive")
    for p in (1, 25, 50, 95, 99):
        assert stats.percentile(data, p) == pytest.approx(cuts[p - 1])
    assert stats.percentile([7.0], 99) == 7.0 and stats.percentile([], 50) is None


async def test_slowest_running_and_longest_waiting(memory: MemoryTaskStore) -> None:
    tasks = [record() for _ in range(14)]
    for i, task in enumerate(tasks):
        task.created_at = task.updated_at = NOW - 100 * (i + 1)
        await memory.create(task)
        if i % 2:
            await memory.claim(task.task_id, "h:1:t", NOW + 30)
        else:
            await memory.request_input(task.task_id, {f"k{i}": {"method": "roots/list"}})
    index = TaskIndex(memory, clock=lambda: NOW)
    await index.load()
    view = stats.overview(index, stats.BacklogSampler(), NOW)
    running = [t for i, t in enumerate(tasks) if i % 2]
    assert [r.task.task_id for r in view.slowest_running] == ids(running[::-1])
    assert view.slowest_running[0].seconds == pytest.approx(1400)
    waiting = sorted(
        (s for s in index.summaries() if s.status == "input_required"),
        key=lambda s: s.input_since[0],
    )
    assert [r.task.task_id for r in view.longest_waiting] == ids(waiting)[:10]
    for r in view.longest_waiting:
        assert r.seconds == pytest.approx(NOW - r.task.input_since[0])


async def test_charts_are_valid_accessible_svg(memory: MemoryTaskStore) -> None:
    sampler = stats.BacklogSampler(size=3, min_interval=0)
    empty = stats.overview(TaskIndex(memory), sampler, NOW)
    index = await constructed(memory)
    for i in range(5):
        sampler.sample(index, NOW - 40 + i * 10)
    assert len(sampler.samples) == 3  # a bounded ring
    view = stats.overview(index, sampler, NOW + 3)
    for chart in (throughput_chart(view), backlog_chart(view), throughput_chart(empty)):
        root = ET.fromstring(chart)
        assert root.tag == "{http://www.w3.org/2000/svg}svg"
        assert root.get("role") == "img" and root.get("viewBox") == "0 0 640 220"
        assert root.get("width") == "640" and root.get("height") == "220"
        label = root.get("aria-label") or ""
        title = root.find("{http://www.w3.org/2000/svg}title")
        assert title is not None and title.text
        assert len(label) > 30
    label = ET.fromstring(throughput_chart(view)).get("aria-label") or ""
    assert "90 created" in label and "80 finished" in label
    assert "sampled live" in (ET.fromstring(backlog_chart(view)).get("aria-label") or "")
    assert "no live samples" in (ET.fromstring(backlog_chart(empty)).get("aria-label") or "")


async def test_workers_stale_leases_first(memory: MemoryTaskStore) -> None:
    owners = {"a:10:x": NOW + 25, "b:20:y": NOW - 5, "c:notapid:z": NOW + 10}
    for owner, until in owners.items():
        for _ in range(2 if owner.startswith("c") else 1):
            task = record()
            await memory.create(task)
            await memory.claim(task.task_id, owner, until)
    await memory.create(record())  # unleased: nobody's
    index = TaskIndex(memory)
    await index.load()
    rows = workers(index, NOW, 30.0)
    assert [r.owner for r in rows] == ["b:20:y", "c:notapid:z", "a:10:x"]
    assert [r.stale for r in rows] == [True, False, False]
    for row in rows:
        assert row.heartbeat_age == pytest.approx(max(0.0, NOW - (owners[row.owner] - 30)))
        assert row.to_json(NOW)["task_count"] == len(row.tasks)
    assert (rows[0].host, rows[0].pid) == ("b", 20) and rows[1].pid is None
    assert parse_owner("h:123:t") == ("h", 123)
    assert math.isclose(rows[2].heartbeat_age or 0, 5.0)
