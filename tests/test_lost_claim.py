"""A worker whose claim's reply is lost takes the claimed task back at once.

Every durable store's ungated claim begins the task's run in the claim itself
(`stores.phases`). When the reply of such a claim is lost (the store applied it, the
worker never heard), the task is leased to the worker, counts as started, and the worker
does not hold it. Left to its lease, another process's recovery would find a started task
and fail a tool that may not run twice. The worker instead takes it back on its next
claim round (`LeaseKeeper.reclaim_lost`, by the lease end that claim gave): it was
leased here and never started here, so it goes back to the queue and runs once. The
leases here are long (60 s), so only that path can finish the task within the test's
bound.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from pathlib import Path

import pytest
from fastmcp import FastMCP

from fastmcp_tasks import TasksExtension, TaskStore
from fastmcp_tasks.stores.memory import MemoryTaskStore
from fastmcp_tasks.stores.operations import operable
from fastmcp_tasks.stores.postgres import PostgresTaskStore
from fastmcp_tasks.testing import make_record
from tests.fault_server import fault_server, store_factory
from tests.faults import FaultyStore
from tests.private_postgres import shared_schema
from tests.wire import memory_wire

pytestmark = pytest.mark.anyio

Factory = Callable[[], TaskStore]
LEASE = timedelta(seconds=60)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=["sqlite", "redis", "postgres"])
async def durable(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Factory]:
    """A factory of unopened stores on the same data."""
    if request.param == "postgres":
        async with shared_schema("fastmcp_lost_claim") as url:
            yield lambda: PostgresTaskStore(url)
        return
    factory, cleanup = store_factory(str(request.param), tmp_path)
    yield factory
    await cleanup()


async def test_a_lost_claim_reply_is_taken_back_before_its_lease_ends(durable: Factory) -> None:
    worker_store = FaultyStore(durable())
    front, _, _ = fault_server(store=durable(), concurrency=0, lease=LEASE)
    worker, _, _ = fault_server(store=worker_store, concurrency=2, lease=LEASE)
    async with memory_wire(front) as wire:
        task_id = (await wire.call_tool("quick", {"text": "queued"}))["taskId"]  # no worker yet
        worker_store.fail_after_apply("claim_queued")  # applied: leased and begun; reply lost
        async with worker._lifespan_manager():
            await worker_store.wait_fired("claim_queued", 1)
            done = await wire.wait(task_id, within=20)  # a third of the lease
        assert done["status"] == "completed", done
        assert done["result"]["content"][0]["text"] == "quick queued"
    reader = durable()
    await reader.open()
    try:
        ops = operable(reader)
        assert ops is not None
        kinds = [event.kind for event in await ops.events(task_id)]
        assert "requeued" in kinds and "recovered" in kinds, kinds
        assert "finished" in kinds and kinds.count("started") == 1, kinds
    finally:
        await reader.close()


async def test_only_the_lost_claims_leases_are_taken_back() -> None:
    """What a failed claim may have leased is told by its exact lease end: a task this
    process leased otherwise (a creation whose request is still being answered, a
    recovery under way) has another one and is left alone."""
    store = MemoryTaskStore()
    extension = TasksExtension(store=store, concurrency=2)
    server = FastMCP("lost-claims")
    server.add_extension(extension)
    async with server._lifespan_manager():
        runner = extension.runner
        assert runner is not None
        keeper, owner = runner.leases, runner.owner
        lost_end, other_end = time.time() + 60.0, time.time() + 61.0
        # another application's: this runner's own queue loop never claims them meanwhile
        lost, creating = make_record(tool="t", app="other"), make_record(tool="t", app="other")
        for task, end in ((lost, lost_end), (creating, other_end)):
            await store.create(task)
            assert await store.claim(task.task_id, owner, end) is not None
        keeper.lost_claims = {lost_end}
        await keeper.reclaim_lost()
        assert keeper.lost_claims == set()
        back, kept = await store.get(lost.task_id), await store.get(creating.task_id)
        assert back is not None and back.lease_owner is None  # back in the queue
        assert kept is not None and (kept.lease_owner, kept.lease_expires) == (owner, other_end)
