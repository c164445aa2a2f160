"""The dashboard through the wire: pages, JSON, the token, CSRF, Host, read-only, actions, SSE.

Requests go through httpx (the ASGI transport, or a real uvicorn on 127.0.0.1 for
the event stream and the mounted app); stores are real SQLite files or memory stores
that real FastMCP servers with `TasksExtension` fill through an MCP client. Nothing
here sleeps and hopes: waits poll with a deadline (`anyio.fail_after`).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from fastmcp import FastMCP
from starlette.applications import Starlette
from starlette.routing import Mount

from fastmcp_tasks import ConfigurationError, MemoryTaskStore, TasksExtension, store_from_url
from fastmcp_tasks.dashboard import app as dashboard_app
from fastmcp_tasks.stores.listing import ListableTaskStore
from fastmcp_tasks.testing import make_record
from tests.faults import FaultyStore
from tests.servers import make_server
from tests.wire import http_wire_for, memory_wire, serve_asgi

HOST = "127.0.0.1:8765"
BASE = f"http://{HOST}"
DAY = 86_400.0

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def client_of(application: Starlette, **kw: Any) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client speaking to `application` in process; the dashboard closed after."""
    transport = httpx.ASGITransport(app=application)
    try:
        async with httpx.AsyncClient(transport=transport, base_url=BASE, **kw) as client:
            yield client
    finally:
        await application.state.dashboard.aclose()


@asynccontextmanager
async def served(application: Any) -> AsyncIterator[str]:
    """`application` on a real uvicorn at 127.0.0.1 (free port); yields the base URL."""
    async with serve_asgi(application) as base:
        yield base


def csrf_of(page: str) -> str:
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert match, "no CSRF field on the page"
    return match.group(1)


async def opened(url: str) -> ListableTaskStore:
    store = store_from_url(url)
    assert isinstance(store, ListableTaskStore)
    await store.open()
    return store


async def loaded(http: httpx.AsyncClient) -> None:
    """Wait until the dashboard's index has read the store (lists then count matches)."""
    with anyio.fail_after(10):
        while True:
            if (await http.get("/api/tasks")).json()["matching"] is not None:
                return
            await anyio.sleep(0.02)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'tasks.db'}"


def new_task(tool: str = "tool", **fields: Any) -> Any:
    """A new `working` record of `tool` (`fastmcp_tasks.testing.make_record`)."""
    task = make_record(**fields)
    task.tool = tool
    return task


async def finished(store: ListableTaskStore, status: str, ended_ago: float) -> str:
    """A task that ended `ended_ago` seconds ago (kept a week)."""
    now = time.time()
    task = new_task("report", retention_ms=7 * 86_400_000)
    task.created_at = now - ended_ago - 60
    task.status = status  # type: ignore[assignment]
    task.terminal_at = task.updated_at = now - ended_ago
    await store.create(task)
    return task.task_id


# --- pages and JSON --------------------------------------------------------------------------


