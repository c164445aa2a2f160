"""Layout, accessibility and the README's screenshots, in a real browser.

- at 375 px (a phone) and 1280 px (a laptop) no page scrolls sideways: the body is
  never wider than the viewport (a wide table may scroll inside its own box);
- every visible link, button and form field has an accessible name (Chromium's
  accessibility tree, over CDP) that `get_by_role(role, name=...)` finds it by, and
  the task filters and the cancel button are reachable with Tab;
- the screenshots: overview, tasks, the detail of a task waiting for input (with its
  history), workers, queues (a paused tool) and the audit log at 1280 px, and the
  tasks page at 390 px. They are always taken (into the test's
  temporary directory, checked as PNGs there); with `DASHBOARD_SCREENSHOTS=DIR`
  (`DASHBOARD_SCREENSHOTS=docs/screenshots` for the README) they are copied to DIR,
  so a CI run never touches the working tree.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import anyio
import pytest
from playwright.async_api import BrowserContext, expect

from fastmcp_tasks import actions
from fastmcp_tasks.stores import store_from_url
from tests.browser.conftest import World, running_world
from tests.browser.pagetools import keyboard_reachable, overflow, unnamed_controls
from tests.browser.procs import mcp_client, reaches, start

pytestmark = pytest.mark.anyio

Opener = Callable[..., Awaitable[BrowserContext]]
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
async def waiting(sqlite_world: World) -> AsyncIterator[dict[str, str]]:
    """A task in `input_required` and a running one (held until the test ends)."""
    key = f"shown-{uuid.uuid4().hex[:8]}"
    async with mcp_client(sqlite_world.server) as client:
        asking = await start(client, "ask", question="Approve the refund of order #4411?")
        held = await start(client, "hold", key=key)
        sqlite_world.say(key, "Rendering page 3/12")
        await reaches(asking, "input_required")
        try:
            yield {"asking": str(asking.task_id), "running": str(held.task_id)}
        finally:
            sqlite_world.release(key)


def pages(ids: dict[str, str]) -> dict[str, str]:
    return {
        "overview": "",
        "tasks": "tasks",
        "detail": f"tasks/{ids['asking']}",
        "running": f"tasks/{ids['running']}",
        "workers": "workers",
        "queues": "queues",
        "audit": "audit",
    }


@pytest.mark.parametrize("width", [375, 1280])
async def test_no_page_scrolls_sideways(
    sqlite_world: World, waiting: dict[str, str], open_context: Opener, width: int
) -> None:
    page = await (await open_context(width=width, height=800)).new_page()
    wide: dict[str, dict[str, object]] = {}
    for name, path in pages(waiting).items():
        await page.goto(sqlite_world.ui.base + path)
        await expect(page.locator("main")).to_be_visible()
        beyond = await overflow(page)
        if int(beyond["body"]) > 0 or int(beyond["document"]) > 0:  # type: ignore[call-overload]
            wide[name] = beyond
    assert not wide, f"wider than the {width} px viewport (px beyond): {wide}"


async def test_controls_have_accessible_names(
    sqlite_world: World, waiting: dict[str, str], open_context: Opener
) -> None:
    page = await (await open_context()).new_page()
    problems: dict[str, list[str]] = {}
    for name, path in pages(waiting).items():
        await page.goto(sqlite_world.ui.base + path)
        found = await unnamed_controls(page)
        if found:
            problems[name] = found
    assert not problems, problems
    await page.goto(sqlite_world.ui.base + "tasks")
    assert await page.get_by_role("searchbox").count() == 1
    assert await page.get_by_role("combobox").count() >= 2
    for selector in ["#filter-status", "#search", "#apply-filters"]:
        assert await keyboard_reachable(page, selector), f"Tab never reaches {selector}"
    await page.goto(sqlite_world.ui.base + f"tasks/{waiting['running']}")
    assert await keyboard_reachable(page, "#cancel-button"), "Tab never reaches #cancel-button"


@pytest.fixture
async def showcase(browser: object, tmp_path: Path) -> AsyncIterator[tuple[World, str]]:
    """A store of its own for the README: seeded history, plus tasks a real server runs
    now (finished, failed, two running with progress messages, one asking); yields the
    world and the id of the task that asks."""
    url = f"sqlite:///{tmp_path / 'showcase.db'}"
    async with running_world("sqlite", url, tmp_path / "showcase") as world:
        async with mcp_client(world.server) as client:
            for number in (2041, 2042, 2043):
                await reaches(
                    await start(client, "send_invoice", text=f"INV-{number}"), "completed"
                )
            declined = await start(client, "charge_card", reason="card declined by the issuer (51)")
            await reaches(declined, "failed")
            for tool, message in [
                ("render_report", "Rendering page 7/12"),
                ("export_ledger", "Exported 41,200 of 120,000 rows"),
            ]:
                key = f"{tool}-{uuid.uuid4().hex[:6]}"
                await start(client, tool, key=key)
                world.say(key, message)
                with anyio.fail_after(10):
                    while not (world.markers / f"{key}.said").exists():  # noqa: ASYNC110 - a file
                        await anyio.sleep(0.02)
            bad_rows = await start(client, "import_rows", reason="row 17: 'amount' is not a number")
            await reaches(bad_rows, "completed")  # a tool error: `error` to an operator
            stale = await start(client, "render_report", key=f"stale-{uuid.uuid4().hex[:6]}")
            asking = await start(
                client, "approve_refund", question="Approve the refund of order #4411?"
            )
            await reaches(asking, "input_required")
            store = store_from_url(url)
            await store.open()
            try:  # what the operators did, for the audit page and the queues page
                await actions.cancel_tasks(store, [str(stale.task_id)], "alice")
                await reaches(stale, "cancelled")
                await actions.pause_tool(store, "dashboard-demo", "export_ledger", "bob")
            finally:
                await store.close()
            yield world, str(asking.task_id)


async def test_screenshots(
    showcase: tuple[World, str],
    open_context: Opener,
    screenshots: Callable[[str], Path],
) -> None:
    world, asking = showcase
    base = world.ui.base
    laptop = await (await open_context(width=1280, height=860)).new_page()
    with anyio.fail_after(15):  # the charts need the whole index, read after the first request
        while True:
            overview = await (await laptop.request.get(base + "api/overview")).json()
            if overview["loaded"] and overview["tools"]:
                break
            await anyio.sleep(0.1)
    wanted = {
        "overview": ("", "#chart-throughput svg"),
        "tasks": ("tasks", "#task-rows tr"),
        "task-detail": (f"tasks/{asking}", "#detail-inputs li[data-input-key]"),
        "workers": ("workers", "#worker-table"),
        "queues": ("queues", "main table"),
        "audit": ("audit", "main table"),
    }
    for name, (path, ready) in wanted.items():
        await laptop.goto(base + path)
        await expect(laptop.locator(ready).first).to_be_visible()
        await expect(laptop.locator("#live-status")).to_have_attribute("data-state", "live")
        await laptop.screenshot(path=screenshots(name), full_page=name != "tasks")
    phone = await (await open_context(width=390, height=844, device_scale_factor=2)).new_page()
    await phone.goto(base + "tasks")
    await expect(phone.locator("#task-rows tr").first).to_be_visible()
    await expect(phone.locator("#live-status")).to_have_attribute("data-state", "live")
    await phone.screenshot(path=screenshots("phone-tasks"))
    for name in [*wanted, "phone-tasks"]:
        data = screenshots(name).read_bytes()
        assert data.startswith(PNG) and len(data) > 10_000, name
