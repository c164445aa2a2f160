"""Hardening of the dashboard's HTTP surface and CLI (review of issue 18).

Bounded bodies (`/login` too), out-of-range purge values refused before anything is
deleted, no silent cut of the id search, a strict Host parse, no off-site redirect,
the session cookie's name and path, a 500 that keeps the security headers, the
cancel that loses a race with the worker, and `fastmcp-tasks ui`'s SIGTERM (the store
is closed, exit 0), other loopback addresses and a locked SQLite file. Through the
wire (httpx ASGI transport or a real uvicorn), real SQLite files, waits bounded.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

from fastmcp_tasks import MemoryTaskStore
from fastmcp_tasks.dashboard import app as dashboard_app
from fastmcp_tasks.dashboard.security import Guard, Guarded
from fastmcp_tasks.errors import InvalidTransition
from fastmcp_tasks.stores.base import TaskRecord
from fastmcp_tasks.testing import make_record
from tests.faults import FaultyStore
from tests.test_dashboard_http import (
    BASE,
    DAY,
    client_of,
    csrf_of,
    finished,
    new_task,
    opened,
)

pytestmark = pytest.mark.anyio
TOKEN = "s3cret-token"


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'tasks.db'}"


def make_store() -> MemoryTaskStore:
    return MemoryTaskStore()


# --- bodies are read within bounds, /login's too ------------------------------------------


async def test_login_does_not_read_an_unbounded_body_without_the_token() -> None:
    """`POST /login` runs without the token: its body is read to 16 KiB at most (413),
    a streamed one stopped there, a declared-too-long one not read at all."""
    sent = 0
    chunk = b"x" * (1 << 20)

    async def body() -> AsyncIterator[bytes]:
        nonlocal sent
        for _ in range(64):  # 64 MiB
            sent += len(chunk)
            yield chunk

    form = {"content-type": "application/x-www-form-urlencoded"}
    async with client_of(dashboard_app(make_store(), token=TOKEN)) as http:
        answer = await http.post("/login", content=body(), headers=form)
        declared = await http.post("/login", content=b"token=x" + b"&" * 20_000, headers=form)
    assert answer.status_code == 413
    assert "content-security-policy" in answer.headers
    assert sent <= 2 * len(chunk), f"the app consumed {sent >> 20} MiB of an unauthenticated body"
    assert declared.status_code == 413


# --- out-of-range purge values are 400s, before anything is deleted -------------------------


async def test_a_huge_purge_age_is_a_400_not_a_500() -> None:
    """An age past ~100 years (`1e308d` overflows to inf once in seconds) is a 400 page
    with the security headers, not an OverflowError while rendering."""
    application = dashboard_app(make_store())
    transport = httpx.ASGITransport(app=application, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url=BASE) as http:
        try:
            csrf = csrf_of((await http.get("/tasks")).text)
            answers = {
                age: await http.post("/purge/preview", data={"older_than": age, "csrf": csrf})
                for age in ("1e308d", "1e15s", "nans", "infd", "-1d")
            }
            fine = await http.post("/purge/preview", data={"older_than": "99w", "csrf": csrf})
        finally:
            await application.state.dashboard.aclose()
    problems = {
        age: (a.status_code, "content-security-policy" in a.headers)
        for age, a in answers.items()
        if a.status_code != 400 or "content-security-policy" not in a.headers
    }
    assert not problems, f"(status, has CSP) per age: {problems}"
    assert fine.status_code == 200


async def test_a_far_future_purge_cutoff_is_refused_before_it_deletes(sqlite_url: str) -> None:
    """`POST /purge before=1e300` (no preview's cutoff: it is in the future) is a 400
    and deletes nothing."""
    store = await opened(sqlite_url)
    try:
        recent = await finished(store, "completed", 60)
        application = dashboard_app(sqlite_url)
        transport = httpx.ASGITransport(app=application, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url=BASE) as http:
            try:
                csrf = csrf_of((await http.get("/tasks")).text)
                answers = [
                    await http.post("/purge", data={"before": before, "csrf": csrf})
                    for before in ("1e300", str(time.time() + DAY), "inf", "nan")
                ]
            finally:
                await application.state.dashboard.aclose()
        assert [a.status_code for a in answers] == [400] * 4
        assert await store.get(recent) is not None
    finally:
        await store.close()


# --- the id search is never cut silently ---------------------------------------------------


async def test_a_long_id_prefix_is_a_400_not_a_silent_cut(sqlite_url: str) -> None:
    store = await opened(sqlite_url)
    try:
        a, b = make_record(), make_record()
        a.task_id, b.task_id = "x" * 64 + "A", "x" * 64 + "B"
        await store.create(a)
        await store.create(b)
        async with client_of(dashboard_app(sqlite_url)) as http:
            long = await http.get("/api/tasks", params={"q": "x" * 64 + "A"})
            page = await http.get("/tasks", params={"q": "x" * 64 + "A"})
            found = await http.get("/api/tasks", params={"q": "x" * 64})
        assert (long.status_code, page.status_code) == (400, 400)
        assert sorted(t["id"] for t in found.json()["tasks"]) == [a.task_id, b.task_id]
    finally:
        await store.close()


# --- Host: a strict parse ---------------------------------------------------------------------


async def test_the_host_allowlist_parses_name_and_port_strictly() -> None:
    """A `name:port` entry allows that value only; a bare entry its name on any port;
    anything that is not `name[:port]` (`127.0.0.1:8765:1`) is refused."""
    allowed = ["127.0.0.1:8765", "[::1]:8765", "dash.example"]
    application = dashboard_app(make_store(), allowed_hosts=allowed)
    hosts = {
        "127.0.0.1:8765": 200,
        "[::1]:8765": 200,
        "dash.example": 200,
        "DASH.example:443": 200,
        "127.0.0.1:8765:1": 400,
        "127.0.0.1": 400,
        "127.0.0.1:9": 400,
        "[::1]": 400,
        "[::1]:8765:1": 400,
        "dash.example:": 400,
        "evil.example": 400,
        "dash.example@evil": 400,
    }
    async with client_of(application) as http:
        got = {h: (await http.get("/api/overview", headers={"Host": h})).status_code for h in hosts}
    assert got == hosts


# --- the `?token=` login stays on the site; the session cookie ---------------------------------


async def raw_get(application: Any, path: str, query: bytes, root: str = "") -> dict[str, str]:
    """One GET through raw ASGI (httpx would resolve `//host/x` as another host): the
    status (key `status`) and the response headers."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query,
        "root_path": root,
        "headers": [(b"host", b"127.0.0.1:8765")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 8765),
    }
    started: dict[str, Any] = {}

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            started.update(message)

    await application(scope, receive, send)
    headers = {k.decode(): v.decode() for k, v in started["headers"]}
    return {**headers, "status": str(started["status"])}


