"""Outcomes in a real browser: a tool error is shown, filtered and counted as an error.

Debian's Chromium (Playwright) against `fastmcp-tasks ui` on the store (SQLite, Redis)
a real FastMCP server (`task_server.py`) runs its tasks on, made through an MCP client:

- a tool error (the tool raised a `ToolError`: `completed` on the wire, an `isError`
  result) shows as `tool error`, styled as a failure, is what the status filter
  `error` lists, and counts in its tool's failure rate on the overview.
"""

from __future__ import annotations

import anyio
import pytest
from playwright.async_api import Page, expect

from tests.browser.conftest import World
from tests.browser.pagetools import row_ids
from tests.browser.procs import mcp_client, reaches, start, store_tasks

pytestmark = pytest.mark.anyio


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
