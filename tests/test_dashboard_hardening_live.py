"""Hardening of the dashboard's live part (review of issue 18): what reaches open pages.

A cancel or purge made in the dashboard, changes made during a store outage, and
changes made while a periodic rescan runs all reach every open page; an unrelated
purge does not make pages reload; streams whose clients left are forgotten. Through
the wire (a real uvicorn), real SQLite files, every wait bounded.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from fastmcp_tasks.dashboard import app as dashboard_app
from fastmcp_tasks.dashboard import live
from fastmcp_tasks.stores.base import TaskRecord
from tests.faults import FaultyStore
from tests.test_dashboard_http import (
    DAY,
    csrf_of,
    finished,
    new_task,
    opened,
    read_events,
    served,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'tasks.db'}"


def status_is(state: str) -> Any:
    return lambda pairs: ("status", {"state": state}) in pairs


def row_with(task_id: str, **fields: Any) -> Any:
    def check(pairs: list[tuple[str, Any]]) -> bool:
        return any(
            name == "tasks"
            and any(t["id"] == task_id and all(t[k] == v for k, v in fields.items()) for t in data)
            for name, data in pairs
        )

    return check


# --- a cancel or a purge made in the dashboard reaches the other open pages ---------------


async def test_a_cancel_from_the_dashboard_reaches_the_other_open_pages(sqlite_url: str) -> None:
    """The cancel route publishes what its own refresh found: the hub's refresh of the
    feed change later finds nothing new, and a second tab must still see `cancelled`."""
    store = await opened(sqlite_url)
    try:
        task = new_task("crunch")  # queued: no lease, so the cancel ends it at once
        await store.create(task)
        async with (
            served(dashboard_app(sqlite_url)) as base,
            httpx.AsyncClient(base_url=base, timeout=10) as http,
        ):
            page = await http.get(f"/tasks/{task.task_id}")
            async with http.stream("GET", "/events", params={"page": "tasks"}) as other_tab:
                lines = other_tab.aiter_lines()
                await read_events(lines, status_is("live"), within=10)
                done = await http.post(
                    f"/tasks/{task.task_id}/cancel", data={"csrf": csrf_of(page.text)}
                )
                assert done.status_code == 303
                assert (await store.get(task.task_id)).status == "cancelled"  # type: ignore[union-attr]
                await read_events(lines, row_with(task.task_id, status="cancelled"), within=5)
    finally:
        await store.close()


async def test_a_purge_from_the_dashboard_tells_the_open_lists(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The purge route publishes the tasks its reload dropped as `gone` (the hub's later
    rescans find the index already purged; RELOAD is shortened so several pass)."""
    monkeypatch.setattr(live, "RELOAD", 0.5)
    store = await opened(sqlite_url)
    try:
        old = {await finished(store, "completed", 3 * DAY) for _ in range(3)}
        async with (
            served(dashboard_app(sqlite_url)) as base,
            httpx.AsyncClient(base_url=base, timeout=10) as http,
        ):
            tasks = await http.get("/tasks")
            async with http.stream("GET", "/events", params={"page": "tasks"}) as other_tab:
                lines = other_tab.aiter_lines()
                await read_events(lines, status_is("live"), within=10)
                preview = await http.post(
                    "/purge/preview", data={"older_than": "1d", "csrf": csrf_of(tasks.text)}
                )
                before = re.search(r'name="before" value="([^"]+)"', preview.text)
                assert before is not None
                done = await http.post(
                    "/purge", data={"before": before.group(1), "csrf": csrf_of(preview.text)}
                )
                assert 'data-removed="3"' in done.text

                def all_gone(pairs: list[tuple[str, Any]]) -> bool:
                    seen = {i for name, data in pairs if name == "gone" for i in data}
                    return old <= seen

                await read_events(lines, all_gone, within=5)
    finally:
        await store.close()


# --- changes made while the store was down reach the open pages after it ------------------


async def test_changes_made_during_an_outage_reach_the_open_pages_after_it(
    sqlite_url: str,
) -> None:
    """Back from an outage, the hub's rescan publishes what changed meanwhile (and ids
    whose refresh failed are kept for the next one): the row is current again."""
    inner = await opened(sqlite_url)
    try:
        task = new_task("crunch")
        await inner.create(task)
        store = FaultyStore(inner)
        async with (
            served(dashboard_app(store)) as base,  # type: ignore[arg-type]
            httpx.AsyncClient(base_url=base, timeout=10) as http,
        ):
            assert (await http.get("/tasks")).status_code == 200
            async with http.stream("GET", "/events", params={"page": "tasks"}) as response:
                lines = response.aiter_lines()
                await read_events(lines, status_is("live"), within=10)
                store.outage()
                await read_events(lines, status_is("offline"), within=10)
                await inner.set_status_message(task.task_id, "changed while down")
                store.restore()
                await read_events(lines, status_is("live"), within=15)
                changed = row_with(task.task_id, message="changed while down")
                await read_events(lines, changed, within=5)
    finally:
        await inner.close()