async def test_pages_show_the_tasks_a_real_server_made(sqlite_url: str) -> None:
    server, probes = make_server(url=sqlite_url)
    async with memory_wire(server) as wire:
        echo = (await wire.call_tool("echo", {"text": "hello <b>"}))["taskId"]
        await wire.wait(echo)
        block = (await wire.call_tool("blocker", {"key": "b1"}))["taskId"]
        await probes.event("started", "b1").wait()
        async with client_of(dashboard_app(sqlite_url)) as http:
            listing = await http.get("/tasks")
            assert listing.status_code == 200
            assert f'data-task-id="{echo}" data-status="completed"' in listing.text
            assert f'data-task-id="{block}" data-status="working"' in listing.text
            assert "<b>" not in listing.text  # escaped everywhere
            await loaded(http)
            assert 'id="matching" data-matching="2"' in (await http.get("/tasks")).text
            only_echo = await http.get("/tasks", params={"tool": "echo"})
            assert echo in only_echo.text and block not in only_echo.text
            by_prefix = await http.get("/tasks", params={"q": block[:10]})
            assert block in by_prefix.text and f'data-task-id="{echo}"' not in by_prefix.text
            active = await http.get("/api/tasks", params={"status": "active"})
            assert [t["id"] for t in active.json()["tasks"]] == [block]
            detail = await http.get(f"/tasks/{echo}")
            assert detail.status_code == 200
            assert 'id="detail-result"' in detail.text and "hello &lt;b&gt;" in detail.text
            assert 'id="cancel-form"' not in detail.text  # finished: nothing to cancel
            running = await http.get(f"/tasks/{block}")
            assert 'id="cancel-form"' in running.text and 'id="detail-lease"' in running.text
            document = (await http.get(f"/api/tasks/{block}")).json()
            assert document["status"] == "working" and document["arguments"] == {"key": "b1"}
            assert (await http.get(f"/api/tasks/{echo}")).json()["result"]["content"]
            for path in ("/", "/workers", "/api/overview", "/api/workers"):
                assert (await http.get(path)).status_code == 200, path
            workers = (await http.get("/workers")).text
            assert 'id="worker-table"' in workers and "data-worker=" in workers
        probes.event("release", "b1").set()
        await wire.wait(block)


async def test_bad_filters_are_400_and_unknown_ids_404() -> None:
    async with client_of(dashboard_app(MemoryTaskStore())) as http:
        for params in ({"status": "bogus"}, {"before": "nonsense"}, {"limit": "0"}):
            page = await http.get("/tasks", params=params)
            assert page.status_code == 400, params
            assert "<!doctype html>" in page.text
            api = await http.get("/api/tasks", params=params)
            assert api.status_code == 400 and "error" in api.json()
        assert (await http.get("/events", params={"page": "nope"})).status_code == 400
        missing = await http.get("/tasks/no-such-task")
        assert missing.status_code == 404 and "no-such-task" in missing.text
        assert (await http.get("/api/tasks/no-such-task")).status_code == 404


def test_a_store_that_cannot_list_is_a_configuration_error() -> None:
    class Unlistable:
        scheme = "odd"

    with pytest.raises(ConfigurationError, match="cannot"):
        dashboard_app(Unlistable())  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        dashboard_app("nope://x")


async def test_every_response_carries_the_security_headers() -> None:
    async with client_of(dashboard_app(MemoryTaskStore())) as http:
        for path in ("/", "/tasks", "/api/tasks", "/static/dashboard.css", "/tasks/x"):
            headers = (await http.get(path)).headers
            assert headers["content-security-policy"].startswith("default-src 'self'"), path
            assert "frame-ancestors 'none'" in headers["content-security-policy"]
            assert headers["x-frame-options"] == "DENY"
            assert headers["referrer-policy"] == "same-origin"
            assert headers["x-content-type-options"] == "nosniff"
        page = (await http.get("/tasks")).text
        assert "<script>" not in page and "style=" not in page  # nothing inline (the CSP)
        assert "http://" not in page.replace(BASE, "") and "https://" not in page


# --- the token -------------------------------------------------------------------------------


