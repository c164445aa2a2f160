"""What the engine decides from a task's record comes from fields only it writes, never from
a message a tool controls (GUIDE §6, "Record state; never infer it").

Recovery once took a task whose `statusMessage` began "Queued: " or "Retrying (attempt "
for one that never started, and ran a tool that is not `idempotentHint=True` a second
time when the tool had written such a message itself. These tests SIGKILL real server
processes (a SQLite file, a Redis prefix, a PostgreSQL schema) and count how often the
tool body began, from the marker files it writes; they also check that `attempts` is
that count, wherever an operator reads it (`fastmcp-tasks show` / `ls --json`, the
dashboard); that a waiting run begins in the store before its tool body; and that
recovery reads the tool's annotations the way FastMCP 4 asks.
"""

from __future__ import annotations

import json
import time
import warnings
from datetime import timedelta
from pathlib import Path

import anyio
import fastmcp
import pytest
from fastmcp import FastMCP
from mcp_types import ToolAnnotations

from fastmcp_tasks import MemoryTaskStore, Retry, TaskRecord, TasksExtension, task_options
from fastmcp_tasks.dashboard.index import TaskIndex
from fastmcp_tasks.server.engine.leases import is_idempotent
from fastmcp_tasks.stores import store_from_url
from fastmcp_tasks.stores.sqlite import SQLiteTaskStore
from tests.faults import FaultyStore
from tests.test_cli_operator import cli
from tests.test_durability import release, servers, started_in, store_at, wire_to
from tests.test_flow_control import store_url
from tests.wire import connect

__all__ = ["store_at", "store_url"]  # the fixtures, re-used

pytestmark = pytest.mark.anyio

#: What a tool may write of its own: the very text of the engine's waiting messages.
LOOKALIKES = {
    "progress": "Retrying (attempt 2 of 3) after: the tool wrote this itself",
    "report": "Queued: the tool wrote this too",
}


def url_of(where: str) -> str:
    return where if "://" in where else f"sqlite:///{where}"


def starts(markers: Path, key: str) -> int:
    """How many times the tool body holding `key` began (in any process)."""
    return len(list(markers.glob(f"{key}.started.*")))


async def stored(where: str, *task_ids: str) -> dict[str, TaskRecord]:
    store = store_from_url(url_of(where))
    await store.open()
    try:
        found = {task_id: await store.get(task_id) for task_id in task_ids}
    finally:
        await store.close()
    assert all(found.values()), found
    return {task_id: record for task_id, record in found.items() if record is not None}


async def test_a_tool_that_writes_a_waiting_message_is_not_run_again(
    tmp_path: Path, store_at: str
) -> None:
    markers = tmp_path / "markers"
    with servers(tmp_path, 1, db=store_at) as (first,):
        async with wire_to(first) as wire:
            ids = {}
            for via, message in LOOKALIKES.items():
                arguments = {"key": via, "message": message, "via": via}
                ids[via] = (await wire.call_tool("mimic", arguments))["taskId"]
            for via, message in LOOKALIKES.items():
                await started_in(markers, via)
                shown = await wire.wait_for(
                    ids[via], lambda t, m=message: t.get("statusMessage") == m
                )
                assert shown["status"] == "working"
        first.kill()

    with servers(tmp_path, 1, db=store_at) as (second,):
        async with wire_to(second) as wire:
            for task_id in ids.values():
                lost = await wire.wait(task_id, {"failed"}, within=15)
                assert lost["error"]["code"] == -32603
                assert lost["error"]["message"].startswith("Task interrupted")
                assert "not marked idempotentHint=True" in lost["error"]["message"]
    assert {via: starts(markers, via) for via in LOOKALIKES} == dict.fromkeys(LOOKALIKES, 1)
    records = await stored(store_at, *ids.values())
    assert [records[task_id].attempts for task_id in ids.values()] == [1, 1]