async def test_a_query_token_login_never_redirects_off_site() -> None:
    """`GET //evil.example/x?token=T` answers `Location: /evil.example/x` (one slash:
    this site), never the protocol-relative `//evil.example/x`; `/\\evil` neither."""
    application = dashboard_app(make_store(), token=TOKEN)
    try:
        answers = [
            await raw_get(application, path, f"token={TOKEN}&a=1".encode())
            for path in ("//evil.example/x", "/\\evil.example/x", "///x y")
        ]
    finally:
        await application.state.dashboard.aclose()
    assert [a["status"] for a in answers] == ["303"] * 3
    assert [a["location"] for a in answers] == [
        "/evil.example/x?a=1",
        "/%5Cevil.example/x?a=1",
        "/x%20y?a=1",
    ]


async def test_the_session_cookie_is_scoped_to_the_mount_point_and_named() -> None:
    """The cookie's Path is the app's root path (`/` standalone); `cookie_name` names it
    (`fastmcp-tasks ui` adds its port), and another dashboard's cookie is no session."""
    inner = dashboard_app(make_store(), token=TOKEN, cookie_name="fastmcp_tasks_ui_9")
    outer = Starlette(routes=[Mount("/dash", app=inner)])
    outer.state.dashboard = inner.state.dashboard  # what client_of closes
    standalone = dashboard_app(make_store(), token=TOKEN)
    try:
        mounted = await raw_get(outer, "/dash/tasks", f"token={TOKEN}".encode())
        alone = await raw_get(standalone, "/tasks", f"token={TOKEN}".encode())
        async with client_of(outer) as http:
            page = await http.get("/dash/login")
            login = await http.post(
                "/dash/login",
                data={"token": TOKEN, "next": "/dash/tasks", "csrf": csrf_of(page.text)},
            )
            value = login.cookies["fastmcp_tasks_ui_9"]
            http.cookies.clear()
            ours = await http.get("/dash/api/overview", cookies={"fastmcp_tasks_ui_9": value})
            other = await http.get("/dash/api/overview", cookies={"fastmcp_tasks_ui": value})
    finally:
        await inner.state.dashboard.aclose()
        await standalone.state.dashboard.aclose()
    assert mounted["location"] == "/dash/tasks"
    assert mounted["set-cookie"].startswith("fastmcp_tasks_ui_9=")
    assert "; Path=/dash;" in mounted["set-cookie"]
    assert "; Path=/;" in alone["set-cookie"] and alone["set-cookie"].startswith(
        "fastmcp_tasks_ui="
    )
    assert login.status_code == 303 and "Path=/dash;" in login.headers["set-cookie"]
    assert (ours.status_code, other.status_code) == (200, 401)


