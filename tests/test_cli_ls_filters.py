"""`fastmcp-tasks ls --tool NAME --app NAME`: only that tool's and application's tasks.

Through the command itself on a SQLite file: the filters combine with `--status` and
`--limit`, keep the newest-first order, and page through the store's listing, so a task of
the wanted tool behind more than a page of other tasks is still found.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import anyio

from fastmcp_tasks import TaskRecord, store_from_url
from tests.test_cli_operator import cli
from tests.test_store_contract import record


def made(tool: str, app: str | None, created: float, status: str = "working") -> TaskRecord:
    # kept an hour: an ended task created up to 1,000 s ago must not expire while the test's
    # CLI runs (the default minute left a completed one 11 s, which a loaded machine spent)
    task = record(tool=tool, app=app, retention_ms=3_600_000)
    task.task_id = f"ls-{uuid.uuid4().hex[:20]}"
    task.status = status  # type: ignore[assignment]
    task.created_at = task.updated_at = created
    if status != "working":
        task.terminal_at = created + 1
    return task


def ids(run_json: str) -> list[str]:
    return [entry["task_id"] for entry in json.loads(run_json)]


def test_ls_filters_by_tool_and_application(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tasks.db'}"
    now = time.time()
    oldest = made("build", "shop", now - 1000)
    tasks = [
        oldest,
        *(made("lint", "shop", now - 900 + i) for i in range(250)),  # more than one page
        made("build", "blog", now - 50, status="completed"),
        made("build", None, now - 40),
        made("build", "shop", now - 30, status="failed"),
        made("lint", "blog", now - 20),
    ]

    async def fill() -> None:
        store = store_from_url(url)
        await store.open()
        try:
            for task in tasks:
                await store.create(task)
        finally:
            await store.close()

    anyio.run(fill)
    build_shop = [tasks[-2].task_id, oldest.task_id]  # newest first

    both = cli("ls", "--url", url, "--tool", "build", "--app", "shop", "--json")
    assert both.returncode == 0, both.stderr
    assert ids(both.stdout) == build_shop  # found behind 250 newer tasks of another tool

    builds = cli("ls", "--url", url, "--tool", "build", "--json")
    assert ids(builds.stdout) == [t.task_id for t in reversed(tasks) if t.tool == "build"]

    blog = cli("ls", "--url", url, "--app", "blog", "--json")
    assert ids(blog.stdout) == [tasks[-1].task_id, tasks[-4].task_id]

    active = cli("ls", "--url", url, "--tool", "build", "--status", "active", "--json")
    assert ids(active.stdout) == [tasks[-3].task_id, oldest.task_id]

    one = cli("ls", "--url", url, "--tool", "build", "--app", "shop", "--limit", "1")
    assert one.returncode == 0, one.stderr
    assert one.stdout.splitlines()[1].split()[0] == build_shop[0]
    assert one.stdout.splitlines()[-1] == "1 task, newest first (the --limit; there may be more)"

    none = cli("ls", "--url", url, "--tool", "nothing-by-this-name", "--json")
    assert none.returncode == 0 and json.loads(none.stdout) == []
