"""A `tools/call` that creates no task leaves nothing of its call behind in the runner.

A task of a tool with `concurrency=N` waits in its gate in the store; the process that
took the call keeps its `Job` (arguments, the caller's token, headers, session) until it
claims the task (`engine.accepted`, at most 10,000 for 24 h, oldest evicted first).
That job is kept *before* `store.create`, so every way the call can end without a new
task must forget it again, or refused calls would evict real callers' jobs: a store
raising something unexpected, a store failure, a cap, a dedupe hit, an idempotency-key
hit and a reused idempotency key. Each is provoked here five times over HTTP (dedupe
needs a principal) on the memory and SQLite stores, and the runner's table of kept
jobs is the same after as before.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from fastmcp import FastMCP
from fastmcp.server.auth.providers.jwt import StaticTokenVerifier

from fastmcp_tasks import Limits, MemoryTaskStore, TasksExtension, task_options
from fastmcp_tasks.stores.sqlite import SQLiteTaskStore
from fastmcp_tasks.wire.names import IDEMPOTENCY_META_KEY
from tests.faults import FaultyStore
from tests.wire import Wire, WireError, http_server, http_wire_for

pytestmark = pytest.mark.anyio

TOKENS = {"alice-token": {"client_id": "app", "sub": "alice", "scopes": []}}
ALICE = {"Authorization": "Bearer alice-token"}
TIMES = 5


@dataclass
class Served:
    wire: Wire
    tasks: TasksExtension
    store: FaultyStore
    started: dict[str, anyio.Event]

    def kept_jobs(self) -> set[str]:
        """The ids of the jobs the runner keeps for tasks waiting in the store."""
        runner = self.tasks.runner
        assert runner is not None
        return set(runner._accepted._jobs)

    async def call(self, tool: str, arguments: dict[str, Any], key: str | None = None) -> str:
        params: dict[str, Any] = {"name": tool, "arguments": arguments}
        if key is not None:
            params["_meta"] = {IDEMPOTENCY_META_KEY: key}
        return str((await self.wire.request("tools/call", params, headers=ALICE))["taskId"])


@asynccontextmanager
async def served(kind: str, tmp_path: Path, **extension: Any) -> AsyncIterator[Served]:
    inner = MemoryTaskStore() if kind == "memory" else SQLiteTaskStore(tmp_path / "tasks.db")
    store = FaultyStore(inner)
    mcp = FastMCP("leaks", auth=StaticTokenVerifier(tokens=TOKENS))
    tasks = TasksExtension(store=store, **extension)
    mcp.add_extension(tasks)
    release = anyio.Event()
    started: dict[str, anyio.Event] = {}

    async def hold(label: str) -> str:
        started.setdefault(label, anyio.Event()).set()
        await release.wait()
        return label

    @mcp.tool(task=True)
    @task_options(concurrency=1)
    async def gated(n: int) -> str:
        return await hold(f"gated {n}")

    @mcp.tool(task=True)
    @task_options(concurrency=1, dedupe=timedelta(minutes=5))
    async def deduped(n: int) -> str:
        return await hold(f"deduped {n}")

    async with http_server(mcp) as url, http_wire_for(url) as wire:
        try:
            yield Served(wire, tasks, store, started)
        finally:
            release.set()


async def occupied(served: Served) -> str:
    """The `gated` gate held by one running task, a second one waiting (its job kept)."""
    await served.call("gated", {"n": 0})
    await served.started.setdefault("gated 0", anyio.Event()).wait()
    waiting = await served.call("gated", {"n": 1})
    assert waiting in served.kept_jobs()
    return waiting


@pytest.fixture(params=["memory", "sqlite"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.parametrize("error", [RuntimeError("a bug in the store"), None])
async def test_a_create_that_raises_forgets_its_job(
    kind: str, tmp_path: Path, error: BaseException | None
) -> None:
    """`None`: the store's own `StoreError` (a failure, not a bug)."""
    async with served(kind, tmp_path) as s:
        await occupied(s)
        before = s.kept_jobs()
        s.store.fail("create", times=TIMES, error=error)
        for n in range(TIMES):
            with pytest.raises(WireError) as info:
                await s.call("gated", {"n": 10 + n})
            assert info.value.code == -32603
        assert s.store.faults_fired["create"] == TIMES
        assert s.kept_jobs() == before
        await s.call("gated", {"n": 99})  # the server still creates tasks
        assert len(s.kept_jobs()) == len(before) + 1


async def test_a_capped_create_forgets_its_job(kind: str, tmp_path: Path) -> None:
    async with served(kind, tmp_path, limits=Limits(max_active_tasks=2)) as s:
        await occupied(s)  # two active tasks: the cap
        before = s.kept_jobs()
        for n in range(TIMES):
            with pytest.raises(WireError, match="max_active_tasks"):
                await s.call("gated", {"n": 10 + n})
        assert s.kept_jobs() == before


async def test_a_dedupe_hit_forgets_its_job(kind: str, tmp_path: Path) -> None:
    async with served(kind, tmp_path) as s:
        await s.call("deduped", {"n": 0})
        await s.started.setdefault("deduped 0", anyio.Event()).wait()
        waiting = await s.call("deduped", {"n": 1})
        before = s.kept_jobs()
        assert waiting in before
        for _ in range(TIMES):
            assert await s.call("deduped", {"n": 1}) == waiting
        assert s.kept_jobs() == before


async def test_an_idempotency_key_hit_or_reuse_forgets_its_job(kind: str, tmp_path: Path) -> None:
    async with served(kind, tmp_path) as s:
        await occupied(s)
        key = "k" * 32
        keyed = await s.call("gated", {"n": 2}, key=key)
        before = s.kept_jobs()
        assert keyed in before
        for _ in range(TIMES):
            assert await s.call("gated", {"n": 2}, key=key) == keyed  # a resend: a hit
        for n in range(TIMES):
            with pytest.raises(WireError) as info:  # the same key for another call
                await s.call("gated", {"n": 10 + n}, key=key)
            assert info.value.code == -32602 and "idempotency key" in info.value.message
        assert s.kept_jobs() == before
