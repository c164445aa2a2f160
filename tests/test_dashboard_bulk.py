"""Bulk actions by filter and who may act: previews, confirmations, labelled tokens, roles.

Through httpx's ASGI transport to dashboards on a `MemoryTaskStore` (and a SQLite
file for the bulk actions: `ops_store`): a preview counts
the tasks the list's filters match and keeps their ids under a token; the
confirmation acts on exactly those (a matching task created after the preview is not
touched), once; the audit log names the label of the token that acted. Read-only
dashboards and read-only labels get no form and a 403 on every POST; every POST needs
the CSRF token of its own label (`fastmcp-tasks ui --token-file`: `test_dashboard_cli`).
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from fastmcp_tasks import ConfigurationError, MemoryTaskStore
from fastmcp_tasks.actions import Selection, TaskFilter
from fastmcp_tasks.dashboard import app as dashboard_app
from fastmcp_tasks.dashboard.selections import Selections, filter_from_form
from fastmcp_tasks.dashboard.tokens import parse_token_lines
from fastmcp_tasks.testing import make_record
from tests.test_dashboard_http import client_of, csrf_of
from tests.test_dashboard_operations import ops_store  # noqa: F401  (the fixture)

pytestmark = pytest.mark.anyio
TOKENS = {"alice": "alice-secret", "bob": "bob-secret", "viewer": "viewer-secret"}
POSTS = ("/bulk/preview", "/bulk/confirm", "/queues/pause", "/queues/resume")


def bearer(label: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[label]}"}


async def memory() -> MemoryTaskStore:
    store = MemoryTaskStore()
    await store.open()
    return store


def token_of(page: str) -> str:
    found = re.search(r'name="selection" value="([^"]+)"', page)
    assert found, "no confirmation form"
    return found.group(1)


def count_of(page: str) -> int:
    found = re.search(r'id="bulk-count" data-count="(\d+)"', page)
    assert found, "no count"
    return int(found.group(1))


# --- bulk cancel and purge ------------------------------------------------------------------


async def test_bulk_cancel_acts_on_exactly_the_previewed_set(ops_store: Any) -> None:  # noqa: F811
    store = ops_store
    build = [make_record(tool="build") for _ in range(3)]
    other = make_record(tool="other")
    done = make_record(tool="build")
    for task in [*build, other, done]:
        await store.create(task)
    await store.transition(done.task_id, "completed", result={"content": []})
    await store.claim(build[0].task_id, "w:1:a", time.time() + 30)  # one a worker runs
    async with client_of(dashboard_app(store, tokens=TOKENS), headers=bearer("alice")) as http:
        listing = (await http.get("/tasks", params={"tool": "build"})).text
        form = listing[listing.index('<form id="bulk-form"') :]
        assert 'name="tool" value="build"' in form and 'id="bulk-cancel"' in form
        assert 'id="bulk-purge"' in form  # the store can purge a chosen set
        csrf = csrf_of(listing)
        preview = await http.post(
            "/bulk/preview", data={"csrf": csrf, "action": "cancel", "tool": "build"}
        )
        assert preview.status_code == 200 and count_of(preview.text) == 3  # not the finished one
        for task in build:
            assert task.task_id in preview.text
        assert "Matching status input_required or working, tool build." in preview.text
        late = make_record(tool="build")  # matches, but after the preview
        await store.create(late)
        await store.transition(build[1].task_id, "failed", error={"code": 1, "message": "x"})
        confirmed = await http.post(
            "/bulk/confirm", data={"csrf": csrf, "selection": token_of(preview.text)}
        )
        assert confirmed.status_code == 200
        result = re.search(r'<p id="bulk-result"[^>]*>', confirmed.text)
        assert result is not None
        assert 'data-done="2"' in result.group(0) and 'data-finished="1"' in result.group(0)
        assert "1 that nobody ran ended at once" in confirmed.text
        states = {t.task_id: await store.get(t.task_id) for t in [*build, late, other]}
        assert states[build[0].task_id].cancel_requested  # type: ignore[union-attr]
        assert states[build[0].task_id].status == "working"  # type: ignore[union-attr]  # its worker ends it
        assert states[build[2].task_id].status == "cancelled"  # type: ignore[union-attr]
        for untouched in (late, other):
            record = states[untouched.task_id]
            assert record is not None and record.status == "working"
            assert not record.cancel_requested
        events = await store.events(build[2].task_id)
        assert [(e.kind, e.details) for e in events] == [
            ("cancel_requested", {"by": "operator", "who": "alice"})
        ]
        (entry,) = await store.audit()
        assert (entry.actor, entry.action, entry.count) == ("alice", "cancel", 2)
        assert entry.details["filter"] == {
            "outcomes": ["input_required", "working"],
            "tool": "build",
        }
        assert set(entry.details["ids"]) == {t.task_id for t in build}
        again = await http.post(
            "/bulk/confirm", data={"csrf": csrf, "selection": token_of(preview.text)}
        )
        assert again.status_code == 410  # once only
        nothing = await http.post(
            "/bulk/preview", data={"csrf": csrf, "action": "cancel", "status": "completed"}
        )
        assert count_of(nothing.text) == 0 and 'id="bulk-confirm-form"' not in nothing.text


async def test_bulk_purge_removes_the_previewed_finished_tasks_only(
    ops_store: Any,  # noqa: F811
) -> None:
    store = ops_store
    finished = [make_record(tool="build") for _ in range(3)]
    active = make_record(tool="build")
    keep = make_record(tool="other")
    for task in [*finished, active, keep]:
        await store.create(task)
    for task in [*finished, keep]:
        await store.transition(task.task_id, "completed", result={"content": []})
    async with client_of(dashboard_app(store, tokens=TOKENS), headers=bearer("bob")) as http:
        csrf = csrf_of((await http.get("/tasks")).text)
        preview = await http.post(
            "/bulk/preview", data={"csrf": csrf, "action": "purge", "tool": "build"}
        )
        assert count_of(preview.text) == 3 and active.task_id not in preview.text
        await store.transition(active.task_id, "completed", result={"content": []})  # later
        gone = await store.delete_finished([finished[0].task_id])  # vanished meanwhile
        assert gone == 1
        confirmed = await http.post(
            "/bulk/confirm", data={"csrf": csrf, "selection": token_of(preview.text)}
        )
        result = re.search(r'<p id="bulk-result"[^>]*>([^<]*)', confirmed.text)
        assert result is not None
        assert 'data-done="2"' in result.group(0) and 'data-missing="1"' in result.group(0)
        assert "Purged 2 finished tasks; 1 task was no longer there" in result.group(1)
        for task in finished:
            assert await store.get(task.task_id) is None
        assert await store.get(active.task_id) is not None  # finished after the preview
        assert await store.get(keep.task_id) is not None
        (entry,) = await store.audit()
        assert (entry.actor, entry.action, entry.count) == ("bob", "purge", 2)
        bad = await http.post(
            "/bulk/preview", data={"csrf": csrf, "action": "purge", "status": "x"}
        )
        assert bad.status_code == 400
        odd = await http.post("/bulk/preview", data={"csrf": csrf, "action": "explode"})
        assert odd.status_code == 400


def test_selections_expire_are_bounded_and_belong_to_their_label() -> None:
    now = [0.0]
    kept = Selections(ttl=600, max_pending=2, max_ids=5, clock=lambda: now[0])
    where = TaskFilter(tool="x")
    first = kept.put("cancel", where, Selection(("a", "b"), False), "alice")
    assert kept.take(first, "bob") is None  # not bob's
    assert kept.take(first, "alice") is not None and kept.take(first, "alice") is None
    old = kept.put("cancel", where, Selection(("a",), False), "alice")
    now[0] = 601.0
    assert kept.take(old, "alice") is None  # expired
    one = kept.put("cancel", where, Selection(("a", "b"), False), "alice")
    two = kept.put("purge", where, Selection(("c", "d"), False), "alice")
    three = kept.put("purge", where, Selection(("e", "f"), False), "alice")  # over both bounds
    assert len(kept) == 2 and kept.take(one, "alice") is None
    assert kept.take(two, "alice") is not None and kept.take(three, "alice") is not None
    assert filter_from_form({"status": "finished"}, "cancel").outcomes == frozenset()
    assert filter_from_form({"status": "error"}, "purge").outcomes == {"error"}
    assert filter_from_form({}, "purge").outcomes == {"completed", "error", "failed", "cancelled"}


# --- who may act: labels, roles, CSRF --------------------------------------------------------


async def test_read_only_dashboards_and_labels_have_no_forms_and_refuse_posts() -> None:
    store = await memory()
    task = make_record(tool="build", app="shop")
    await store.create(task)
    paths = ("/", "/tasks", f"/tasks/{task.task_id}", "/queues", "/audit", "/workers")
    everyone = dashboard_app(store, read_only=True)
    async with client_of(everyone) as http:
        for path in paths:
            page = await http.get(path)
            assert page.status_code == 200 and 'method="post"' not in page.text, path
        for path in POSTS:
            refused = await http.post(
                path, data={"action": "cancel", "tool": "build", "app": "shop"}
            )
            assert refused.status_code == 403, path
    roles = dashboard_app(store, tokens=TOKENS, read_only_labels=["viewer"])
    async with client_of(roles) as http:
        http.headers.update(bearer("viewer"))
        for path in paths:
            page = await http.get(path)
            assert 'data-read-only="true"' in page.text and 'method="post"' not in page.text
        csrf = roles.state.dashboard.guard.csrf_token("viewer")  # refused even with it
        for path in (*POSTS, f"/tasks/{task.task_id}/cancel", "/purge/preview"):
            data = {"csrf": csrf, "action": "cancel", "tool": "build", "app": "shop"}
            assert (await http.post(path, data=data)).status_code == 403, path
        http.headers.update(bearer("alice"))  # another label of the same dashboard may act
        page = (await http.get("/tasks")).text
        assert 'id="bulk-form"' in page and 'data-read-only="false"' in page
    assert await store.audit() == [] and await store.paused() == []
    after = await store.get(task.task_id)
    assert after is not None and not after.cancel_requested


async def test_every_post_needs_the_csrf_token_of_its_own_label() -> None:
    store = await memory()
    await store.create(make_record(tool="build", app="shop"))
    async with client_of(dashboard_app(store, tokens=TOKENS)) as http:
        mine = csrf_of((await http.get("/tasks", headers=bearer("alice"))).text)
        theirs = csrf_of((await http.get("/tasks", headers=bearer("bob"))).text)
        assert mine != theirs
        data = {"action": "cancel", "tool": "build", "app": "shop"}
        for path in POSTS:
            for csrf in (None, theirs):
                form = data if csrf is None else {**data, "csrf": csrf}
                refused = await http.post(path, data=form, headers=bearer("alice"))
                assert refused.status_code == 403, (path, csrf)
        evil = {**bearer("alice"), "Origin": "http://evil.example"}
        assert (
            await http.post("/queues/pause", data={**data, "csrf": mine}, headers=evil)
        ).status_code == 403
        ok = await http.post("/queues/pause", data={**data, "csrf": mine}, headers=bearer("alice"))
        assert ok.status_code == 303
    assert [(e.actor, e.action) for e in await store.audit()] == [("alice", "pause")]


async def test_labelled_tokens_log_in_and_the_cookie_carries_the_label() -> None:
    store = await memory()
    await store.create(make_record(tool="build", app="shop"))
    async with client_of(dashboard_app(store, tokens=TOKENS)) as http:
        login = await http.get("/queues?token=bob-secret")
        assert login.status_code == 303 and login.headers["location"] == "/queues"
        value = login.cookies["fastmcp_tasks_ui"]
        assert value.startswith("bob.") and "bob-secret" not in value
        page = (await http.get("/queues")).text  # the cookie is bob's session
        csrf = csrf_of(page)
        done = await http.post("/queues/pause", data={"csrf": csrf, "app": "shop", "tool": "b"})
        assert done.status_code == 303
        http.cookies.clear()
        forged = "alice." + value.split(".", 1)[1]  # bob's MAC under alice's label
        assert (await http.get("/tasks", cookies={"fastmcp_tasks_ui": forged})).status_code == 401
        form = (await http.get("/login")).text
        right = await http.post("/login", data={"token": "alice-secret", "csrf": csrf_of(form)})
        assert right.status_code == 303
        assert right.cookies["fastmcp_tasks_ui"].startswith("alice.")
    assert [(e.actor, e.action) for e in await store.audit()] == [("bob", "pause")]
    async with client_of(dashboard_app(store)) as http:  # no token: "dashboard" acts
        csrf = csrf_of((await http.get("/queues")).text)
        await http.post("/queues/resume", data={"csrf": csrf, "app": "shop", "tool": "b"})
    assert (await store.audit())[0].actor == "dashboard"


def test_tokens_that_cannot_work_are_configuration_errors() -> None:
    store = MemoryTaskStore()
    for bad in (
        {"tokens": {"alice": "same", "bob": "same"}},
        {"tokens": {"no spaces": "x"}},
        {"tokens": {"alice": ""}},
        {"tokens": {"alice": "a"}, "read_only_labels": ["nobody"]},
        {"tokens": {"operator": "a"}, "token": "b"},
    ):
        with pytest.raises(ConfigurationError):
            dashboard_app(store, **bad)  # type: ignore[arg-type]
    assert parse_token_lines("# ops\n\nalice: a:b:c\nbob:x\n") == {"alice": "a:b:c", "bob": "x"}
    for text in ("alice", "alice:", "al ice:x", "a:x\na:y"):
        with pytest.raises(ConfigurationError):
            parse_token_lines(text)