async def test_with_a_token_every_request_needs_it() -> None:
    store = MemoryTaskStore()
    await store.open()
    task = make_record()
    await store.create(task)
    async with client_of(dashboard_app(store, token="s3cret-token")) as http:
        page = await http.get("/tasks")
        assert page.status_code == 401 and 'id="login-form"' in page.text
        assert 'id="login-token"' in page.text and task.task_id not in page.text
        for path in ("/api/tasks", "/events", f"/api/tasks/{task.task_id}"):
            refused = await http.get(path)
            assert refused.status_code == 401 and "error" in refused.json(), path
        post = await http.post(f"/tasks/{task.task_id}/cancel", data={"csrf": "x"})
        assert post.status_code == 401
        assert (
            await http.get("/tasks", headers={"Authorization": "Bearer wrong"})
        ).status_code == 401
        bearer = await http.get("/api/tasks", headers={"Authorization": "Bearer s3cret-token"})
        assert bearer.status_code == 200
        # a wrong ?token= is no login; a right one sets the cookie, redirects without it
        assert (await http.get("/tasks?token=nope")).status_code == 401
        login = await http.get("/tasks?status=active&token=s3cret-token")
        assert login.status_code == 303
        assert login.headers["location"] == "/tasks?status=active"
        cookie = login.headers["set-cookie"]
        assert cookie.startswith("fastmcp_tasks_ui=") and "s3cret-token" not in cookie
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
        assert (await http.get("/tasks")).status_code == 200  # the client kept the cookie
        http.cookies.clear()
        http.cookies.set("fastmcp_tasks_ui", "forged")
        assert (await http.get("/tasks")).status_code == 401
        http.cookies.clear()
        # the login form
        form = (await http.get("/login")).text
        wrong = await http.post("/login", data={"token": "nope", "csrf": csrf_of(form)})
        assert wrong.status_code == 401 and 'id="login-form"' in wrong.text
        right = await http.post("/login", data={"token": "s3cret-token", "next": "/workers"})
        assert right.status_code == 303 and right.headers["location"] == "/workers"
        assert (await http.get("/workers")).status_code == 200
        elsewhere = await http.post(
            "/login", data={"token": "s3cret-token", "next": "//evil.example/"}
        )
        assert elsewhere.headers["location"] == "/"  # never redirected out of the dashboard


# --- cross-site requests, Host, read-only -------------------------------------------------


async def test_posts_need_the_csrf_token_and_a_same_site_origin() -> None:
    store = MemoryTaskStore()
    await store.open()
    task = make_record()
    await store.create(task)
    async with client_of(dashboard_app(store)) as http:
        csrf = csrf_of((await http.get(f"/tasks/{task.task_id}")).text)
        cancel = f"/tasks/{task.task_id}/cancel"
        assert (await http.post(cancel, data={})).status_code == 403
        assert (await http.post(cancel, data={"csrf": "0" * 64})).status_code == 403
        evil = {"Origin": "http://evil.example"}
        assert (await http.post(cancel, data={"csrf": csrf}, headers=evil)).status_code == 403
        cross = {"Sec-Fetch-Site": "cross-site"}
        assert (await http.post(cancel, data={"csrf": csrf}, headers=cross)).status_code == 403
        purge = await http.post("/purge/preview", data={"older_than": "1d"}, headers=evil)
        assert purge.status_code == 403
        assert (await store.get(task.task_id)).cancel_requested is False  # type: ignore[union-attr]
        same = {"Origin": BASE, "Sec-Fetch-Site": "same-origin"}
        done = await http.post(cancel, data={"csrf": csrf}, headers=same)
        assert done.status_code == 303 and done.headers["location"] == f"/tasks/{task.task_id}"
        after = await store.get(task.task_id)
        assert after is not None and after.status == "cancelled"  # unleased: ends at once


async def test_a_host_outside_the_allowlist_is_refused() -> None:
    application = dashboard_app(MemoryTaskStore(), allowed_hosts=[HOST, "dash.internal"])
    async with client_of(application) as http:
        assert (await http.get("/")).status_code == 200
        assert (await http.get("/", headers={"Host": "dash.internal:9000"})).status_code == 200
        rebound = await http.get("/tasks", headers={"Host": "evil.example:8765"})
        assert rebound.status_code == 400 and "Host" in rebound.text
        assert (await http.get("/api/tasks", headers={"Host": "127.0.0.1:9"})).status_code == 400


async def test_read_only_has_no_post_forms_and_refuses_posts(sqlite_url: str) -> None:
    store = await opened(sqlite_url)
    try:
        task = make_record()
        await store.create(task)
        old = await finished(store, "completed", 3 * DAY)
        async with client_of(dashboard_app(store, read_only=True)) as http:
            for path in ("/", "/tasks", f"/tasks/{task.task_id}", f"/tasks/{old}", "/workers"):
                page = await http.get(path)
                assert page.status_code == 200, path
                assert 'data-read-only="true"' in page.text
                assert 'method="post"' not in page.text.lower(), path
            for path in (f"/tasks/{task.task_id}/cancel", "/purge/preview", "/purge"):
                refused = await http.post(path, data={"older_than": "1d", "before": "1"})
                assert refused.status_code == 403, path
        assert (await store.get(task.task_id)).cancel_requested is False  # type: ignore[union-attr]
        assert await store.get(old) is not None
    finally:
        await store.close()


