"""Related tasks (draft): `_meta["io.modelcontextprotocol/relatedTaskIds"]` as a tool sees it.

Through the wire: a tool reads `related_tasks()` (or `RelatedTasks()`) and reports
`[task id, status]`. Only existing tasks the caller may access come through, in the
order named, once each; the state is the current one; a task and a synchronous call
see the same list; the ids reach a worker process through the durable context; the
client's `related=` and the command line's `--related` send them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from fastmcp import Client, FastMCP
from fastmcp.server.auth.providers.jwt import StaticTokenVerifier

from fastmcp_tasks import (
    MemoryTaskStore,
    RelatedTask,
    RelatedTasks,
    TasksExtension,
    call_tool_task,
    related_tasks,
)
from fastmcp_tasks.client.drive import request_meta
from fastmcp_tasks.server.engine.durable import DurableContext
from fastmcp_tasks.server.related import MAX_RELATED_TASKS, allowed_related
from fastmcp_tasks.testing.base import make_record
from fastmcp_tasks.wire.names import RELATED_TASKS_META_KEY as KEY
from tests.test_auth import TOKENS
from tests.test_durability import Worker, servers
from tests.wire import http_server, memory_wire_for

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).parent.parent
COMMAND = [str(Path(sys.executable).parent / "fastmcp-tasks")]
UNKNOWN = "u" * 32


class Related:
    """A server whose tools report their related tasks; `gate(key)` releases a tool."""

    def __init__(self, *, auth: bool = False) -> None:
        self.store = MemoryTaskStore()
        verifier = StaticTokenVerifier(tokens=TOKENS) if auth else None
        self.mcp = FastMCP("related", auth=verifier)
        self.mcp.add_extension(TasksExtension(store=self.store))
        self.gates: dict[str, anyio.Event] = {}

        @self.mcp.tool(task=True)
        async def quick() -> str:
            return "done"

        @self.mcp.tool(task=True)
        async def work(key: str) -> str:
            await self.gate(key).wait()
            return f"worked {key}"

        @self.mcp.tool(task=True)
        async def report(wait: str | None = None) -> list[list[str]]:
            if wait is not None:
                await self.gate(wait).wait()
            return [[t.task_id, t.status] for t in await related_tasks()]

        @self.mcp.tool(task=True)
        async def report_dependency(
            related: list[RelatedTask] = RelatedTasks(),
        ) -> list[list[str]]:
            return [[t.task_id, t.status] for t in related]

    def gate(self, key: str) -> anyio.Event:
        return self.gates.setdefault(key, anyio.Event())


async def as_task(client: Client[Any], tool: str, **options: Any) -> Any:
    """The tool's result run as a task (its id is checked to be a task's)."""
    arguments = options.pop("arguments", {})
    task = await call_tool_task(client, tool, arguments, **options)
    assert task.task_id is not None
    return (await task.result(timeout=10)).data


async def synchronously(client: Client[Any], tool: str, named: Any, kind: str = "memory") -> Any:
    """The same tool called without the tasks opt-in: it runs in the request."""
    wire = memory_wire_for(client, kind)
    params = {"name": tool, "arguments": {}, "_meta": {KEY: named}}
    answer = await wire.request("tools/call", params, opt_in=False)
    assert answer.get("resultType", "complete") == "complete" and not answer.get("isError")
    return answer["structuredContent"]["result"]


@asynccontextmanager
async def two_principals(server: Related) -> AsyncIterator[tuple[Client[Any], Client[Any]]]:
    async with (
        http_server(server.mcp) as url,
        Client(url, auth="alice-token") as alice,
        Client(url, auth="bob-token") as bob,
    ):
        yield alice, bob


# --- which ids come through ----------------------------------------------------------------


async def test_only_own_existing_tasks_come_through_in_order_once() -> None:
    server = Related(auth=True)
    async with two_principals(server) as (alice, bob):
        finished = await call_tool_task(alice, "quick")
        await finished.result(timeout=10)
        running = await call_tool_task(alice, "work", {"key": "r"})
        foreign = await call_tool_task(bob, "quick")
        await foreign.result(timeout=10)
        named = [
            finished.task_id,
            running.task_id,
            foreign.task_id,
            UNKNOWN,
            finished.task_id,
            42,
        ]
        expected = [[finished.task_id, "completed"], [running.task_id, "working"]]
        tasked = await as_task(alice, "report", meta={KEY: named})
        sync = await synchronously(alice, "report", named, "http")
        assert tasked == sync == expected
        # bob names the same ids: only his own task comes through
        assert await as_task(bob, "report", meta={KEY: named}) == [[foreign.task_id, "completed"]]
        server.gate("r").set()
        await running.result(timeout=10)


async def test_a_task_reads_the_current_state_when_it_asks() -> None:
    server = Related()
    async with Client(server.mcp) as client:
        running = await call_tool_task(client, "work", {"key": "r"})
        assert running.task_id is not None
        report = await call_tool_task(
            client, "report", {"wait": "report"}, related=[running.task_id]
        )
        server.gate("r").set()  # the related task finishes after the report was created
        await running.result(timeout=10)
        server.gate("report").set()
        result = await report.result(timeout=10)
    assert result.data == [[running.task_id, "completed"]]


async def test_a_task_purged_since_is_left_out() -> None:
    server = Related()
    async with Client(server.mcp) as client:
        purged = await call_tool_task(client, "quick")
        await purged.result(timeout=10)
        cutoff = time.time()
        kept = await call_tool_task(client, "quick")
        await kept.result(timeout=10)
        named = [purged.task_id, kept.task_id]
        report = await call_tool_task(client, "report", {"wait": "go"}, related=named)
        assert await server.store.purge_finished(cutoff) == 1  # after the ids were checked
        server.gate("go").set()
        result = await report.result(timeout=10)
    assert result.data == [[kept.task_id, "completed"]]


async def test_the_dependency_form_gives_the_same_list_in_both_modes() -> None:
    server = Related()
    foreign = make_record(owner="app|mallory")
    await server.store.create(foreign)
    async with Client(server.mcp) as client:
        finished = await call_tool_task(client, "quick")
        await finished.result(timeout=10)
        named = [UNKNOWN, finished.task_id, foreign.task_id, finished.task_id]
        expected = [[finished.task_id, "completed"]]
        for tool in ("report", "report_dependency"):
            assert await as_task(client, tool, related=named) == expected
            assert await synchronously(client, tool, named) == expected
        schema = next(t for t in await client.list_tools() if t.name == "report_dependency")
        assert "related" not in schema.input_schema.get("properties", {})


async def test_client_related_merges_with_meta_and_bad_hints_are_ignored() -> None:
    server = Related()
    async with Client(server.mcp) as client:
        one, two = [await call_tool_task(client, "quick") for _ in range(2)]
        for task in (one, two):
            await task.result(timeout=10)
        merged = await as_task(client, "report", meta={KEY: [one.task_id]}, related=[two.task_id])
        assert merged == [[one.task_id, "completed"], [two.task_id, "completed"]]
        for hint in (one.task_id, {"id": one.task_id}, None, 7, [None, [one.task_id]]):
            assert await as_task(client, "report", meta={KEY: hint}) == []
            assert await synchronously(client, "report", hint) == []
        assert await as_task(client, "report") == []
    assert request_meta({"x": 1}, None, ["a"]) == {"x": 1, KEY: ["a"]}
    assert request_meta({KEY: "odd"}, None, ["a"]) == {KEY: ["a"]}
    assert request_meta(None, None, []) is None


async def test_allowed_related_filters_without_raising() -> None:
    store = MemoryTaskStore()
    mine = [make_record(owner="me") for _ in range(MAX_RELATED_TASKS + 5)]
    theirs, open_ = make_record(owner="them"), make_record()
    for record in (*mine, theirs, open_):
        await store.create(record)
    ids = [r.task_id for r in mine]
    assert await allowed_related(store, {KEY: ids}, "me") == tuple(ids[:MAX_RELATED_TASKS])
    named = [theirs.task_id, "x" * 300, "caf\u00e9", "", open_.task_id, ids[0], ids[0]]
    assert await allowed_related(store, {KEY: named}, "me") == (open_.task_id, ids[0])
    assert await allowed_related(store, {KEY: named}, None) == (open_.task_id,)
    for meta in (None, {}, {KEY: None}, {KEY: "x"}, {KEY: {"a": 1}}, {KEY: [[ids[0]]]}):
        assert await allowed_related(store, meta, "me") == ()


def test_the_durable_context_keeps_the_ids_and_old_records_still_load() -> None:
    context = DurableContext(frozenset({"elicitation"}), None, None, "2", ("a", "b"))
    record = make_record(context=context.dump())
    assert record.context is not None and record.context["relatedTaskIds"] == ["a", "b"]
    assert DurableContext.of(record) == context
    old = make_record(context={"inputKinds": ["roots"], "version": "1"})
    assert DurableContext.of(old).related == ()
    assert "relatedTaskIds" not in DurableContext().dump()


# --- another process runs the task ---------------------------------------------------------


async def test_the_ids_reach_a_worker_process_and_the_command_line_sends_them(
    tmp_path: Path,
) -> None:
    markers, db = tmp_path / "markers", tmp_path / "tasks.db"
    with servers(tmp_path, 1, concurrency=0, db=db) as (front,):
        worker = Worker(db, markers)
        try:
            await worker.ready()
            await front.ready()
            pid = str(worker.process.pid)
            async with Client(front.url) as client:
                quick = await call_tool_task(client, "quick", {"text": "x"})
                await quick.result(timeout=20)
                named = [quick.task_id, UNKNOWN, quick.task_id]
                report = await call_tool_task(client, "related_report", related=named)
                assert report.task_id is not None
                result = await report.result(timeout=20)
            assert result.data == [[quick.task_id, "completed", pid]]
            with anyio.fail_after(60):
                done = await anyio.run_process(
                    [*COMMAND, "call", front.url, "related_report", "--related", quick.task_id],
                    cwd=ROOT,
                    check=False,
                    stdin=subprocess.DEVNULL,
                )
            assert done.returncode == 0, done.stderr.decode()
            last = done.stdout.decode().strip().splitlines()[-1]
            assert json.loads(last) == [[quick.task_id, "completed", pid]]
        finally:
            worker.stop()
