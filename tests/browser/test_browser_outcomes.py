"""Outcomes, a task's page to its end, and the filters, in a real browser.

Debian's Chromium (Playwright) against `fastmcp-tasks ui` on the store (SQLite, Redis)
a real FastMCP server (`task_server.py`) runs its tasks on, made through an MCP client:

- a tool error (the tool raised a `ToolError`: `completed` on the wire, an `isError`
  result) shows as `tool error`, styled as a failure, is what the status filter
  `error` lists, and counts in its tool's failure rate on the overview;
- a task's page opened while it runs shows its arguments (still there, read afresh, after
  the end), counts its duration on, and turns to its result (or its tool error), final
  duration and lease when it ends, without a reload;
- the list's filters apply as they change (no Apply click), the URL following them
  (a reload shows the same list); without the script the Apply button still works.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable

import anyio
import pytest
from playwright.async_api import BrowserContext, Page, expect

from tests.browser.conftest import World
from tests.browser.pagetools import applied, row_ids
from tests.browser.procs import mcp_client, reaches, start, store_tasks

pytestmark = pytest.mark.anyio

Opener = Callable[..., Awaitable[BrowserContext]]


async def test_a_tool_error_shows_as_an_error_and_counts_as_a_failure(
    world: World, page: Page
) -> None:
    async with mcp_client(world.server) as client:
        oops = await start(client, "oops", reason="the address has no street")
        done = await start(client, "quick", text="fine")
        await reaches(oops, "completed")  # the MCP wire says completed, as before
        await reaches(done, "completed")
    await page.goto(world.ui.base + "tasks")
    row = page.locator(f'#task-rows tr[data-task-id="{oops.task_id}"]')
    await expect(row).to_have_attribute("data-outcome", "error")
    badge = row.locator("[data-field=status] .badge")
    await expect(badge).to_have_text("tool error")
    await expect(badge).to_have_class("badge status-error")
    failed_row = page.locator('#task-rows tr[data-status="failed"]').first
    colour = "(el) => getComputedStyle(el).color"
    failed_colour = await failed_row.locator(".badge").evaluate(colour)
    assert await badge.evaluate(colour) == failed_colour  # the failure's colour
    await expect(page.locator(f'#task-rows tr[data-task-id="{done.task_id}"] .badge')).to_have_text(
        "completed"
    )

    await page.goto(world.ui.base + "tasks?status=error")
    await expect(page.locator("select#filter-status")).to_have_value("error")
    stored = await store_tasks(world.store_url)
    errors = {i for i, t in stored.items() if (t.result or {}).get("isError") is True}
    assert set(await row_ids(page)) == errors and oops.task_id in errors

    await page.goto(world.ui.base + f"tasks/{oops.task_id}")
    await expect(page.locator("#detail-status .badge")).to_have_text("tool error")
    await expect(page.locator("#detail-tool-error")).to_have_text("the address has no street")

    tool = page.locator('#tool-table tr[data-tool="oops"]')
    with anyio.fail_after(10):  # the overview's pass over the tasks is cached a moment
        while True:
            await page.goto(world.ui.base)
            if (
                await tool.count()
                and await tool.locator("[data-field=failure-rate]").inner_text() == "100.0%"
            ):
                break
            await anyio.sleep(0.2)
    assert int(await tool.locator("[data-field=tool-errors]").inner_text()) >= 1
    assert await tool.locator("[data-field=failed]").inner_text() == "0"
    assert int(await page.locator('[data-count="error"]').inner_text()) >= 1


async def test_a_task_page_follows_the_task_to_its_end(world: World, page: Page) -> None:
    key, bad = f"end-{uuid.uuid4().hex[:8]}", f"end-bad-{uuid.uuid4().hex[:8]}"
    async with mcp_client(world.server) as client:
        held = await start(client, "hold", key=key)
        failing = await start(client, "hold", key=bad, fail=f"no paper in tray {bad}")
        await reaches(held, "working")
        await page.goto(world.ui.base + f"tasks/{held.task_id}")
        await expect(page.locator("#live-status")).to_have_attribute("data-state", "live")
        await page.evaluate("() => { window.__sameDocument = true; }")
        await expect(page.locator("#detail-arguments")).to_contain_text(f'"key": "{key}"')
        elapsed = page.locator("#detail-duration [data-field=elapsed]")
        first = await elapsed.inner_text()
        await expect(elapsed).not_to_have_text(first)  # it counts on while the task runs
        await expect(page.locator("#cancel-form")).to_have_count(1)

        world.release(key)
        await reaches(held, "completed")
        await expect(page.locator("#detail-result")).to_contain_text(f"held {key}")
        await expect(page.locator("#task-detail")).to_have_attribute("data-status", "completed")
        await expect(page.locator("#detail-status .badge")).to_have_text("completed")
        await expect(elapsed).to_have_count(0)  # the final duration, no longer counting
        await expect(page.locator("#detail-duration")).not_to_be_empty()
        await expect(page.locator("#detail-times")).to_contain_text("Ended")
        await expect(page.locator("#detail-lease")).to_have_text("none (the task ended)")
        await expect(page.locator("#cancel-form, #detail-reload")).to_have_count(0)
        await expect(page.locator("#detail-transitions li").last).to_contain_text("completed")
        assert await page.evaluate("() => window.__sameDocument === true"), "the page reloaded"
        await page.reload()  # read afresh from the store: a finished task keeps its arguments
        await expect(page.locator("#detail-arguments")).to_contain_text(f'"key": "{key}"')

        await page.goto(world.ui.base + f"tasks/{failing.task_id}")
        await expect(page.locator("#live-status")).to_have_attribute("data-state", "live")
        await page.evaluate("() => { window.__sameDocument = true; }")
        world.release(bad)
        await reaches(failing, "completed")
        await expect(page.locator("#detail-tool-error")).to_have_text(f"no paper in tray {bad}")
        await expect(page.locator("#detail-status .badge")).to_have_text("tool error")
        await expect(page.locator("#task-detail")).to_have_attribute("data-outcome", "error")
        await expect(page.locator("#detail-transitions li").last).to_contain_text("tool error")
        assert await page.evaluate("() => window.__sameDocument === true"), "the page reloaded"


async def test_filters_apply_as_they_change_and_the_url_follows(
    sqlite_world: World, page: Page, open_context: Opener
) -> None:
    world = sqlite_world
    stored = await store_tasks(world.store_url)
    await page.goto(world.ui.base + "tasks")
    await page.evaluate("() => { window.__sameDocument = true; }")
    await page.locator("select#filter-status").select_option("failed")
    await applied(page, {"status": "failed"})
    failed = {i for i, t in stored.items() if t.status == "failed"}
    assert set(await row_ids(page)) == failed and failed
    held = world.ids["stale"]
    await page.locator("input#search").fill(held[:8])  # applied once the typing pauses
    await applied(page, {"status": "failed", "q": held[:8]})
    await expect(page.locator("#no-tasks")).to_be_visible()
    await page.locator("select#filter-status").select_option("")
    await applied(page, {"q": held[:8]})
    assert held in await row_ids(page)
    assert await page.evaluate("() => window.__sameDocument === true"), "the page reloaded"
    await page.reload()  # the URL is the list: shareable, reloadable
    await expect(page.locator("input#search")).to_have_value(held[:8])
    assert held in await row_ids(page)
    assert await page.get_by_role("button", name="Preview purge", exact=True).count() == 1

    plain = await (await open_context(java_script_enabled=False)).new_page()
    await plain.goto(world.ui.base + "tasks")
    await plain.locator("select#filter-status").select_option("failed")
    async with plain.expect_navigation():
        await plain.get_by_role("button", name="Apply filters").click()
    assert "status=failed" in plain.url
    assert set(await row_ids(plain)) == failed
