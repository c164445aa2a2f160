"""Workers take queued tasks when told, not by polling: a `queued` change or a freed slot.

An idle worker waits on the change feed (bench/idle.py measures what that costs); a
saturated one must look again the moment a slot frees, or a worker with a full queue
would sit idle until its safety poll. The safety poll is set to an hour here, so only
the wake-ups can make these tasks run.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import anyio
import pytest

from fastmcp_tasks import TaskStore
from tests.fault_server import fault_server, store_factory
from tests.wire import memory_wire

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["sqlite", "redis"])
async def stores(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[Callable[[], TaskStore]]:
    make, cleanup = store_factory(request.param, tmp_path)
    yield make
    await cleanup()


async def test_a_saturated_worker_takes_the_next_task_as_a_slot_frees(
    stores: Callable[[], TaskStore],
) -> None:
    lease = timedelta(seconds=5)
    front, _, _ = fault_server(store=stores(), concurrency=0, lease=lease)
    worker, tasks, probes = fault_server(store=stores(), concurrency=1, lease=lease)
    async with memory_wire(front) as wire, worker._lifespan_manager():
        assert tasks.runner is not None
        tasks.runner.queue_poll = 3600.0  # from the next wait on: wake-ups only
        with anyio.fail_after(20):
            first = (await wire.call_tool("blocker", {"key": "one"}))["taskId"]
            await probes.event("one.started").wait()  # the worker is now full
            queued = [(await wire.call_tool("quick", {"text": t}))["taskId"] for t in "abc"]
            probes.release("one")
            assert (await wire.wait(first))["status"] == "completed"
            for task_id, text in zip(queued, "abc", strict=True):
                done = await wire.wait(task_id)
                assert done["result"]["content"][0]["text"] == f"quick {text}", done


def test_a_claim_window_grows_while_claims_find_nothing_and_resets_on_a_take() -> None:
    """Several workers hear every `queued` change: the ones that keep losing the race
    claim less often (the window doubles up to its cap), a take sets it back."""
    from fastmcp_tasks.server.engine.watcher import (
        QUEUE_BATCH_MAX_SECONDS,
        QUEUE_BATCH_SECONDS,
        ChangeWatcher,
    )

    runner = SimpleNamespace(store=None, app=None)  # the window needs no more of a runner
    watcher = ChangeWatcher(runner)  # type: ignore[arg-type]
    assert watcher.window == QUEUE_BATCH_SECONDS
    watcher.claimed(0)
    assert watcher.window == 2 * QUEUE_BATCH_SECONDS
    for _ in range(10):
        watcher.claimed(0)
    assert watcher.window == QUEUE_BATCH_MAX_SECONDS
    watcher.claimed(3)
    assert watcher.window == QUEUE_BATCH_SECONDS