@pytest.mark.bound(60)
async def test_tasks_that_never_started_run_once_and_attempts_count_the_runs(
    tmp_path: Path, store_at: str
) -> None:
    """Two slots: a plain and an idempotent task run, a third waits for a slot (leased to
    the process, never started). After a SIGKILL the plain one fails, the idempotent one
    runs again, the waiting one runs for the first time: 1, 2 and 1 runs, as `attempts`
    says in the store, in `fastmcp-tasks show` and `ls --json`, and on the dashboard."""
    markers = tmp_path / "markers"
    with servers(tmp_path, 1, concurrency=2, db=store_at) as (first,):
        async with wire_to(first) as wire:
            busy = (await wire.call_tool("plain_job", {"key": "busy"}))["taskId"]
            idem = (await wire.call_tool("idempotent_job", {"key": "idem"}))["taskId"]
            await started_in(markers, "busy")
            await started_in(markers, "idem")
            later = await wire.call_tool("plain_job", {"key": "later"})
            assert later["statusMessage"].startswith("Queued: ")
        first.kill()
    assert starts(markers, "later") == 0

    with servers(tmp_path, 1, concurrency=2, db=store_at) as (second,):
        async with wire_to(second) as wire:
            failed = await wire.wait(busy, {"failed"}, within=15)
            assert failed["error"]["message"].startswith("Task interrupted")
            await started_in(markers, "idem", second.process.pid)
            await started_in(markers, "later", second.process.pid)
            release(markers, "idem")
            release(markers, "later")
            assert (await wire.wait(idem))["status"] == "completed"
            assert (await wire.wait(later["taskId"]))["status"] == "completed"
    runs = {"busy": 1, "idem": 2, "later": 1}
    assert {key: starts(markers, key) for key in runs} == runs
    by_key = {"busy": busy, "idem": idem, "later": later["taskId"]}
    records = await stored(store_at, *by_key.values())
    assert {key: records[task_id].attempts for key, task_id in by_key.items()} == runs

    url = url_of(store_at)
    for key, task_id in by_key.items():
        shown = await anyio.to_thread.run_sync(lambda t=task_id: cli("show", t, "--url", url))
        assert shown.returncode == 0, shown.stderr
        fields = dict(line.split(None, 1) for line in shown.stdout.splitlines() if " " in line)
        assert fields["Attempts"].strip() == str(runs[key])
    listed = await anyio.to_thread.run_sync(lambda: cli("ls", "--url", url, "--json"))
    attempts = {entry["task_id"]: entry["attempts"] for entry in json.loads(listed.stdout)}
    assert {key: attempts[task_id] for key, task_id in by_key.items()} == runs
    store = store_from_url(url)
    await store.open()
    try:
        index = TaskIndex(store)
        await index.load()
        rows = {key: index.get(task_id) for key, task_id in by_key.items()}
        now = time.time()
        assert {k: r.to_json(now)["attempts"] for k, r in rows.items() if r} == runs
    finally:
        await store.close()


class Flaky(Exception):
    pass


async def test_attempts_count_the_runs_of_a_plain_and_a_retried_task(
    store_url: str | None,
) -> None:
    mcp = FastMCP("attempts")
    extension = TasksExtension(store_url)
    mcp.add_extension(extension)
    runs: list[str] = []

    @mcp.tool(task=True)
    async def plain() -> str:
        runs.append("plain")
        return "done"

    @mcp.tool(task=True)
    @task_options(retry=Retry(attempts=3, backoff=timedelta(milliseconds=50), on=(Flaky,)))
    async def flaky() -> str:
        runs.append("flaky")
        if runs.count("flaky") < 3:
            raise Flaky("not yet")
        return "done at last"

    async with connect(mcp, "memory") as wire:
        once = (await wire.call_tool("plain"))["taskId"]
        thrice = (await wire.call_tool("flaky"))["taskId"]
        assert (await wire.wait(once))["status"] == "completed"
        assert (await wire.wait(thrice, within=20))["status"] == "completed"
        plain_record = await extension.store.get(once)
        flaky_record = await extension.store.get(thrice)
    assert runs.count("plain") == 1 and runs.count("flaky") == 3
    assert plain_record is not None and plain_record.attempts == 1
    assert flaky_record is not None and flaky_record.attempts == 3
    assert flaky_record.retries == 2


