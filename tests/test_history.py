"""A task's history, written by the engine (`server.engine.history`), read back from the store.

Through the wire, in one process: a `concurrency=0` front end and a worker on one store
(a shared memory store, or a SQLite file), a task queued, taken, asked for input,
answered, retried and completed; who asked for a cancel (a client, or an operator whose
`cancel_requested` event names them); and the writer itself: coalesced messages, a
bounded buffer through an outage, the last write at shutdown, a store without the
capability.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from fastmcp import Client, Context, FastMCP

from fastmcp_tasks import Retry, TasksExtension, task_options
from fastmcp_tasks.errors import StoreError
from fastmcp_tasks.server.engine.history import HistoryWriter
from fastmcp_tasks.server.engine.supervision import periodic
from fastmcp_tasks.server.health import HealthMonitor
from fastmcp_tasks.stores import store_from_url
from fastmcp_tasks.stores.base import TaskStore
from fastmcp_tasks.stores.memory import MemoryTaskStore
from fastmcp_tasks.stores.operations import TaskEvent
from fastmcp_tasks.testing.base import make_record
from tests.operable import SharedMemoryStore, history, kinds, one, sqlite_url
from tests.wire import memory_wire

pytestmark = pytest.mark.anyio


class Flaky(Exception):
    pass


def build(extension: TasksExtension, attempts: list[int]) -> FastMCP:
    """The same server file, as a front end or as a worker (`extension` decides)."""
    mcp = FastMCP("history")
    mcp.add_extension(extension)
    retry = Retry(attempts=2, backoff=timedelta(milliseconds=50), jitter=False, on=(Flaky,))

    @mcp.tool(task=True)
    @task_options(retry=retry)
    async def deploy(ctx: Context) -> str:
        attempts.append(len(attempts) + 1)
        if len(attempts) == 1:
            await ctx.report_progress(1, 2, "preparing the rollout")
            answer = await ctx.elicit("Roll out now?", bool)
            raise Flaky(f"the first attempt failed after {answer.action}")
        return "deployed"

    @mcp.tool(task=True)
    async def hold() -> str:
        await anyio.sleep_forever()
        return "never"

    return mcp


@pytest.fixture(params=["memory", "sqlite"])
def place(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    """Where both servers keep their tasks: one shared memory store, or one SQLite file."""
    if request.param == "memory":
        return {"store": SharedMemoryStore()}
    return {"url": sqlite_url(tmp_path)}


@pytest.fixture
async def reader(place: dict[str, Any]) -> AsyncIterator[Any]:
    """The store as another process would open it (a fresh one on the SQLite file)."""
    if "store" in place:
        yield place["store"]
        return
    store = store_from_url(place["url"])
    await store.open()
    try:
        yield store
    finally:
        await store.close()


async def test_the_history_of_a_queued_retried_task_that_asked_for_input(
    place: dict[str, Any], reader: Any
) -> None:
    attempts: list[int] = []
    front_ext = TasksExtension(**place, concurrency=0)
    worker_ext = TasksExtension(**place, concurrency=2, shutdown_grace=0)
    front, worker = build(front_ext, attempts), build(worker_ext, attempts)
    began = time.time()
    async with Client(worker), memory_wire(front) as wire:
        assert front_ext.runner is not None and worker_ext.runner is not None
        front_id, worker_id = front_ext.runner.owner, worker_ext.runner.owner
        task_id = (await wire.call_tool("deploy"))["taskId"]
        parked = await wire.wait(task_id, {"input_required"})
        (key,) = parked["inputRequests"]
        await wire.update(task_id, {key: {"action": "accept", "content": {"value": True}}})
        done = await wire.wait(task_id)
        assert done["status"] == "completed", done
        events = await history(reader, task_id, count=10)  # each process writes its own
    assert kinds(events) == [
        "created",
        "taken",
        "started",
        "message",
        "input_requested",
        "input_answered",
        "retry_scheduled",
        "taken",
        "started",
        "finished",
    ]
    assert all(began <= event.at <= time.time() for event in events)
    created = events[0].details
    assert created == {"by": front_id, "app": "history", "owner": None, "queued": True}
    assert [e.details for e in events if e.kind == "taken"] == [{"worker": worker_id}] * 2
    started = [e.details for e in events if e.kind == "started"]
    assert started == [{"worker": worker_id, "attempt": 1}, {"worker": worker_id, "attempt": 2}]
    assert one(events, "message").details == {"message": "preparing the rollout"}
    assert one(events, "input_requested").details == {"keys": [key]}
    assert one(events, "input_answered").details == {"keys": [key]}
    retry = one(events, "retry_scheduled")
    assert retry.details["attempt"] == 2
    assert retry.details["at"] == pytest.approx(retry.at + 0.05, abs=0.05)
    assert "the first attempt failed after accept" in retry.details["reason"]
    assert one(events, "finished").details == {"outcome": "completed"}
    if "url" in place:  # after a restart: every process gone, the file opened again
        again = store_from_url(place["url"])
        await again.open()
        try:
            assert await again.events(task_id) == await reader.events(task_id)  # type: ignore[attr-defined]
        finally:
            await again.close()


@pytest.fixture(params=["memory", "sqlite"])
def one_store(request: pytest.FixtureRequest, tmp_path: Path) -> TaskStore:
    if request.param == "memory":
        return MemoryTaskStore()
    return store_from_url(sqlite_url(tmp_path))


async def test_a_cancel_says_whether_a_client_or_an_operator_asked(one_store: Any) -> None:
    store = one_store
    mcp = build(TasksExtension(store=store, shutdown_grace=0), [])
    async with memory_wire(mcp) as wire:
        by_client = (await wire.call_tool("hold"))["taskId"]
        by_operator = (await wire.call_tool("hold"))["taskId"]
        await history(store, by_client, until="started")
        await history(store, by_operator, until="started")
        await wire.cancel(by_client)
        client_done = await wire.wait(by_client)
        # what an operator command does: its event first, then the request
        asked = TaskEvent(time.time(), "cancel_requested", {"by": "operator", "who": "ops-team"})
        await store.add_events([(by_operator, asked)])
        await store.request_cancel(by_operator)
        operator_done = await wire.wait(by_operator)
        client_events = await history(store, by_client, count=4)
        operator_events = await history(store, by_operator)
    assert client_done["status"] == operator_done["status"] == "cancelled"
    assert client_done["statusMessage"] == "Cancelled at the client's request"
    assert operator_done["statusMessage"] == "Cancelled by an operator (ops-team)"
    assert kinds(client_events) == ["created", "started", "cancel_requested", "finished"]
    assert one(client_events, "cancel_requested").details == {"by": "client"}
    assert one(client_events, "finished").details == {
        "outcome": "cancelled",
        "message": "Cancelled at the client's request",
    }
    assert one(operator_events, "finished").details == {
        "outcome": "cancelled",
        "message": "Cancelled by an operator (ops-team)",
    }


async def test_an_error_result_and_a_failure_end_the_history() -> None:
    store = MemoryTaskStore()
    mcp = FastMCP("endings")
    mcp.add_extension(TasksExtension(store=store))

    @mcp.tool(task=True)
    async def broken(text: str) -> str:
        raise ValueError(text)

    async with memory_wire(mcp) as wire:
        task_id = (await wire.call_tool("broken", {"text": "x" * 500}))["taskId"]
        assert (await wire.wait(task_id))["result"]["isError"] is True
        events = await history(store, task_id)
    finished = one(events, "finished").details
    assert finished["outcome"] == "error"
    assert finished["message"].startswith("Error calling tool 'broken'")
    assert len(finished["message"]) <= 200


# --- the writer ---------------------------------------------------------------------------


class FailingStore(MemoryTaskStore):
    """A memory store whose `add_events` fails while `down`."""

    down = False
    writes = 0

    async def add_events(self, events: Any) -> None:
        self.writes += 1
        if self.down:
            raise StoreError("the store is down")
        await super().add_events(events)


async def test_messages_are_coalesced_per_task() -> None:
    store = MemoryTaskStore()
    task = make_record()
    await store.create(task)
    writer = HistoryWriter(store)
    for text in ("one", "two", "three", "three"):  # within a window: only the first now
        writer.message(task.task_id, text)
    writer.message(task.task_id, "one")  # the one recorded: "three" is not pending any more
    writer.message(task.task_id, "four")
    await writer.flush()
    assert [e.details for e in await store.events(task.task_id)] == [{"message": "one"}]
    writer.note(task.task_id, "finished", outcome="completed")  # the pending one goes first
    await writer.flush()
    got = await store.events(task.task_id)
    assert [e.details.get("message") for e in got] == ["one", "four", None]
    assert [e.kind for e in got][-1] == "finished"
    assert got[1].at < got[2].at


async def test_an_outage_keeps_the_newest_events_and_is_retried() -> None:
    store = FailingStore()
    task = make_record()
    await store.create(task)
    health = HealthMonitor("failing://")
    writer = HistoryWriter(store, flush_seconds=0.01, max_buffered=5)
    store.down = True
    for n in range(8):
        writer.note(task.task_id, "message", message=str(n))
    assert writer.dropped == 3 and writer.waiting == 5
    async with anyio.create_task_group() as group:
        group.start_soon(periodic, "history", writer.flush, health, writer.wait)
        with anyio.fail_after(5):
            while store.writes < 2:  # noqa: ASYNC110 - retried, with backoff, never fatal
                await anyio.sleep(0.01)
        assert health.snapshot().loops["history"] is True
        assert await store.events(task.task_id) == []
        store.down = False
        with anyio.fail_after(10):
            while writer.waiting:  # noqa: ASYNC110 - the loop's backoff decides when
                await anyio.sleep(0.01)
        group.cancel_scope.cancel()
    got = await store.events(task.task_id)
    assert [e.details["message"] for e in got] == ["3", "4", "5", "6", "7"]


async def test_what_is_noted_at_shutdown_is_written() -> None:
    store = MemoryTaskStore()
    mcp = FastMCP("bye")
    extension = TasksExtension(store=store)
    mcp.add_extension(extension)

    @mcp.tool(task=True)
    async def quick() -> str:
        return "done"

    async with memory_wire(mcp) as wire:
        task_id = (await wire.call_tool("quick"))["taskId"]
        await wire.wait(task_id)
        extension.history.note(task_id, "message", message="the very last")
    assert kinds(await store.events(task_id))[-1] == "message"


class PlainStore:
    """A third-party store without operator records: everything else is a memory store's."""

    scheme = "plain"
    durable = False
    hidden = frozenset({"add_events", "events", "beat", "workers", "paused", "hold_paused"})

    def __init__(self) -> None:
        self._inner = MemoryTaskStore()

    def __getattr__(self, name: str) -> Any:
        if name in self.hidden:
            raise AttributeError(name)
        return getattr(self._inner, name)


