"""The operator features in a real browser: bulk cancel, pause / resume, the audit, workers.

One test, on three stores:

- `memory`: the dashboard served in this process (uvicorn) on a `MemoryTaskStore`;
  tasks and a worker's heartbeats are written through the store's API (no engine
  runs them: a cancelled task nobody runs ends at once, and the workers page must
  show a worker that starts beating, then mark it gone, without a reload);
- `sqlite`, `redis`: the real `task_server.py` and `fastmcp-tasks ui --token-file` of
  the worlds in `conftest`; tasks are started through an MCP client and the workers
  page must list the server's own process from the registry (its heartbeats).

Logged in as `alice` (a labelled token), the test previews "Cancel matching…" on the
list filtered to one tool, starts one more task of it, confirms, and checks that
exactly the previewed tasks end cancelled; pauses and resumes the tool from the
queues page; reads the three entries on the audit page, by `alice`; sees the
history of the late task take the cancel another operator asks for, without a
reload; and finds a worker on the workers page, refreshed without a reload.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import pytest
from playwright.async_api import Page, expect

from fastmcp_tasks import MemoryTaskStore, actions, store_from_url
from fastmcp_tasks.dashboard import app as dashboard_app
from fastmcp_tasks.stores.listing import ListableTaskStore
from fastmcp_tasks.stores.operations import WorkerInfo, operable
from fastmcp_tasks.testing import make_record
from tests.browser.conftest import World
from tests.browser.procs import mcp_client, start
from tests.wire import serve_asgi

pytestmark = pytest.mark.anyio

TOOL = "export_ledger"  # a `hold` of task_server.py no seeded task uses
APP = "dashboard-demo"  # task_server.py's server name: its tasks' application
SECRET = "alice-secret-" + uuid.uuid4().hex[:8]
SEEN_WITHIN = 10.0  # seconds: a new or gone worker shows without a reload


@pytest.fixture(params=["memory", "sqlite", "redis"])
def ops_world(request: pytest.FixtureRequest) -> World | None:
    """The world of the store kind (`None`: the in-process memory dashboard)."""
    if request.param == "memory":
        return None
    return request.getfixturevalue(f"{request.param}_world")  # type: ignore[no-any-return]


@dataclass
class Target:
    """Where the test acts: a dashboard URL, the store, how tasks are made and run."""

    base: str
    store: ListableTaskStore
    make: Callable[[], Awaitable[str]]  # a new active task of TOOL; its id
    show_worker: Callable[[Page], Awaitable[None]]
    finish: list[Callable[[], None]] = field(default_factory=list)


@contextlib.asynccontextmanager
async def memory_target() -> AsyncIterator[Target]:
    store = MemoryTaskStore()
    await store.open()
    application = dashboard_app(store, tokens={"alice": SECRET})

    async def make() -> str:
        task = make_record(tool=TOOL, app=APP)
        await store.create(task)
        return task.task_id

    async def show_worker(page: Page) -> None:
        now = time.time()
        info = WorkerInfo(
            "ops-box:4242:w1", APP, "ops-box", 4242, "9.9", 4, (TOOL,), 0, now, now, 5
        )
        row = page.locator('#worker-table tr[data-worker="ops-box:4242:w1"]')
        await expect(row).to_have_count(0)
        await store.beat(info)  # after the page was read: the page's polling must find it
        await expect(row).to_have_attribute("data-state", "alive", timeout=SEEN_WITHIN * 1000)
        await store.beat(dataclasses.replace(info, last_seen=now - 60))  # silent since
        await expect(row).to_have_attribute("data-state", "gone", timeout=SEEN_WITHIN * 1000)

    # the page's event stream never ends by itself: shutdown waits 1 s for it, no more
    async with serve_asgi(application, timeout_graceful_shutdown=1) as base:
        yield Target(base + "/", store, make, show_worker)


@contextlib.asynccontextmanager
async def world_target(world: World, tmp: Path) -> AsyncIterator[Target]:
    tokens = tmp / "tokens"
    tokens.write_text(f"alice:{SECRET}\n")
    ui = await world.dashboard(token_file=tokens)
    store = store_from_url(world.store_url)
    assert isinstance(store, ListableTaskStore)
    await store.open()
    keys: list[str] = []
    async with mcp_client(world.server) as client:

        async def make() -> str:
            key = f"ops-{uuid.uuid4().hex[:8]}"
            keys.append(key)
            return str((await start(client, TOOL, key=key)).task_id)

        async def show_worker(page: Page) -> None:
            pid = str(world.server.process.pid)
            row = page.locator('#worker-table tr[data-registered="true"]').filter(
                has=page.locator(f'td[data-field="pid"]:text-is("{pid}")')
            )
            await expect(row).to_have_attribute("data-state", "alive", timeout=SEEN_WITHIN * 1000)
            await expect(row.locator('td[data-field="tools"]')).to_contain_text(TOOL)

        try:
            yield Target(ui.base, store, make, show_worker)
        finally:
            for key in keys:
                world.release(key)
            await store.close()


async def status_of(store: ListableTaskStore, task_id: str) -> tuple[str, bool]:
    record = await store.get(task_id)
    assert record is not None, task_id
    return record.status, record.cancel_requested


async def ends(store: ListableTaskStore, task_id: str, status: str) -> None:
    """Poll the store until the task is in `status` (another process may end it)."""
    with anyio.fail_after(10):
        while True:
            if (await status_of(store, task_id))[0] == status:
                return
            await anyio.sleep(0.05)


async def test_bulk_cancel_pause_resume_audit_and_workers(
    ops_world: World | None, page: Page, tmp_path: Path
) -> None:
    context = memory_target() if ops_world is None else world_target(ops_world, tmp_path)
    async with context as target:
        store = target.store
        previewed = [await target.make() for _ in range(2)]
        await page.goto(target.base + f"?token={SECRET}")  # alice's session cookie
        await page.goto(target.base + f"tasks?tool={TOOL}&status=active")
        for task_id in previewed:
            await expect(page.locator(f'#task-rows tr[data-task-id="{task_id}"]')).to_have_count(1)

        # bulk cancel: preview, a task created after it, confirm
        async with page.expect_navigation():
            await page.locator("form#bulk-form button#bulk-cancel").click()
        await expect(page.locator("#bulk-count")).to_have_attribute("data-count", "2")
        late = await target.make()
        async with page.expect_navigation():
            await page.locator("form#bulk-confirm-form button#bulk-confirm").click()
        await expect(page.locator("#bulk-result")).to_have_attribute("data-done", "2")
        for task_id in previewed:
            await ends(store, task_id, "cancelled")
        assert await status_of(store, late) == ("working", False)  # not previewed: untouched

        # pause and resume the tool from the queues page (once the dashboard knows the
        # late task: its list shows it)
        await page.goto(target.base + f"tasks?tool={TOOL}&status=active")
        await expect(page.locator(f'#task-rows tr[data-task-id="{late}"]')).to_have_count(1)
        await page.goto(target.base + "queues")
        row = page.locator(f'#queue-table tr[data-app="{APP}"][data-tool="{TOOL}"]')
        async with page.expect_navigation():
            await row.locator('button[data-verb="pause"]').click()
        paused = page.locator(f'#pause-table tr[data-app="{APP}"][data-tool="{TOOL}"]')
        await expect(paused.locator('td[data-field="by"]')).to_have_text("alice")
        ops = operable(store)
        assert ops is not None and [(p.app, p.tool) for p in await ops.paused()] == [(APP, TOOL)]
        async with page.expect_navigation():
            await paused.locator('button[data-verb="resume"]').click()
        await expect(paused).to_have_count(0)
        assert await ops.paused() == []

        # the audit page lists the three actions, newest first, by alice
        await page.goto(target.base + "audit")
        rows = page.locator("#audit-table tbody tr")
        await expect(rows).to_have_count(3)
        for i, action in enumerate(["resume", "pause", "cancel"]):
            await expect(rows.nth(i)).to_have_attribute("data-action", action)
            await expect(rows.nth(i)).to_have_attribute("data-actor", "alice")
        await expect(rows.nth(2).locator('td[data-field="count"]')).to_have_text("2")

        # a task's history follows it: another operator cancels the late task meanwhile
        await page.goto(target.base + f"tasks/{late}")
        history = page.locator("#history-events")
        await expect(history.locator('li[data-kind="cancel_requested"]')).to_have_count(0)
        await actions.cancel_tasks(store, [late], "bob")
        asked = history.locator('li[data-kind="cancel_requested"]')
        await expect(asked).to_contain_text("by an operator (bob)")  # no reload

        # the workers page lists a worker from the registry, kept current by the page
        await page.goto(target.base + "workers")
        await expect(page.locator("#worker-table")).to_be_visible()
        await target.show_worker(page)
        await page.goto("about:blank")  # its event stream ends with it