# --- a page hears only of the gone tasks it shows -----------------------------------------


async def test_a_purge_of_unrelated_tasks_does_not_make_a_detail_page_reload(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A gone task is offered only to listeners that wanted its last state: a purge (or
    an expiry wave) of 1,001 unrelated tasks by another process, past MAX_BUFFER, must
    not make the detail page of a running task `resync` (reload)."""
    monkeypatch.setattr(live, "RELOAD", 0.5)
    store = await opened(sqlite_url)
    try:
        watched = new_task("crunch")
        await store.create(watched)
        now = time.time()
        olds = []
        for _ in range(live.MAX_BUFFER + 1):
            old = new_task("report", retention_ms=7 * 86_400_000)
            old.created_at = now - 3 * DAY - 60
            old.status = "completed"  # type: ignore[assignment]
            old.terminal_at = old.updated_at = now - 3 * DAY
            olds.append(old)
        async with anyio.create_task_group() as group:
            for old in olds:
                group.start_soon(store.create, old)
        async with (
            served(dashboard_app(sqlite_url)) as base,
            httpx.AsyncClient(base_url=base, timeout=10) as http,
        ):
            assert (await http.get(f"/tasks/{watched.task_id}")).status_code == 200
            params = {"page": "task", "id": watched.task_id}
            async with http.stream("GET", "/events", params=params) as detail:
                lines = detail.aiter_lines()
                await read_events(lines, status_is("live"), within=10)
                assert await store.purge_finished(now - DAY) == len(olds)  # `fastmcp-tasks purge`
                await store.set_status_message(watched.task_id, "still here")
                row = row_with(watched.task_id, message="still here")
                pairs = await read_events(
                    lines, lambda p: row(p) or any(n == "resync" for n, _ in p), within=5
                )
                unrelated = [(n, len(d)) for n, d in pairs if n in ("resync", "gone")]
                assert not unrelated, f"the detail page of one task was sent {unrelated}"
    finally:
        await store.close()


# --- a periodic rescan never holds live updates back -------------------------------------


class SlowRescan(FaultyStore):
    """Once `armed`, a full listing (a rescan: no status filter) waits for `gate`."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.armed = False
        self.scanning = anyio.Event()
        self.gate = anyio.Event()

    async def list_tasks(self, **options: Any) -> list[TaskRecord]:
        if self.armed and options.get("status") is None:
            self.scanning.set()
            await self.gate.wait()
        result: list[TaskRecord] = await self.inner.list_tasks(**options)
        return result


async def test_live_updates_keep_flowing_while_the_index_rescans(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The periodic rescan (2 s at 100,000 tasks) runs beside the refreshes: a change
    made while it is provably in flight (its listing blocked) still reaches the page."""
    monkeypatch.setattr(live, "RELOAD", 0.3)
    inner = await opened(sqlite_url)
    store = SlowRescan(inner)
    try:
        watched = new_task("crunch")
        await inner.create(watched)
        application = dashboard_app(store)  # type: ignore[arg-type]
        index = application.state.dashboard.index
        async with (
            served(application) as base,
            httpx.AsyncClient(base_url=base, timeout=10) as http,
        ):
            assert (await http.get("/tasks")).status_code == 200
            params = {"page": "tasks", "tool": "crunch"}
            async with http.stream("GET", "/events", params=params) as response:
                lines = response.aiter_lines()
                await read_events(lines, status_is("live"), within=10)
                store.armed = True
                with anyio.fail_after(10):
                    await store.scanning.wait()  # a periodic rescan began, and is stuck
                await inner.set_status_message(watched.task_id, "step 2")
                await read_events(lines, row_with(watched.task_id, message="step 2"), within=5)
                assert index._scan_lock.locked() and not store.gate.is_set()  # still scanning
                store.gate.set()
                await inner.set_status_message(watched.task_id, "step 3")
                await read_events(lines, row_with(watched.task_id, message="step 3"), within=5)
    finally:
        store.gate.set()
        await inner.close()


# --- SSE clients that go away are forgotten -----------------------------------------------


async def test_many_event_streams_are_forgotten_when_their_clients_leave(sqlite_url: str) -> None:
    """50 streams open at once, then closed: the hub forgets them."""
    store = await opened(sqlite_url)
    try:
        await store.create(new_task("crunch"))
        application = dashboard_app(sqlite_url)
        hub = application.state.dashboard.hub
        async with served(application) as base:
            async with httpx.AsyncClient(base_url=base, timeout=10) as warm:
                assert (await warm.get("/tasks")).status_code == 200

            async def one() -> None:
                async with (
                    httpx.AsyncClient(base_url=base, timeout=10) as http,
                    http.stream("GET", "/events", params={"page": "tasks"}) as response,
                ):
                    await read_events(response.aiter_lines(), status_is("live"), within=10)

            async with anyio.create_task_group() as group:
                for _ in range(50):
                    group.start_soon(one)
            with anyio.fail_after(10):
                while hub.listeners:  # noqa: ASYNC110 - no event for it
                    await anyio.sleep(0.05)
    finally:
        await store.close()
