"""Workers that say they are alive (`engine.heartbeat`) and tasks no live worker can run
(`engine.staffing`), in one process: servers on one shared store, through the wire.

The same with real `fastmcp-tasks worker` processes on a SQLite file (SIGKILL
included) is in `tests/test_operations_processes.py`.
"""

from __future__ import annotations

import logging
import os
import re
import time
from datetime import timedelta
from typing import Any

import anyio
import pytest
from fastmcp import Client, FastMCP

import fastmcp_tasks
from fastmcp_tasks import TasksExtension
from fastmcp_tasks.server.engine.leases import HOST
from fastmcp_tasks.stores.operations import Pause, WorkerInfo
from tests.operable import SharedMemoryStore, eventually
from tests.wire import memory_wire

pytestmark = pytest.mark.anyio

FAST = timedelta(milliseconds=100)  # heartbeats (and so the staffing check) in tests


def build(extension: TasksExtension, tools: tuple[str, ...] = ("build", "lint")) -> FastMCP:
    mcp = FastMCP("shop")
    mcp.add_extension(extension)
    gate = anyio.Event()

    if "build" in tools:

        @mcp.tool(task=True)
        async def build(n: int) -> int:
            await gate.wait()
            return n

    if "lint" in tools:

        @mcp.tool(task=True)
        async def lint(n: int) -> int:
            return n

    @mcp.tool
    def version() -> str:  # not a task tool: never listed in a worker's tools
        return "1"

    mcp.gate = gate  # type: ignore[attr-defined]
    return mcp


async def workers_of(store: SharedMemoryStore) -> dict[str, WorkerInfo]:
    return {w.worker_id: w for w in await store.workers()}


async def test_a_worker_beats_at_once_and_says_goodbye() -> None:
    store = SharedMemoryStore()
    extension = TasksExtension(store=store, concurrency=3, worker_interval=FAST)
    mcp = build(extension)
    began = time.time()
    async with memory_wire(mcp) as wire:
        assert extension.runner is not None
        me = extension.runner.owner
        await eventually(lambda: workers_of(store), within=10)  # its first beat: at once
        info = (await workers_of(store))[me]
        assert info.app == "shop" and info.host == HOST and info.pid == os.getpid()
        assert info.version == fastmcp_tasks.__version__
        assert info.concurrency == 3 and info.tools == ("build", "lint")
        assert info.running == 0 and info.interval == pytest.approx(0.1)
        assert began <= info.started_at <= info.last_seen <= time.time()
        assert info.alive(time.time()) and not info.stopped
        task_id = (await wire.call_tool("build", {"n": 1}))["taskId"]

        async def running_one() -> bool:
            return (await workers_of(store))[me].running == 1

        await eventually(running_one)  # each beat says how many run now
        mcp.gate.set()  # type: ignore[attr-defined]
        await wire.wait(task_id)
        seen = (await workers_of(store))[me].last_seen
        await eventually(lambda: _later(store, me, seen))  # beats go on, every interval
    gone = (await workers_of(store))[me]
    assert gone.stopped and not gone.alive(time.time())


async def _later(store: SharedMemoryStore, me: str, seen: float) -> bool:
    return (await workers_of(store))[me].last_seen > seen


async def test_a_front_end_is_not_a_worker() -> None:
    store = SharedMemoryStore()
    front = TasksExtension(store=store, concurrency=0, worker_interval=FAST)
    async with memory_wire(build(front)):
        await anyio.sleep(0.3)  # three intervals: it would have beaten by now
        assert await store.workers() == []
        assert "workers" not in front.health().loops


async def test_tasks_no_live_worker_can_run_are_reported(caplog: Any) -> None:
    caplog.set_level(logging.WARNING, logger="fastmcp_tasks.health")
    store = SharedMemoryStore()
    front = TasksExtension(store=store, concurrency=0, worker_interval=FAST)
    full = TasksExtension(store=store, concurrency=2, worker_interval=FAST, shutdown_grace=0)
    # a live worker without the tool does not count, nor a paused tool's tasks
    await store.beat(_worker("elsewhere:1:lint", ("lint",), time.time() + 60, interval=60.0))
    await store.pause(Pause("shop", "lint", time.time(), "test"))
    async with memory_wire(build(front)) as wire:
        ids = [(await wire.call_tool("build", {"n": n}))["taskId"] for n in range(3)]
        await wire.call_tool("lint", {"n": 9})
        await eventually(lambda: front.health().no_worker == {"build": 3})
        warned = [r.getMessage() for r in caplog.records if "no live worker" in r.getMessage()]
        # the check may run between two of the creations: the episode's one line counts
        # what waited then (the health figure above is the live one)
        assert re.match(
            r"[123] tasks? of app 'shop' \(tool 'build'\) wait and no live worker can run them",
            warned[0],
        ), warned
        await anyio.sleep(0.5)  # more checks: the same episode, logged once
        assert sum("no live worker can run" in r.getMessage() for r in caplog.records) == 1
        worker = build(full)
        async with Client(worker):
            await eventually(lambda: front.health().no_worker == {})
            worker.gate.set()  # type: ignore[attr-defined]
            for task_id in ids:
                assert (await wire.wait(task_id))["status"] == "completed"
    assert any("no longer wait without a live worker" in r.getMessage() for r in caplog.records)


def _worker(worker_id: str, tools: tuple[str, ...], last_seen: float, **fields: Any) -> WorkerInfo:
    values: dict[str, Any] = {
        "worker_id": worker_id,
        "app": "shop",
        "host": "elsewhere",
        "pid": 1,
        "version": "0",
        "concurrency": 4,
        "tools": tools,
        "running": 0,
        "started_at": last_seen - 99,
        "last_seen": last_seen,
        "interval": 5.0,
        **fields,
    }
    return WorkerInfo(**values)


async def test_a_worker_gone_silent_does_not_count() -> None:
    store = SharedMemoryStore()
    front = TasksExtension(store=store, concurrency=0, worker_interval=FAST)
    await store.beat(_worker("elsewhere:1:dead", ("build",), time.time() - 60))  # gone
    async with memory_wire(build(front)) as wire:
        await wire.call_tool("build", {"n": 1})
        await eventually(lambda: front.health().no_worker == {"build": 1})