# --- actions -----------------------------------------------------------------------------------


async def test_cancel_from_the_dashboard_ends_a_running_task_cancelled(sqlite_url: str) -> None:
    server, probes = make_server(url=sqlite_url)
    async with memory_wire(server) as wire:
        task_id = (await wire.call_tool("blocker", {"key": "c1"}))["taskId"]
        await probes.event("started", "c1").wait()
        # the dashboard opens its own store on the same file: another process's view
        async with client_of(dashboard_app(sqlite_url)) as http:
            page = await http.get(f"/tasks/{task_id}")
            assert 'id="cancel-button"' in page.text
            answer = await http.post(f"/tasks/{task_id}/cancel", data={"csrf": csrf_of(page.text)})
            assert answer.status_code == 303
            seen = await wire.wait(task_id, within=15)
            assert seen["status"] == "cancelled"
            assert probes.event("cancelled", "c1").is_set()  # the tool itself was stopped
            after = await http.get(f"/tasks/{task_id}")
            assert 'data-status="cancelled"' in after.text and 'id="cancel-form"' not in after.text


async def test_purge_removes_exactly_what_the_preview_counted(sqlite_url: str) -> None:
    store = await opened(sqlite_url)
    try:
        old = {await finished(store, s, 3 * DAY) for s in ("completed", "failed", "cancelled")}
        recent = await finished(store, "completed", 3600)
        active = make_record()
        await store.create(active)
        async with client_of(dashboard_app(sqlite_url)) as http:
            tasks = await http.get("/tasks")
            assert 'id="purge-form"' in tasks.text
            preview = await http.post(
                "/purge/preview", data={"older_than": "1d", "csrf": csrf_of(tasks.text)}
            )
            assert preview.status_code == 200
            assert 'id="purge-count" data-count="3"' in preview.text
            before = re.search(r'name="before" value="([^"]+)"', preview.text)
            assert before is not None and 'id="purge-confirm"' in preview.text
            done = await http.post(
                "/purge", data={"before": before.group(1), "csrf": csrf_of(preview.text)}
            )
            assert done.status_code == 200
            assert 'id="purge-result" data-removed="3"' in done.text
            csrf = csrf_of(preview.text)
            bad = await http.post("/purge/preview", data={"older_than": "soon", "csrf": csrf})
            assert bad.status_code == 400
            assert (
                await http.post("/purge", data={"before": "x", "csrf": csrf})
            ).status_code == 400
        left = {t.task_id for t in await store.list_tasks()}
        assert left == {recent, active.task_id}
        assert not old & left
    finally:
        await store.close()


# --- live: the event stream, a store outage, mounted beside a server ------------------------


async def read_events(
    lines: AsyncIterator[str], until: Any, *, within: float = 10.0
) -> list[tuple[str, Any]]:
    """SSE `(event, data)` pairs read from `lines` (one stream's) until `until(pairs)` holds;
    AssertionError with what came by the deadline (a missing event reads as a failed
    assertion, not a hang)."""
    pairs: list[tuple[str, Any]] = []
    name = "message"
    with anyio.move_on_after(within):
        async for line in lines:
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                pairs.append((name, json.loads(line[5:])))
                if until(pairs):
                    return pairs
            elif not line:
                name = "message"
    raise AssertionError(f"not seen within {within}s; the stream carried: {pairs}")


def has_message(task_id: str, text: str) -> Any:
    def check(pairs: list[tuple[str, Any]]) -> bool:
        return any(
            name == "tasks" and any(t["id"] == task_id and t["message"] == text for t in data)
            for name, data in pairs
        )

    return check


