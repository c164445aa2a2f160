"""The dashboard's operator views through the wire: history, workers, warnings, pauses, audit.

Requests go through httpx's ASGI transport to a dashboard on a `MemoryTaskStore` and
on a SQLite file (the `ops_store` fixture: both keep operator records,
`stores.operations`); the records are written through the store's own API, as the
engine and the actions do. A store without the records (`Plain`) shows that it has
none. Waits poll the dashboard with a deadline (`until`): the index follows the store
a fraction of a second later.
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from fastmcp_tasks import MemoryTaskStore, store_from_url
from fastmcp_tasks.dashboard import app as dashboard_app
from fastmcp_tasks.dashboard.history import describe
from fastmcp_tasks.stores.operations import PAUSED_UNTIL, Pause, TaskEvent, WorkerInfo, operable
from fastmcp_tasks.testing import make_record
from tests.test_dashboard_http import client_of, csrf_of, loaded

pytestmark = pytest.mark.anyio
ALICE = {"Authorization": "Bearer alice-secret"}
TOKENS = {"alice": "alice-secret", "viewer": "viewer-secret"}


class Plain(MemoryTaskStore):
    """A listable store without operator records (an older or third-party store)."""

    events = None  # type: ignore[assignment]  # not an OperableTaskStore


async def memory() -> MemoryTaskStore:
    store = MemoryTaskStore()
    await store.open()
    return store


@pytest.fixture(params=["memory", "sqlite"])
async def ops_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    """An opened store that keeps operator records: memory, or a SQLite file."""
    if request.param == "memory":
        store: Any = MemoryTaskStore()
    else:
        store = store_from_url(f"sqlite:///{tmp_path / 'ops.db'}")
    await store.open()
    try:
        yield store
    finally:
        await store.close()


async def until(check: Callable[[], Awaitable[Any]], seconds: float = 10.0) -> Any:
    """Poll `check` until it returns something true (within `seconds`); that value."""
    with anyio.fail_after(seconds):
        while True:
            found = await check()
            if found:
                return found
            await anyio.sleep(0.02)


def worker(worker_id: str, app: str | None, tools: tuple[str, ...], **fields: Any) -> WorkerInfo:
    now = time.time()
    values: dict[str, Any] = {
        "worker_id": worker_id,
        "app": app,
        "host": worker_id.split(":")[0],
        "pid": int(worker_id.split(":")[1]),
        "version": "9.9",
        "concurrency": 8,
        "tools": tools,
        "running": 0,
        "started_at": now - 300,
        "last_seen": now,
        "interval": 5.0,
    }
    values.update(fields)
    return WorkerInfo(**values)


# --- history -----------------------------------------------------------------------------------


async def test_the_detail_page_shows_the_stored_history_and_its_json(ops_store: Any) -> None:
    store = ops_store
    task = make_record(tool="build", app="shop")
    await store.create(task)
    now = time.time()
    events = [
        TaskEvent(
            now - 9, "created", {"app": "shop", "owner": None, "by": "h:1:a", "queued": True}
        ),
        TaskEvent(now - 8, "taken", {"worker": "h:1:a"}),
        TaskEvent(now - 7, "started", {"worker": "h:1:a", "attempt": 1}),
        TaskEvent(now - 6, "message", {"message": "step <b>2</b>"}),
        TaskEvent(now - 5, "retry_scheduled", {"attempt": 1, "at": now + 60, "reason": "503"}),
        TaskEvent(now - 4, "input_requested", {"keys": ["city", "zip"]}),
        TaskEvent(now - 3, "cancel_requested", {"by": "operator", "who": "alice"}),
        TaskEvent(now - 2, "finished", {"outcome": "error", "message": "bad input"}),
        TaskEvent(now - 1, "brand_new_kind", {"speed": 3}),
    ]
    await store.add_events([(task.task_id, e) for e in events])
    async with client_of(dashboard_app(store)) as http:
        page = (await http.get(f"/tasks/{task.task_id}")).text
        section = page[page.index('<section id="history"') :]
        items = re.findall(r'<li data-kind="([a-z_]+)"', section)
        assert items == [e.kind for e in events]  # oldest first, all of them
        for words in (
            "Run started",
            "attempt 1 · on worker h:1:a",
            "step &lt;b&gt;2&lt;/b&gt;",
            "Retry scheduled",
            "reason: 503",
            "keys city, zip",
            "by an operator (alice)",
            "Finished: tool error",
            "Brand new kind",
        ):
            assert words in section, words
        assert "<b>2" not in page
        assert 'id="history-empty" class="hint" hidden' in section
        data = (await http.get(f"/api/tasks/{task.task_id}/history")).json()
        assert data["available"] is True and data["task_id"] == task.task_id
        assert [e["kind"] for e in data["events"]] == [e.kind for e in events]
        cancel = data["events"][6]
        assert (cancel["label"], cancel["text"]) == ("Cancel requested", "by an operator (alice)")
        assert cancel["who"] == "alice" and cancel["at"] == pytest.approx(now - 3)
        assert (await http.get("/api/tasks/nope/history")).status_code == 404


async def test_history_after_a_restart_and_on_a_store_without_one() -> None:
    store = await memory()
    task = make_record()
    await store.create(task)
    await store.add_events([(task.task_id, TaskEvent(time.time(), "taken", {"worker": "w:1:x"}))])
    for _ in range(2):  # a new dashboard on the same store: the history is the store's
        async with client_of(dashboard_app(store)) as http:
            page = (await http.get(f"/tasks/{task.task_id}")).text
            assert "Taken by a worker" in page and "worker w:1:x" in page
    plain = Plain()
    await plain.open()
    other = make_record()
    await plain.create(other)
    assert operable(plain) is None
    async with client_of(dashboard_app(plain)) as http:
        page = (await http.get(f"/tasks/{other.task_id}")).text
        assert 'id="history-unavailable"' in page and "keeps no task history" in page
        data = (await http.get(f"/api/tasks/{other.task_id}/history")).json()
        assert data == {"task_id": other.task_id, "available": False, "events": []}


def test_cancel_words_name_the_client_or_the_operator() -> None:
    now = time.time()
    by_client = TaskEvent(now, "cancel_requested", {"by": "client"})
    assert describe(by_client, now) == ("Cancel requested", "by the client")
    plain = TaskEvent(now, "finished", {"outcome": "completed"})
    assert describe(plain, now) == ("Finished: completed", "")


# --- workers -----------------------------------------------------------------------------------


async def test_workers_come_from_the_registry_and_the_leases(ops_store: Any) -> None:
    store = ops_store
    now = time.time()
    await store.beat(worker("idle:1:a", "shop", ("build",)))
    await store.beat(worker("busy:2:b", "shop", ("build", "ship"), running=1))
    await store.beat(worker("dead:3:c", "shop", ("build",), last_seen=now - 100))
    await store.beat(worker("done:4:d", "shop", ("build",), stopped=True, last_seen=now - 1))
    held = make_record(tool="build", app="shop")
    await store.create(held)
    await store.claim(held.task_id, "busy:2:b", now + 30)
    legacy = make_record(tool="old_tool")
    await store.create(legacy)
    await store.claim(legacy.task_id, "old:5:e", now + 30)
    async with client_of(dashboard_app(store)) as http:
        await loaded(http)
        rows = {w["owner"]: w for w in (await http.get("/api/workers")).json()}
        assert {k: w["state"] for k, w in rows.items()} == {
            "idle:1:a": "alive",
            "busy:2:b": "alive",
            "dead:3:c": "gone",
            "done:4:d": "stopped",
            "old:5:e": "leases",
        }
        busy, legacy_row = rows["busy:2:b"], rows["old:5:e"]
        for key in ("host", "pid", "tasks", "tools", "task_count", "heartbeat_age", "stale"):
            assert key in busy and key in legacy_row, key  # the keys of before stay
        assert busy["tasks"] == [held.task_id] and busy["can_run"] == ["build", "ship"]
        assert busy["registered"] and (busy["running"], busy["concurrency"]) == (1, 8)
        assert rows["idle:1:a"]["task_count"] == 0 and rows["idle:1:a"]["tasks"] == []
        assert rows["dead:3:c"]["stale"] and rows["dead:3:c"]["heartbeat_age"] >= 99
        assert not legacy_row["registered"] and legacy_row["tasks"] == [legacy.task_id]
        assert (legacy_row["host"], legacy_row["pid"]) == ("old", 5)
        page = (await http.get("/workers")).text
        order = re.findall(r'<tr data-worker="([^"]+)" data-state="([a-z]+)"', page)
        assert order[0] == ("dead:3:c", "gone") and order[-1] == ("done:4:d", "stopped")
        assert ">gone</span>" in page and ">unregistered</span>" in page
        assert "1 of 8" in page and "No process holds a lease" not in page
        assert 'id="workers-live"' in page  # what the page's script re-reads
    plain = Plain()
    async with client_of(dashboard_app(plain)) as http:
        page = (await http.get("/workers")).text
        assert 'id="no-registry"' in page and 'id="queue-alerts"' not in page
        assert (await http.get("/api/workers")).json() == []


# --- the no-worker warning -------------------------------------------------------------------


async def alerts(http: httpx.AsyncClient) -> list[dict[str, Any]]:
    return (await http.get("/api/queues")).json()["warnings"]  # type: ignore[no-any-return]


async def test_a_warning_when_queued_tasks_have_no_live_worker(ops_store: Any) -> None:
    store = ops_store
    for _ in range(3):
        await store.create(make_record(tool="build", app="shop"))
    async with client_of(dashboard_app(store)) as http:
        await loaded(http)
        (unserved,) = await until(lambda: alerts(http))
        assert (unserved["kind"], unserved["app"], unserved["tool"]) == (
            "unserved",
            "shop",
            "build",
        )
        assert unserved["text"].startswith(
            "3 tasks of app 'shop' wait (tool 'build') and no live worker can run them"
        )
        assert "no live worker is registered" in unserved["text"]  # none ever registered
        page = (await http.get("/")).text
        box = page[page.index('<section id="queue-alerts"') :]
        opening = re.match(r'<section id="queue-alerts"[^>]*>', box)
        assert opening is not None and " hidden" not in opening.group(0)  # shown
        assert "wait (tool &#x27;build&#x27;) and no live worker can run them" in box
        await store.beat(worker("w:1:a", "shop", ("ship",)))  # the app, not the tool
        (other,) = await alerts(http)
        assert "1 live worker of the app does not declare the tool" in other["text"]
        await store.beat(worker("w:2:b", "other-app", ("build",)))  # the tool, not the app
        assert len(await alerts(http)) == 1
        await store.beat(worker("w:3:c", "shop", ("build",)))
        assert await alerts(http) == []
        assert "no live worker can run" not in (await http.get("/")).text
        await store.beat(worker("w:3:c", "shop", ("build",), last_seen=time.time() - 60))
        assert len(await alerts(http)) == 1  # it went silent: gone
    async with client_of(dashboard_app(Plain())) as http:
        assert (await http.get("/api/queues")).json()["available"] is False
        assert 'id="queue-alerts"' not in (await http.get("/")).text


async def test_held_tasks_are_paused_not_unserved_and_marked_in_the_list(ops_store: Any) -> None:
    store = ops_store
    task = make_record(tool="build", app="shop")
    await store.create(task)
    waiting = make_record(tool="build", app="shop")
    await store.create(waiting)
    await store.pause(Pause("shop", "build", time.time(), "alice"))
    await store.claim(task.task_id, "w:1:a", time.time() + 30)
    held = await store.hold_paused(task.task_id, "w:1:a", "Paused by an operator")
    assert held is not None and held.not_before == PAUSED_UNTIL
    async with client_of(dashboard_app(store)) as http:
        await loaded(http)

        async def both() -> list[dict[str, Any]]:
            found = await alerts(http)
            return found if len(found) == 2 else []

        kinds = {a["kind"]: a for a in await until(both)}
        assert kinds["unserved"]["count"] == 1  # the held one is not counted as waiting
        assert kinds["paused"]["text"] == (
            "1 task of app 'shop' is held: tool 'build' is paused by alice"
        )
        rows = (await http.get("/tasks")).text
        assert f'data-task-id="{task.task_id}"' in rows
        row = re.search(rf'<tr data-task-id="{task.task_id}"[^>]*>', rows)
        assert row is not None and 'data-paused="true"' in row.group(0)
        other = re.search(rf'<tr data-task-id="{waiting.task_id}"[^>]*>', rows)
        assert other is not None and "data-paused" not in other.group(0)
        listed = (await http.get("/api/tasks")).json()["tasks"]
        assert {t["id"]: t["paused"] for t in listed} == {
            task.task_id: True,
            waiting.task_id: False,
        }


# --- pause and resume, the audit log -----------------------------------------------------------


async def test_pause_and_resume_round_trip_audited_with_the_token_label(ops_store: Any) -> None:
    store = ops_store
    task = make_record(tool="build", app="shop")
    await store.create(task)
    await store.beat(worker("w:1:a", "shop", ("build", "ship")))
    application = dashboard_app(store, tokens=TOKENS, read_only_labels=["viewer"])
    async with client_of(application, headers=ALICE) as http:
        await loaded(http)
        page = (await http.get("/queues")).text
        assert 'id="queue-table"' in page and "No tool is paused." in page
        assert 'aria-label="Pause tool build of app &#x27;shop&#x27;"' in page
        csrf = csrf_of(page)
        paused = await http.post(
            "/queues/pause", data={"csrf": csrf, "app": "shop", "tool": "build"}
        )
        assert paused.status_code == 303 and paused.headers["location"] == "/queues"
        assert [(p.app, p.tool, p.by) for p in await store.paused()] == [("shop", "build", "alice")]
        page = (await http.get("/queues")).text
        pause_table = page[page.index('id="pause-table"') : page.index('id="queue-table"')]
        assert "alice" in pause_table and 'data-verb="resume"' in pause_table
        data = (await http.get("/api/queues")).json()
        assert data["pauses"][0]["by"] == "alice"
        shop_build = next(q for q in data["queues"] if q["tool"] == "build")
        assert shop_build["paused"]["app"] == "shop" and shop_build["workers"] == 1
        again = await http.post(
            "/queues/pause", data={"csrf": csrf, "app": "shop", "tool": "build"}
        )
        assert again.status_code == 303  # already paused: no second entry
        resumed = await http.post(
            "/queues/resume", data={"csrf": csrf, "app": "shop", "tool": "build"}
        )
        assert resumed.status_code == 303 and await store.paused() == []
        blank = await http.post("/queues/pause", data={"csrf": csrf, "app": "shop", "tool": " "})
        assert blank.status_code == 400
        entries = (await http.get("/api/audit")).json()["entries"]
        assert [(e["actor"], e["action"]) for e in entries] == [
            ("alice", "resume"),
            ("alice", "pause"),
        ]
        assert entries[0]["details"] == {
            "via": "dashboard",
            "app": "shop",
            "tool": "build",
            "released": 0,
        }
        audit = (await http.get("/audit")).text
        assert "via dashboard" in audit
        rows = re.findall(r'<tr data-action="([a-z]+)" data-actor="([a-z]+)">', audit)
        assert rows == [("resume", "alice"), ("pause", "alice")]
        assert "tool build of app shop" in audit
        assert (await http.get("/api/audit", params={"limit": "1"})).json()["entries"][0][
            "action"
        ] == "resume"
        assert (await http.get("/api/audit", params={"limit": "0"})).status_code == 400
    async with client_of(dashboard_app(Plain())) as http:
        assert 'id="audit-unavailable"' in (await http.get("/audit")).text
        assert (await http.get("/api/audit")).json() == {"available": False, "entries": []}
        page = (await http.get("/queues")).text
        assert 'id="queues-unavailable"' in page
        refused = await http.post(
            "/queues/pause", data={"csrf": csrf_of((await http.get("/tasks")).text), "tool": "x"}
        )
        assert refused.status_code == 400 and "operator records" in refused.text


async def test_the_single_cancel_and_the_purge_by_age_are_audited(ops_store: Any) -> None:
    store = ops_store
    task = make_record(tool="build")
    await store.create(task)
    old = make_record(tool="build", retention_ms=7 * 86_400_000)
    old.created_at = time.time() - 3 * 86_400
    await store.create(old)
    await store.transition(old.task_id, "completed", result={"content": []})
    async with client_of(dashboard_app(store, token="op-secret")) as http:
        http.headers["Authorization"] = "Bearer op-secret"
        csrf = csrf_of((await http.get(f"/tasks/{task.task_id}")).text)
        done = await http.post(f"/tasks/{task.task_id}/cancel", data={"csrf": csrf})
        assert done.status_code == 303
        after = await store.get(task.task_id)
        assert after is not None and after.status == "cancelled"  # nobody ran it: at once
        kinds = [(e.kind, e.details.get("who")) for e in await store.events(task.task_id)]
        assert kinds == [("cancel_requested", "operator")]  # token= is the label "operator"
        preview = await http.post("/purge/preview", data={"csrf": csrf, "older_than": "0s"})
        before = re.search(r'name="before" value="([^"]+)"', preview.text)
        assert before is not None
        purged = await http.post("/purge", data={"csrf": csrf, "before": before.group(1)})
        assert 'data-removed="2"' in purged.text  # the old one and the one just cancelled
        entries = await store.audit()
        assert [(e.actor, e.action, e.count) for e in entries] == [
            ("operator", "purge", 2),
            ("operator", "cancel", 1),
        ]
        assert "ended_before" in entries[0].details