# --- a 500 keeps the security headers -----------------------------------------------------------


class Broken(FaultyStore):
    """`get` raises an error no route expects (a bug, not a store outage)."""

    async def get(self, task_id: str) -> TaskRecord | None:
        raise RuntimeError("a bug")


async def test_an_unexpected_error_is_a_logged_500_with_the_security_headers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    application = dashboard_app(Broken(make_store()))  # type: ignore[arg-type]
    async with client_of(application) as http:
        page = await http.get("/tasks/abc")
        api = await http.get("/api/tasks/abc")
    assert (page.status_code, api.status_code) == (500, 500)
    assert "a bug" not in page.text and api.json()["error"]
    for answer in (page, api):
        assert "default-src 'self'" in answer.headers["content-security-policy"]
        assert answer.headers["x-content-type-options"] == "nosniff"
    assert "RuntimeError: a bug" in caplog.text


async def test_an_error_outside_the_routes_is_a_500_with_the_headers() -> None:
    """The last resort in `Guarded`: what escapes the app before it answers."""

    async def boom(scope: Any, receive: Any, send: Any) -> None:
        raise RuntimeError("escaped")

    guarded = Guarded(boom, Guard(None), login_page=lambda scope, message: "")
    answer = await raw_get(guarded, "/tasks", b"")
    assert answer["status"] == "500"
    assert "frame-ancestors 'none'" in answer["content-security-policy"]


# --- a cancel that loses the race with the worker -------------------------------------------


class WorkerWins(FaultyStore):
    """A worker finishes the task between the dashboard's `request_cancel` and its
    `transition` to cancelled (the lost race, injected). The bundled stores refuse the
    late transition with `None`; `strict` makes it raise `InvalidTransition`, as a
    store that checks the state machine itself may."""

    def __init__(self, inner: Any, strict: bool) -> None:
        super().__init__(inner)
        self.strict = strict

    async def request_cancel(self, task_id: str) -> TaskRecord | None:
        record: TaskRecord | None = await self.inner.request_cancel(task_id)
        await self.inner.transition(task_id, "completed", result={"content": []})
        return record

    async def transition(self, task_id: str, status: Any, **options: Any) -> TaskRecord | None:
        record: TaskRecord | None = await self.inner.transition(task_id, status, **options)
        if record is None and self.strict:
            raise InvalidTransition(f"{task_id} is already finished")
        return record


@pytest.mark.parametrize("strict", [False, True], ids=["refused", "raises"])
async def test_a_cancel_that_loses_the_race_shows_the_task_as_it_now_is(strict: bool) -> None:
    inner = make_store()
    task = new_task("crunch")  # queued: no lease, so the dashboard would end it itself
    await inner.create(task)
    application = dashboard_app(WorkerWins(inner, strict))  # type: ignore[arg-type]
    async with client_of(application) as http:
        page = await http.get(f"/tasks/{task.task_id}")
        done = await http.post(f"/tasks/{task.task_id}/cancel", data={"csrf": csrf_of(page.text)})
        shown = await http.get(done.headers["location"])
    assert done.status_code == 303, done.text
    assert (await inner.get(task.task_id)).status == "completed"  # type: ignore[union-attr]
    assert shown.status_code == 200 and 'data-status="completed"' in shown.text
