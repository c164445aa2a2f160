"""The operator commands of `fastmcp-tasks` (ls, show, purge), as a person runs them.

Each test runs the installed console script in a subprocess against a real SQLite
file or a real Redis (under a fresh key prefix; skipped loudly without Redis, failed
when `CI=true`), holding tasks made through the store API, and checks what the
person sees: the lines printed, the exit status, and what is left in the store.
"""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest

from fastmcp_tasks import TaskRecord, store_from_url
from fastmcp_tasks.stores.listing import ListableTaskStore
from tests.servers import make_server
from tests.test_store_contract import (
    POSTGRES_URL,
    REDIS_URL,
    _redis_problem,
    drop_schema,
    postgres_available,
    record,
)
from tests.wire import memory_wire

SCRIPT = Path(sys.executable).with_name("fastmcp-tasks")
DAY = 86_400.0
WEEK_MS = 7 * 86_400_000
LONG_ARGUMENT = "x" * 2000


@dataclass
class Store:
    """A populated store: its URL and the ids of the tasks in it, by role."""

    url: str
    ids: dict[str, str]


def tasks() -> dict[str, TaskRecord]:
    now = time.time()

    def task(status: str, *, created: float, ended: float | None = None) -> TaskRecord:
        made = record(retention_ms=WEEK_MS)
        made.task_id = f"op-{uuid.uuid4().hex[:20]}"
        made.status = status  # type: ignore[assignment]
        made.created_at = made.updated_at = created
        if ended is not None:
            made.terminal_at = made.updated_at = ended
            made.arguments = None
        return made

    work = task("working", created=now - 30)
    work.tool, work.owner = "crunch", "client-a|alice"
    work.status_message = "step 3/10"
    work.arguments = {"text": LONG_ARGUMENT}
    old_done = task("completed", created=now - 3 * DAY - 60, ended=now - 3 * DAY)
    content = [{"type": "text", "text": "Report ready: 12 pages"}]
    old_done.result_json = json.dumps({"content": content, "structuredContent": {"pages": 12}})
    old_failed = task("failed", created=now - 2 * DAY - 60, ended=now - 2 * DAY)
    old_failed.error = {"code": -32603, "message": "upstream timed out"}
    recent_done = task("completed", created=now - 3600, ended=now - 3500)
    asking = task("working", created=now - 10)
    return {
        "work": work,
        "asking": asking,
        "old_done": old_done,
        "old_failed": old_failed,
        "recent_done": recent_done,
    }


async def populate(url: str) -> dict[str, str]:
    store = store_from_url(url)
    await store.open()
    try:
        made = tasks()
        for task in made.values():
            await store.create(task)
        question = {"method": "elicitation/create", "params": {"message": "Which city?"}}
        await store.request_input(
            made["asking"].task_id, {"elicit-1": question}, status_message="asking"
        )
        return {role: task.task_id for role, task in made.items()}
    finally:
        await store.close()


async def remaining(url: str) -> set[str]:
    store = store_from_url(url)
    assert isinstance(store, ListableTaskStore)
    await store.open()
    try:
        return {task.task_id for task in await store.list_tasks()}
    finally:
        await store.close()


async def clear_redis(url: str) -> None:
    store = store_from_url(url)
    await store.open()
    try:
        await store.clear()  # type: ignore[attr-defined]
    finally:
        await store.close()


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Store:
    url = f"sqlite:///{tmp_path / 'tasks.db'}"
    return Store(url, anyio.run(populate, url))


@pytest.fixture
def redis_store() -> Iterator[Store]:
    problem = _redis_problem()
    if problem is not None:
        message = f"REDIS UNREACHABLE at REDIS_URL={REDIS_URL} ({problem}): Redis CLI untested"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    url = f"{REDIS_URL}?prefix=cli-{uuid.uuid4().hex[:12]}"
    ids = anyio.run(populate, url)
    try:
        yield Store(url, ids)
    finally:
        anyio.run(clear_redis, url)


