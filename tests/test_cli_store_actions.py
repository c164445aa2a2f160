"""The operator commands acting on a store, as a person runs them: the console script on
a SQLite file (`cancel` by id and by filter, `purge` by filter, `pause` / `resume` /
`paused`, `workers`, `audit`, `show` with the history).

Each test writes its tasks (and a worker's heartbeat, a history) through the store
API, closes the store, runs the script off a terminal (`test_cli_operator.cli`) or on
one (`on_terminal`), and reads back what the store holds. Most need the SQLite store's
operator records (`stores.operations.OperableTaskStore`); the in-process twins of these
tests, on the memory store, are in `test_cli_actions.py`.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from fastmcp_tasks import store_from_url
from fastmcp_tasks.stores.operations import TaskEvent, WorkerInfo
from tests.test_cli_operator import cli, on_terminal
from tests.test_store_contract import record

ERROR_RESULT = {"content": [{"type": "text", "text": "bad input"}], "isError": True}


def with_store(url: str, use: Callable[[Any], Awaitable[Any]]) -> Any:
    """Run `use(store)` on the store at `url`, opened for it and closed after."""

    async def run() -> Any:
        store = store_from_url(url)
        await store.open()
        try:
            return await use(store)
        finally:
            await store.close()

    return anyio.run(run)


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'tasks.db'}"


def tasks(url: str, *specs: tuple[str, str | None, dict[str, Any] | None]) -> list[str]:
    """Create a task per `(tool, app, ending)` (`None`: active, else `transition` kwargs)."""

    async def create(store: Any) -> list[str]:
        ids = []
        for tool, app, end in specs:
            task = record(tool=tool, app=app, retention_ms=None)
            await store.create(task)
            if end is not None:
                status = "failed" if "error" in end else "completed"
                await store.transition(task.task_id, status, **end)
            ids.append(task.task_id)
        return ids

    ids: list[str] = with_store(url, create)
    return ids


def test_cancel_in_the_store_by_its_url(url: str) -> None:
    active, done = tasks(url, ("build", "shop", None), ("build", "shop", {"result": {}}))
    first = cli("cancel", "--url", url, active, "no-such-task")
    assert first.returncode == 1, first.stderr  # one id was not found
    said = dict(line.split(None, 1) for line in first.stdout.splitlines()[:2])
    assert said == {active: "cancel requested", "no-such-task": "not found"}
    again = cli("cancel", url, done)  # the store's URL in SERVER's place
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith(f"{done}  already finished (completed)\n")

    async def check(store: Any) -> None:
        task = await store.get(active)
        assert task is not None and task.cancel_requested
        events = [(e.kind, e.details) for e in await store.events(active)]
        assert events == [("cancel_requested", {"by": "operator", "who": "cli"})]
        entries = await store.audit()
        assert [(e.actor, e.action, e.count) for e in entries] == [
            ("cli", "cancel", 0),
            ("cli", "cancel", 1),
        ]
        assert entries[1].details["host"] == socket.gethostname()

    with_store(url, check)


def test_bulk_cancel_off_a_terminal_needs_yes_then_acts(url: str) -> None:
    build = tasks(url, *[("build", "shop", None)] * 2, ("deploy", "shop", None))
    refused = cli("cancel", "--all-matching", "--tool", "build", env_url=url)
    assert refused.returncode == 2
    assert "cancel would cancel 2 tasks: pass --yes to confirm" in refused.stderr
    assert refused.stdout.startswith("2 tasks match, newest first:\n")
    done = cli("cancel", "--all-matching", "--tool", "build", "--yes", "--url", url)
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith("Cancel requested for 2 tasks.")

    async def cancelled(store: Any) -> list[bool]:
        return [(await store.get(task_id)).cancel_requested for task_id in build]

    assert with_store(url, cancelled) == [True, True, False]


def test_purge_by_filter_removes_tool_errors(url: str) -> None:
    bad, good, crashed, active = tasks(
        url,
        ("x", None, {"result": ERROR_RESULT}),
        ("x", None, {"result": {"content": []}}),
        ("x", None, {"error": {"code": -32603, "message": "boom"}}),
        ("x", None, None),
    )
    dry = cli("purge", "--status", "error", "--dry-run", "--url", url)
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith("1 task matches, newest first:\n") and bad in dry.stdout
    assert dry.stdout.rstrip().endswith("Dry run: nothing removed.")
    done = cli("purge", "--status", "error", "--tool", "x", "--yes", "--url", url)
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith("Removed 1 task.")

    async def left(store: Any) -> set[str]:
        return {task.task_id for task in await store.list_tasks()}

    assert with_store(url, left) == {good, crashed, active}


def test_pause_resume_paused_workers_and_audit(url: str) -> None:
    now = time.time()
    heartbeat = WorkerInfo(
        "box:7:abc", "shop", "box", 7, "1.0.0", 4, ("build",), 1, now - 60, now, 5.0
    )
    with_store(url, lambda store: store.beat(heartbeat))
    paused = cli("pause", "build", "--url", url)
    assert paused.returncode == 0, paused.stderr
    assert paused.stdout == (
        "Paused build of app shop: new runs wait until `fastmcp-tasks resume build --app shop`.\n"
    )
    listed = cli("paused", "--json", env_url=url)
    assert [(p["app"], p["tool"], p["by"]) for p in json.loads(listed.stdout)] == [
        ("shop", "build", "cli")
    ]
    workers = cli("workers", "--url", url)
    assert workers.returncode == 0, workers.stderr
    row = workers.stdout.splitlines()[1].split()
    assert row[:6] == ["box:7:abc", "shop", "box", "7", "1.0.0", "1/4"] and row[-1] == "alive"
    (worker,) = json.loads(cli("workers", "--json", "--url", url).stdout)
    assert worker["worker_id"] == "box:7:abc" and worker["state"] == "alive"
    resumed = cli("resume", "build", "--url", url)
    assert resumed.stdout == "Resumed build of app shop: released 0 held tasks.\n"
    again = cli("resume", "build", "--app", "shop", "--url", url)
    assert again.returncode == 1 and "build of app shop is not paused" in again.stderr
    audit = cli("audit", "--json", "--url", url)
    entries = json.loads(audit.stdout)
    assert [(e["actor"], e["action"]) for e in entries] == [("cli", "resume"), ("cli", "pause")]
    table = cli("audit", "--url", url).stdout.splitlines()
    assert table[0].split() == ["TIME", "ACTOR", "ACTION", "COUNT", "DETAILS"]
    assert "resume" in table[1] and "app=shop tool=build released=0" in table[1]


def test_show_exports_the_history(url: str) -> None:
    (task_id,) = tasks(url, ("x", "shop", {"result": ERROR_RESULT}))
    history = [
        TaskEvent(time.time(), "created", {"app": "shop", "by": "front", "queued": True}),
        TaskEvent(time.time() + 1, "finished", {"outcome": "error", "message": "bad input"}),
    ]
    with_store(url, lambda store: store.add_events([(task_id, e) for e in history]))
    exported = cli("show", task_id, "--json", "--url", url)
    assert exported.returncode == 0, exported.stderr
    document = json.loads(exported.stdout)
    assert document["task_id"] == task_id and document["status"] == "completed"
    assert document["outcome"] == "error" and document["result"] == ERROR_RESULT
    assert document["history"] == [event.to_json() for event in history]
    shown = cli("show", task_id, "--url", url).stdout
    assert "History" in shown and "Created · app shop · by front · queued for a worker" in shown
    assert "Finished: tool error · bad input" in shown


def test_on_a_terminal_a_bulk_cancel_asks_first(url: str) -> None:
    ids = tasks(url, ("build", None, None), ("build", None, None))
    declined = on_terminal(["cancel", "--all-matching", "--url", url], answer="n")
    assert "Cancel these 2 tasks? [y/N]" in declined and "Nothing cancelled." in declined
    accepted = on_terminal(["cancel", "--all-matching", "--url", url], answer="y")
    assert "Cancel requested for 2 tasks." in accepted

    async def cancelled(store: Any) -> list[bool]:
        return [(await store.get(task_id)).cancel_requested for task_id in ids]

    assert with_store(url, cancelled) == [True, True]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["cancel", "some-task"], "say where the task is: a SERVER"),
        (["purge", "--url", "sqlite:///t.db"], "say what to purge"),
        (["cancel", "--tool", "x", "--url", "sqlite:///t.db"], "filters choose tasks with"),
        (["cancel", "--all-matching", "--url", "memory://"], "memory:// keeps tasks inside"),
        (["purge", "--status", "bogus", "--url", "sqlite:///t.db"], "unknown task status"),
    ],
)
def test_usage_errors(args: list[str], message: str) -> None:
    result = cli(*args)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and result.stdout == ""