async def test_a_waiting_run_begins_in_the_store_before_its_tool_through_a_blip() -> None:
    """A task queued behind the only slot begins its run in the store (`start_run`) before
    its tool body: through a failed write and a lost reply, the body starts once, when the
    record already says `running`, and the run is counted once."""
    store = FaultyStore(MemoryTaskStore())
    store.fail("start_run")
    store.fail_after_apply("start_run")  # committed, reply lost: the resend counts nothing
    mcp = FastMCP("blip")
    mcp.add_extension(TasksExtension(store=store, concurrency=1))  # type: ignore[arg-type]
    release = anyio.Event()
    seen: list[tuple[str, str | None, int]] = []

    @mcp.tool(task=True)
    async def hold(key: str) -> str:
        (mine,) = [r for r in await store.inner.active_tasks() if r.arguments == {"key": key}]
        seen.append((key, mine.phase, mine.attempts))
        if key == "first":
            await release.wait()
        return key

    async with connect(mcp, "memory") as wire:
        first = (await wire.call_tool("hold", {"key": "first"}))["taskId"]
        second = await wire.call_tool("hold", {"key": "second"})
        assert second["statusMessage"].startswith("Queued: ")
        await wire.wait_for(first, lambda _: bool(seen))
        release.set()
        assert (await wire.wait(first))["status"] == "completed"
        done = await wire.wait(second["taskId"])
    assert done["status"] == "completed" and "statusMessage" not in done
    assert seen == [("first", "running", 1), ("second", "running", 1)]
    assert store.faults_fired["start_run"] == 2
    record = await store.inner.get(second["taskId"])
    assert record is not None and record.attempts == 1


def test_idempotence_is_read_without_the_deprecated_camel_case_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With FastMCP's camelCase bridge turned off, `idempotentHint` does not exist at all."""
    mcp = FastMCP("hints")

    @mcp.tool(annotations=ToolAnnotations(idempotentHint=True))
    def again() -> str:
        return "x"

    @mcp.tool
    def once() -> str:
        return "x"

    monkeypatch.setattr(fastmcp.settings, "mcp_camelcase_compat", False)
    tools = {tool.name: tool for tool in anyio.run(mcp.list_tools)}
    assert is_idempotent(tools["again"]) is True
    assert is_idempotent(tools["once"]) is False


async def test_recovery_emits_no_deprecation_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task left running by a dead process is recovered (an idempotent tool: run again)
    without reading `ToolAnnotations.idempotentHint`, which FastMCP 4 deprecates (it warns
    once per process; here every read would)."""

    def deprecated(self: ToolAnnotations) -> bool | None:
        warnings.warn(
            "Accessing `ToolAnnotations.idempotentHint` is deprecated",
            fastmcp.FastMCPDeprecationWarning,
            stacklevel=2,
        )
        return self.idempotent_hint

    monkeypatch.setattr(ToolAnnotations, "idempotentHint", property(deprecated), raising=False)
    path = tmp_path / "tasks.db"
    now = time.time()
    orphan = TaskRecord(
        task_id="left-behind",
        tool="again",
        status="working",
        created_at=now,
        updated_at=now,
        arguments={},
        attempts=1,
        phase="running",
        app="recovering",  # the server's name: its application
        lease_owner="elsewhere:1:gone",
        lease_expires=now - 1,
    )
    store = SQLiteTaskStore(path)
    await store.open()
    await store.create(orphan)
    await store.close()

    mcp = FastMCP("recovering")
    extension = TasksExtension(f"sqlite:///{path}")
    mcp.add_extension(extension)
    ran = anyio.Event()

    @mcp.tool(task=True, annotations=ToolAnnotations(idempotentHint=True))
    async def again() -> str:
        ran.set()
        return "again"

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        async with connect(mcp, "memory") as wire:
            with anyio.fail_after(10):
                await ran.wait()
            assert (await wire.wait("left-behind"))["status"] == "completed"
    deprecations = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    assert not deprecations, [str(w.message) for w in deprecations]
    (recovered,) = (await stored(str(path), "left-behind")).values()
    assert recovered.attempts == 2  # the run lost with its process, and this one