@pytest.fixture
def postgres_store() -> Iterator[Store]:
    postgres_available()  # skips without PostgreSQL (fails when CI=true)
    schema = f"cli_{uuid.uuid4().hex[:12]}"
    url = f"{POSTGRES_URL}?schema={schema}"
    ids = anyio.run(populate, url)
    try:
        yield Store(url, ids)
    finally:
        drop_schema(schema)


@pytest.fixture(params=["sqlite", "redis", "postgres"])
def store(request: pytest.FixtureRequest) -> Store:
    return request.getfixturevalue(f"{request.param}_store")


def cli(*args: str, env_url: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run the console script off a terminal, with `FASTMCP_TASKS_URL` set or unset."""
    env = {key: value for key, value in os.environ.items() if key != "FASTMCP_TASKS_URL"}
    env.update(COLUMNS="200", NO_COLOR="1")
    if env_url is not None:
        env["FASTMCP_TASKS_URL"] = env_url
    return subprocess.run(
        [str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def line_of(output: str, task_id: str) -> str:
    lines = [line for line in output.splitlines() if line.startswith(task_id)]
    assert len(lines) == 1, output
    return lines[0]


# --- against SQLite and Redis ------------------------------------------------------------


def test_ls_lists_newest_first_and_filters_by_status(store: Store) -> None:
    everything = cli("ls", "--url", store.url)
    assert everything.returncode == 0, everything.stderr
    lines = everything.stdout.splitlines()
    assert lines[0].split() == ["TASK", "ID", "STATUS", "TOOL", "CREATED", "UPDATED", "MESSAGE"]
    order = ["asking", "work", "recent_done", "old_failed", "old_done"]
    assert [line.split()[0] for line in lines[1:-1]] == [store.ids[role] for role in order]
    assert lines[-1] == "5 tasks, newest first"
    work = line_of(everything.stdout, store.ids["work"])
    assert work.split()[1:3] == ["working", "crunch"] and work.endswith(" ago  step 3/10")
    assert "input_required" in line_of(everything.stdout, store.ids["asking"])

    finished = cli("ls", "--status", "completed", "--status", "failed", env_url=store.url)
    assert finished.returncode == 0, finished.stderr
    shown = [line.split()[0] for line in finished.stdout.splitlines()[1:-1]]
    assert shown == [store.ids[role] for role in ("recent_done", "old_failed", "old_done")]

    active = cli("ls", "--status", "active", "--url", store.url, "--json")
    assert active.returncode == 0, active.stderr
    listed = json.loads(active.stdout)
    assert [entry["task_id"] for entry in listed] == [store.ids["asking"], store.ids["work"]]
    assert listed[1]["owner"] == "client-a|alice" and listed[1]["status_message"] == "step 3/10"


def test_show_prints_the_record(store: Store) -> None:
    working = cli("show", store.ids["work"], "--url", store.url)
    assert working.returncode == 0, working.stderr
    fields = dict(line.split(None, 1) for line in working.stdout.splitlines() if " " in line)
    assert fields["Task"].strip() == store.ids["work"]
    assert fields["Status"].strip() == "working" and fields["Tool"].strip() == "crunch"
    assert fields["Message"].strip() == "step 3/10"
    assert fields["Owner"].strip() == "client-a|alice" and fields["Attempts"].strip() == "0"
    assert fields["Lease"].strip() == "- (queued)"
    assert fields["Arguments"].strip().endswith("… (2012 chars)")  # cut, saying how long
    assert len(fields["Arguments"]) < 400 and LONG_ARGUMENT not in working.stdout

    done = cli("show", store.ids["old_done"], env_url=store.url)
    assert done.returncode == 0, done.stderr
    assert "Ended" in done.stdout and "(3d ago)" in done.stdout
    result = "1 text; 'Report ready: 12 pages'; structuredContent {pages}"
    assert result in done.stdout

    failed = cli("show", store.ids["old_failed"], "--url", store.url, "--json")
    document = json.loads(failed.stdout)
    assert document["status"] == "failed" and document["error"]["message"] == "upstream timed out"
    assert document["result"] is None and document["terminal_at"] is not None

    missing = cli("show", "no-such-task", "--url", store.url)
    assert missing.returncode == 1 and missing.stdout == ""
    assert "no task 'no-such-task'" in missing.stderr
    assert "never created, expired or purged" in missing.stderr


def test_purge_removes_only_old_finished_tasks(store: Store) -> None:
    dry = cli("purge", "--older-than", "1d", "--dry-run", "--url", store.url)
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith("Would remove 2 finished tasks that ended before ")
    assert dry.stdout.rstrip().endswith("(more than 1d ago).")
    assert anyio.run(remaining, store.url) == set(store.ids.values())

    done = cli("purge", "--older-than", "36h", "--yes", "--url", store.url)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Removed 2 finished tasks that ended before ")
    kept = {store.ids[role] for role in ("work", "asking", "recent_done")}
    assert anyio.run(remaining, store.url) == kept


# --- refusals and usage errors -----------------------------------------------------------


def test_purge_off_a_terminal_needs_yes(sqlite_store: Store) -> None:
    refused = cli("purge", "--older-than", "1d", env_url=sqlite_store.url)
    assert refused.returncode == 2
    assert "purge would remove 2 finished tasks: pass --yes to confirm" in refused.stderr
    assert anyio.run(remaining, sqlite_store.url) == set(sqlite_store.ids.values())


@pytest.mark.parametrize(
    ("args", "status", "message"),
    [
        (["ls", "--url", "memory://"], 2, "memory:// keeps tasks inside one server process"),
        (["ls"], 2, "name the task store: --url URL or FASTMCP_TASKS_URL"),
        (["ls", "--url", "sqlite:///no/such/dir/t.db"], 1, "the file does not exist"),
        (["purge", "--older-than", "soon", "--url", "sqlite:///t.db"], 2, "'soon' is not an age"),
        (["ls", "--status", "running", "--url", "sqlite:///t.db"], 2, "unknown task status"),
        (["ls", "--url", "redis://:s3cret@127.0.0.1:6379/x"], 2, "'redis://:***@127.0.0.1"),
    ],
)
def test_refusals_and_usage_errors(args: list[str], status: int, message: str) -> None:
    result = cli(*args)
    assert result.returncode == status, result.stderr
    assert message in result.stderr and result.stdout == ""
    assert "s3cret" not in result.stderr  # a store password is never printed


# --- on a terminal -----------------------------------------------------------------------


def on_terminal(args: list[str], answer: str | None = None, within: float = 60) -> str:
    """Run the script on a pseudo-terminal, answering its `[y/N]` question; what it showed."""
    main, side = pty.openpty()
    env = {**os.environ, "COLUMNS": "160", "TERM": "xterm"}
    process = subprocess.Popen([str(SCRIPT), *args], stdin=side, stdout=side, stderr=side, env=env)
    os.close(side)
    shown, deadline = b"", time.monotonic() + within
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([main], [], [], 0.1)
            if not ready:
                if process.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(main, 4096)
            except OSError:  # the script exited and closed the terminal
                break
            shown += chunk
            if answer is not None and b"[y/N]" in shown:
                os.write(main, answer.encode() + b"\n")
                answer = None
        assert process.wait(timeout=max(1.0, deadline - time.monotonic())) == 0, shown
    finally:
        if process.poll() is None:
            process.kill()
        os.close(main)
    return shown.decode(errors="replace")


def test_on_a_terminal_ls_draws_a_table_and_purge_asks_first(sqlite_store: Store) -> None:
    url = sqlite_store.url
    table = on_terminal(["ls", "--url", url])
    assert "┃" in table and "TASK ID" in table and sqlite_store.ids["work"] in table
    declined = on_terminal(["purge", "--older-than", "1d", "--url", url], answer="n")
    assert "Remove 2 finished tasks that ended before " in declined and "[y/N]" in declined
    assert "Nothing removed." in declined
    assert anyio.run(remaining, url) == set(sqlite_store.ids.values())
    accepted = on_terminal(["purge", "--older-than", "1d", "--url", url], answer="y")
    assert "Removed 2 finished tasks" in accepted
    assert len(anyio.run(remaining, url)) == 3


# --- tool errors: their own outcome ------------------------------------------------------

CLEAN_AFTER = 250  # more than one page of the store's `completed` listing (`list_outcomes`)


async def made_by_a_server(url: str) -> dict[str, str]:
    """Tasks a real FastMCP server ended on the store at `url`: a `ToolError`, a masked
    exception (both `completed` with an `isError` result on the wire) and a success; then
    `CLEAN_AFTER` newer clean successes written through the store API."""
    server, _ = make_server(url=url)
    async with memory_wire(server) as wire:
        made = {
            "raised": (await wire.call_tool("tool_error"))["taskId"],
            "masked": (await wire.call_tool("crash"))["taskId"],
            "fine": (await wire.call_tool("echo", {"text": "fine"}))["taskId"],
        }
        for task_id in made.values():
            assert (await wire.wait(task_id))["status"] == "completed"
    store = store_from_url(url)
    await store.open()
    try:
        now = time.time()
        for i in range(CLEAN_AFTER):
            task = record(retention_ms=WEEK_MS)
            task.status = "completed"
            task.created_at = task.updated_at = task.terminal_at = now + 1 + i / 1000
            task.result_json = json.dumps({"content": [], "isError": False})
            await store.create(task)
    finally:
        await store.close()
    return made


def test_ls_and_show_give_tool_errors_their_own_outcome(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tasks.db'}"
    made = anyio.run(made_by_a_server, url)

    errors = cli("ls", "--status", "error", "--url", url)
    assert errors.returncode == 0, errors.stderr
    lines = errors.stdout.splitlines()
    assert [line.split()[:2] for line in lines[1:-1]] == [
        [made["masked"], "error"],
        [made["raised"], "error"],
    ]
    assert lines[-1] == "2 tasks, newest first"
    first = cli("ls", "--status", "error", "--limit", "1", "--url", url)
    assert [line.split()[0] for line in first.stdout.splitlines()[1:-1]] == [made["masked"]]
    assert first.stdout.splitlines()[-1].endswith("(the --limit; there may be more)")

    clean = cli("ls", "--status", "completed", "--limit", "1000", "--url", url)
    assert clean.returncode == 0, clean.stderr
    shown = [line.split() for line in clean.stdout.splitlines()[1:-1]]
    assert len(shown) == CLEAN_AFTER + 1 and {row[1] for row in shown} == {"completed"}
    assert made["fine"] in {row[0] for row in shown}
    assert made["raised"] not in clean.stdout and made["masked"] not in clean.stdout

    finished = cli("ls", "--status", "finished", "--limit", "1000", "--json", "--url", url)
    listed = {entry["task_id"]: entry for entry in json.loads(finished.stdout)}
    assert len(listed) == CLEAN_AFTER + 3
    raised = listed[made["raised"]]
    assert (raised["status"], raised["outcome"], raised["is_error"]) == ("completed", "error", True)
    assert raised["tool_error"] == "the job could not finish"
    assert listed[made["fine"]]["outcome"] == "completed" and not listed[made["fine"]]["is_error"]
    everything = cli("ls", "--url", url, "--limit", "1000")
    assert line_of(everything.stdout, made["raised"]).split()[1] == "error"

    show = cli("show", made["raised"], "--url", url)
    assert show.returncode == 0, show.stderr
    fields = dict(line.split(None, 1) for line in show.stdout.splitlines() if " " in line)
    assert fields["Status"].strip() == "error"
    assert "the job could not finish (completed on the wire)" in show.stdout
    document = json.loads(cli("show", made["masked"], "--json", "--url", url).stdout)
    assert document["status"] == "completed" and document["outcome"] == "error"
    assert document["result"]["isError"] is True and document["tool_error"]