async def test_a_store_without_operator_records_runs_tasks_as_before() -> None:
    mcp = FastMCP("plain")
    extension = TasksExtension(store=PlainStore())  # type: ignore[arg-type]
    mcp.add_extension(extension)

    @mcp.tool(task=True)
    async def quick() -> str:
        return "done"

    assert not extension.history.enabled
    async with memory_wire(mcp) as wire:
        task_id = (await wire.call_tool("quick"))["taskId"]
        assert (await wire.wait(task_id))["status"] == "completed"
        loops = extension.health().loops
    assert "history" not in loops and "workers" not in loops


def test_a_server_runs_again_in_another_event_loop() -> None:
    store = MemoryTaskStore()
    mcp = FastMCP("twice")
    mcp.add_extension(TasksExtension(store=store))

    @mcp.tool(task=True)
    async def quick() -> str:
        return "done"

    async def serve() -> list[str]:
        with anyio.fail_after(10):
            async with memory_wire(mcp) as wire:
                task_id = (await wire.call_tool("quick"))["taskId"]
                await wire.wait(task_id)
                return kinds(await history(store, task_id))

    for _ in range(2):  # the writer's wake-up is not left bound to the first loop
        assert anyio.run(serve) == ["created", "started", "finished"]


async def test_with_the_history_off_none_is_written_and_operators_are_still_named() -> None:
    store = MemoryTaskStore()
    mcp = FastMCP("quiet")
    extension = TasksExtension(store=store, history=False)
    mcp.add_extension(extension)
    began = anyio.Event()

    @mcp.tool(task=True)
    async def wait() -> str:
        began.set()
        await anyio.sleep_forever()
        return "never"

    assert not extension.history.enabled
    async with memory_wire(mcp) as wire:
        task_id = (await wire.call_tool("wait"))["taskId"]
        await began.wait()
        asked = TaskEvent(time.time(), "cancel_requested", {"by": "operator", "who": "nightly"})
        await store.add_events([(task_id, asked)])
        await store.request_cancel(task_id)
        done = await wire.wait(task_id)
        assert "history" not in extension.health().loops
    assert done["statusMessage"] == "Cancelled by an operator (nightly)"
    assert await store.events(task_id) == [asked]  # the operator's own, nothing of the engine's