async def test_the_event_stream_delivers_a_changed_status_message(sqlite_url: str) -> None:
    store = await opened(sqlite_url)
    try:
        task = new_task("crunch")
        await store.create(task)
        async with (
            served(dashboard_app(sqlite_url)) as base,
            httpx.AsyncClient(base_url=base, timeout=10) as http,
        ):
            assert (await http.get("/tasks")).status_code == 200  # starts the hub
            params = {"page": "tasks", "tool": "crunch"}
            async with http.stream("GET", "/events", params=params) as response:
                assert response.headers["content-type"].startswith("text/event-stream")
                stream = response.aiter_lines()
                await read_events(stream, lambda p: ("status", {"state": "live"}) in p)
                await store.set_status_message(task.task_id, "step 2 of 3")
                pairs = await read_events(stream, has_message(task.task_id, "step 2 of 3"))
                row = next(t for n, d in pairs if n == "tasks" for t in d)
                assert row["matches"] is True and row["status"] == "working"
                # a new task appears too (creation emits no change: the hub polls for it)
                fresh = new_task("crunch")
                await store.create(fresh)
                await read_events(
                    stream,
                    lambda p: any(
                        n == "tasks" and any(t["id"] == fresh.task_id for t in d) for n, d in p
                    ),
                )
            one_task = {"page": "task", "id": task.task_id}
            async with http.stream("GET", "/events", params=one_task) as response:
                one = response.aiter_lines()
                await read_events(one, lambda p: any(n == "status" for n, _ in p))
                await store.transition(task.task_id, "completed", result={"content": []})
                await read_events(
                    one,
                    lambda p: any(n == "tasks" and d[0]["status"] == "completed" for n, d in p),
                )
    finally:
        await store.close()


async def test_a_store_outage_is_503_and_the_dashboard_recovers() -> None:
    inner = MemoryTaskStore()
    await inner.open()
    task = make_record()
    await inner.create(task)
    store = FaultyStore(inner)
    async with client_of(dashboard_app(store)) as http:  # type: ignore[arg-type]
        assert (await http.get(f"/tasks/{task.task_id}")).status_code == 200
        store.outage()
        down = await http.get(f"/tasks/{task.task_id}")
        assert down.status_code == 503 and "unavailable" in down.text
        assert "memory" not in down.text.lower()  # the store's own error text stays inside
        api = await http.get(f"/api/tasks/{task.task_id}")
        assert api.status_code == 503 and "error" in api.json()
        store.restore()
        assert (await http.get(f"/tasks/{task.task_id}")).status_code == 200
        assert (await http.get("/tasks")).status_code == 200


async def test_mounted_beside_a_server_it_shows_a_memory_store_task() -> None:
    mcp = FastMCP("mounted")
    extension = TasksExtension()  # memory://: only this process can see its tasks
    mcp.add_extension(extension)

    @mcp.tool(task=True)
    async def greet(name: str) -> str:
        return f"hello {name}"

    mcp_app = mcp.http_app()
    dashboard = dashboard_app(extension.store)
    site = Starlette(
        routes=[Mount("/dashboard", dashboard), Mount("/", mcp_app)], lifespan=mcp_app.lifespan
    )
    try:
        async with served(site) as base, http_wire_for(f"{base}/mcp") as wire:
            task_id = (await wire.call_tool("greet", {"name": "ada"}))["taskId"]
            await wire.wait(task_id)
            async with httpx.AsyncClient(base_url=base, timeout=10) as http:
                listing = await http.get("/dashboard/tasks")
                assert listing.status_code == 200
                assert f'data-task-id="{task_id}" data-status="completed"' in listing.text
                assert '<base href="/dashboard/">' in listing.text  # links stay under the mount
                assert (await http.get("/dashboard/static/dashboard.js")).status_code == 200
                detail = await http.get(f"/dashboard/tasks/{task_id}")
                assert "hello ada" in detail.text
    finally:
        await dashboard.state.dashboard.aclose()
