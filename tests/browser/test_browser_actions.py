"""The dashboard's actions and their guards in a real browser: purge, the token, read-only.

- purge: the preview counts exactly the finished tasks older than the age; the
  confirmation removes exactly those (counted in the store before and after), not a
  task that finished after the preview, nor an old task still running;
- with a token: without it every page answers 401 with the login form, and the JSON
  API, the event stream and the actions answer 401 (a task stays untouched); a wrong
  token is refused; the login form sets the HttpOnly SameSite=Strict cookie
  (`fastmcp_tasks_ui`, or `fastmcp_tasks_ui_<port>` as `fastmcp-tasks ui` names it), after
  which the pages and the cancel button work; `?token=` logs in and leaves the URL;
- read-only: no `form[method=post]` on any page, no cancel or purge control, and every
  POST route answers 403 (the task stays untouched).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import anyio
import pytest
from playwright.async_api import BrowserContext, Page, expect

from tests.browser.conftest import SETUP_TIMEOUT, World
from tests.browser.procs import (
    DAY,
    MEASURED,
    Dashboard,
    _opened,
    _task,
    mcp_client,
    reaches,
    seed,
    start,
    store_tasks,
)

pytestmark = pytest.mark.anyio

Opener = Callable[..., Awaitable[BrowserContext]]


@pytest.fixture
async def purge_world(tmp_path: Path, browser: object) -> AsyncIterator[tuple[str, Dashboard]]:
    """A seeded SQLite store of its own (purge deletes) and a dashboard on it."""
    url = f"sqlite:///{tmp_path / 'purge.db'}"
    with anyio.fail_after(SETUP_TIMEOUT):
        await seed(url)
    ui = Dashboard(url, tmp_path)
    try:
        with anyio.fail_after(SETUP_TIMEOUT):
            await ui.ready()
        yield url, ui
    finally:
        ui.stop()


async def test_purge_removes_only_what_the_preview_said(
    purge_world: tuple[str, Dashboard], page: Page
) -> None:
    url, ui = purge_world
    before = await store_tasks(url)
    cutoff = time.time() - DAY
    expected = {
        i for i, t in before.items() if t.terminal_at is not None and t.terminal_at < cutoff
    }
    assert expected and any(t.is_active and t.created_at < cutoff for t in before.values())
    await page.goto(ui.base + "tasks")
    form = page.locator('form#purge-form[method=post][action="purge/preview"]')
    await form.locator("input#purge-age").fill("1d")
    async with page.expect_navigation():
        await form.locator("button#purge-preview").click()
    count = page.locator("#purge-count")
    await expect(count).to_have_attribute("data-count", str(len(expected)))
    assert await store_tasks(url) == before, "the preview deleted something"

    store = await _opened(url)  # a task that finishes after the preview stays
    try:
        late = _task("sync_invoices", "completed", time.time() - 5, owner="app|alice")
        late.terminal_at = late.updated_at = time.time()
        late.result_json = json.dumps({"content": []})
        await store.create(late)
    finally:
        await store.close()

    async with page.expect_navigation():
        await page.locator("form#purge-confirm-form button#purge-confirm").click()
    result = page.locator("#purge-result")
    await expect(result).to_have_attribute("data-removed", str(len(expected)))
    after = await store_tasks(url)
    assert set(before) - set(after) == expected
    assert set(after) == (set(before) - expected) | {late.task_id}
    MEASURED["purge: previewed / removed / kept"] = (
        f"{len(expected)} / {len(expected)} / {len(after)}"
    )


async def test_a_token_guards_pages_api_events_and_actions(
    sqlite_world: World, open_context: Opener
) -> None:
    world = sqlite_world
    token = f"tok-{uuid.uuid4().hex}"
    ui = await world.dashboard(token=token)
    key = f"token-{uuid.uuid4().hex[:8]}"
    async with mcp_client(world.server) as client:
        held = await start(client, "hold", key=key)
        await reaches(held, "working")
        stranger = await open_context()
        page = await stranger.new_page()
        for path in ["", "tasks", f"tasks/{held.task_id}", "workers", "?token=wrong"]:
            response = await page.goto(ui.base + path)
            assert response is not None and response.status == 401, (path, response)
            await expect(
                page.locator("form#login-form input#login-token[name=token]")
            ).to_be_visible()
            await expect(page.locator("#task-rows, #cancel-form")).to_have_count(0)
        origin = {"Origin": ui.base.rstrip("/")}
        for method, path in [
            ("GET", "api/tasks"),
            ("GET", f"api/tasks/{held.task_id}"),
            ("GET", "api/overview"),
            ("GET", "events?page=tasks"),
            ("POST", f"tasks/{held.task_id}/cancel"),
            ("POST", "purge/preview"),
            ("POST", "purge"),
        ]:
            answer = await stranger.request.fetch(
                ui.base + path,
                method=method,
                headers=origin,
                max_redirects=0,
                form={"older_than": "0s", "before": str(time.time())} if method == "POST" else None,
            )
            assert answer.status == 401, (method, path, answer.status)
            assert answer.headers["content-type"].startswith("application/json"), path
        assert (await held.status()).status == "working"
        assert len(await store_tasks(world.store_url)) > 0

        page = await (await open_context()).new_page()
        await page.goto(ui.base + "tasks")
        await page.locator("input#login-token").fill(token)
        async with page.expect_navigation():
            await page.locator("input#login-token").press("Enter")
        await expect(page.locator("#task-rows")).to_be_visible()
        port = ui.base.rstrip("/").rsplit(":", 1)[1]  # `fastmcp-tasks ui` names it per port
        names = {"fastmcp_tasks_ui", f"fastmcp_tasks_ui_{port}"}
        cookies = await page.context.cookies()
        cookie = next((c for c in cookies if c["name"] in names), None)
        assert cookie is not None, [c["name"] for c in cookies]
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        assert token not in cookie["value"]
        await page.goto(ui.base + f"tasks/{held.task_id}")
        page.on("dialog", lambda dialog: dialog.accept())
        await page.locator("form#cancel-form button#cancel-button").click()
        await reaches(held, "cancelled")

        other = await (await open_context()).new_page()
        response = await other.goto(ui.base + f"workers?token={token}")
        assert response is not None and response.status == 200
        assert other.url == ui.base + "workers", other.url
        await expect(other.locator("#worker-table")).to_be_visible()


async def test_read_only_has_no_actions(sqlite_world: World, page: Page) -> None:
    world = sqlite_world
    ui = await world.dashboard(read_only=True)
    key = f"readonly-{uuid.uuid4().hex[:8]}"
    async with mcp_client(world.server) as client:
        held = await start(client, "hold", key=key)
        await reaches(held, "working")
        for path in ["", "tasks", f"tasks/{held.task_id}", "workers"]:
            await page.goto(ui.base + path)
            await expect(page.locator("body")).to_have_attribute("data-read-only", "true")
            await expect(page.locator("form[method=post i]")).to_have_count(0)
            await expect(page.locator("#cancel-button, #purge-form, #purge-preview")).to_have_count(
                0
            )
        origin = {"Origin": ui.base.rstrip("/")}
        for path in [f"tasks/{held.task_id}/cancel", "purge/preview", "purge"]:
            answer = await page.request.post(
                ui.base + path,
                headers=origin,
                max_redirects=0,
                form={"older_than": "0s", "before": str(time.time())},
            )
            assert answer.status == 403, (path, answer.status)
        assert (await held.status()).status == "working"
        world.release(key)
        await reaches(held, "completed")
