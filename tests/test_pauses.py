"""Paused tools (`engine.pauses`), honoured by every process: in one process, through the wire.

A front end and a worker on one shared store, and one server that runs its own tasks:
a paused tool's tasks wait with the paused message while another tool's run, and run
after `resume` (no attempt counted for the wait); a run already going finishes; a held
task can be cancelled; the copy of the store's pauses is read at most every second.
Across real processes (a front end and `fastmcp-tasks worker` on a SQLite file):
`tests/test_operations_processes.py`.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest
from fastmcp import Client, FastMCP

from fastmcp_tasks import TasksExtension
from fastmcp_tasks.server.engine.history import HistoryWriter
from fastmcp_tasks.server.engine.pauses import Pauses, paused_message
from fastmcp_tasks.stores.memory import MemoryTaskStore
from fastmcp_tasks.stores.operations import Pause
from tests.operable import SharedMemoryStore, history, kinds, one
from tests.wire import Wire, memory_wire

pytestmark = pytest.mark.anyio

PAUSED = paused_message("build")


def build(extension: TasksExtension, gate: anyio.Event) -> FastMCP:
    mcp = FastMCP("shop")
    mcp.add_extension(extension)

    @mcp.tool(task=True)
    async def build(n: int) -> int:
        await gate.wait()
        return n

    @mcp.tool(task=True)
    async def lint(n: int) -> int:
        return n

    return mcp


async def held(wire: Wire, task_id: str) -> dict[str, Any]:
    """The task once it shows the paused message (it waits, unleased)."""
    return await wire.wait_for(task_id, lambda t: t.get("statusMessage") == PAUSED)


async def test_a_paused_tool_waits_while_others_run_then_runs_after_resume() -> None:
    store, gate = SharedMemoryStore(), anyio.Event()
    front = TasksExtension(store=store, concurrency=0)
    worker = TasksExtension(store=store, concurrency=4, shutdown_grace=0)
    async with memory_wire(build(front, gate)) as wire, Client(build(worker, gate)):
        assert worker.runner is not None
        owner = worker.runner.owner
        running = (await wire.call_tool("build", {"n": 0}))["taskId"]
        await history(store, running, until="started")
        await store.pause(Pause("shop", "build", time.time(), "ops"))
        await anyio.sleep(1.1)  # every process's copy of the pauses is read again by now
        waiting = [(await wire.call_tool("build", {"n": n}))["taskId"] for n in (1, 2)]
        other = (await wire.call_tool("lint", {"n": 3}))["taskId"]
        assert (await wire.wait(other))["status"] == "completed"
        for task_id in waiting:
            shown = await held(wire, task_id)
            assert shown["status"] == "working"
        gate.set()  # the run that began before the pause ends as usual
        assert (await wire.wait(running))["status"] == "completed"
        await anyio.sleep(0.3)  # nothing of the paused tool starts meanwhile
        for task_id in waiting:
            assert (await wire.get(task_id))["statusMessage"] == PAUSED
        assert await store.resume("shop", "build") is not None
        for task_id in waiting:
            assert (await wire.wait(task_id))["status"] == "completed"
        events = await history(store, waiting[0], count=6)
        record = await store.get(waiting[0])
    assert record is not None and record.attempts == 1  # the wait counted no attempt
    assert one(events, "created").details["paused"] is True
    # the worker claimed it, held it, and took it again after the resume
    assert kinds(events) == ["created", "taken", "paused", "taken", "started", "finished"]
    assert one(events, "paused").details == {"worker": owner}


async def test_a_server_that_runs_its_own_tasks_holds_them_too() -> None:
    store, gate = MemoryTaskStore(), anyio.Event()
    gate.set()
    extension = TasksExtension(store=store, concurrency=2)
    async with memory_wire(build(extension, gate)) as wire:
        assert extension.runner is not None
        owner = extension.runner.owner
        await store.pause(Pause("shop", "build", time.time(), "ops"))
        await anyio.sleep(1.1)  # its copy of the pauses is read again by now
        task_id = (await wire.call_tool("build", {"n": 1}))["taskId"]
        await held(wire, task_id)
        events = await history(store, task_id, until="paused")
        record = await store.get(task_id)
        assert record is not None and record.lease_owner is None and record.attempts == 0
        await store.resume("shop", "build")
        assert (await wire.wait(task_id))["status"] == "completed"
        events = await history(store, task_id)
    assert kinds(events) == ["created", "taken", "paused", "taken", "started", "finished"]
    assert one(events, "paused").details == {"worker": owner}
    assert events[0].details["queued"] is True and events[0].details["paused"] is True


async def test_a_pause_begun_after_the_claim_holds_the_task_before_its_body() -> None:
    store, gate = MemoryTaskStore(), anyio.Event()
    gate.set()
    extension = TasksExtension(store=store, concurrency=1)
    blocker = anyio.Event()
    mcp = build(extension, gate)

    @mcp.tool(task=True)
    async def slot_hog() -> str:
        await blocker.wait()
        return "done"

    async with memory_wire(mcp) as wire:
        hog = (await wire.call_tool("slot_hog"))["taskId"]
        await history(store, hog, until="started")
        queued = (await wire.call_tool("build", {"n": 1}))["taskId"]  # waits for the slot
        await store.pause(Pause("shop", "build", time.time(), "ops"))
        await anyio.sleep(1.1)
        blocker.set()  # the slot frees: the queued task would start now
        await held(wire, queued)
        await store.resume("shop", "build")
        assert (await wire.wait(queued))["status"] == "completed"


async def test_a_held_task_can_be_cancelled() -> None:
    store = SharedMemoryStore()
    front = TasksExtension(store=store, concurrency=0)
    await store.pause(Pause("shop", "build", time.time(), "ops"))
    async with memory_wire(build(front, anyio.Event())) as wire:
        task_id = (await wire.call_tool("build", {"n": 1}))["taskId"]
        assert (await wire.get(task_id))["statusMessage"] == PAUSED
        await wire.cancel(task_id)
        done = await wire.wait(task_id)
    assert done["status"] == "cancelled"


class CountingStore(MemoryTaskStore):
    reads = 0

    async def paused(self) -> list[Pause]:
        self.reads += 1
        await anyio.sleep(0.02)  # a read takes a while: others ask meanwhile
        return await super().paused()


async def test_the_pauses_are_read_at_most_every_refresh() -> None:
    store = CountingStore()
    await store.pause(Pause("shop", "build", time.time(), "ops"))
    pauses = Pauses(store, "shop", HistoryWriter(store), refresh_seconds=0.2)
    answers: list[bool] = []

    async def ask() -> None:
        answers.append(await pauses.is_paused("build"))

    async with anyio.create_task_group() as group:  # a burst of claims: one read, waited for
        for _ in range(5):
            group.start_soon(ask)
    assert answers == [True] * 5
    assert all([await pauses.is_paused("build") for _ in range(50)])
    assert not await pauses.is_paused("lint")
    assert store.reads == 1
    await store.resume("shop", "build")
    assert await pauses.is_paused("build")  # the copy is still young
    await anyio.sleep(0.25)
    assert not await pauses.is_paused("build")
    assert store.reads == 2
    assert not await Pauses(None, "shop", HistoryWriter(store)).is_paused("build")
