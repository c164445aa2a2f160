"""One request, one bound: every store call a request makes ends within one `store_timeout`.

A `tools/call` whose create hangs reads back (the create may have committed) with what
is left of the same bound; `tasks/cancel`'s several calls share it too. A task spawned
while a request is served copies the request's context but not its deadline. The
Redis version, through a black-holed connection, is in `tests/test_redis_outages.py`.
"""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

from fastmcp_tasks import MemoryTaskStore
from fastmcp_tasks.errors import StoreTimeout
from fastmcp_tasks.server.health import HealthMonitor
from fastmcp_tasks.server.monitored_store import MonitoredStore, deadline_at, request_deadline
from fastmcp_tasks.stores.sqlite import SQLiteTaskStore
from tests.fault_server import assert_unavailable, served
from tests.faults import FaultyStore
from tests.wire import WireError

pytestmark = pytest.mark.anyio

TIMEOUT = timedelta(seconds=1)


async def test_a_hanging_store_answers_tools_call_and_task_methods_within_one_bound(
    tmp_path: Path,
) -> None:
    store = FaultyStore(SQLiteTaskStore(tmp_path / "tasks.db"))  # durable: a read-back
    async with served(store, store_timeout=TIMEOUT) as (wire, _, _):
        task_id = (await wire.call_tool("quick", {"text": "x"}))["taskId"]
        await wire.wait(task_id)
        store.outage(hang=True)
        calls: list[Any] = [
            lambda: wire.call_tool("quick", {"text": "y"}),
            lambda: wire.get(task_id),
            lambda: wire.cancel(task_id),
        ]
        for n, call in enumerate(calls):
            reads, started = store.calls["get"], time.monotonic()
            with pytest.raises(WireError) as info:
                await call()
            assert time.monotonic() - started < 1.4
            assert_unavailable(info.value, store)
            if n == 0:  # the create timed out: it read back, within the same bound
                assert store.calls["get"] == reads + 1
        store.restore()
        await wire.wait(task_id)  # served again once the store answers


class Slow(MemoryTaskStore):
    """A store whose `get` takes `delay` seconds."""

    delay = 0.0

    async def get(self, task_id: str) -> Any:
        await anyio.sleep(self.delay)
        return await super().get(task_id)


async def test_a_deadline_bounds_its_own_task_only() -> None:
    inner = Slow()
    store = MonitoredStore(inner, HealthMonitor("slow"), timeout=5)
    inner.delay = 0.2
    spawned: list[object] = []

    async def later() -> None:
        spawned.append(await store.get("absent"))

    async with anyio.create_task_group() as group:
        with deadline_at(anyio.current_time() + 0.05):
            group.start_soon(later)  # copies this context, deadline and all
            started = anyio.current_time()
            with pytest.raises(StoreTimeout):
                await store.get("absent")
            assert anyio.current_time() - started < 0.15
            with pytest.raises(StoreTimeout, match="no time left"):
                await store.get("absent")
    assert spawned == [None]  # the spawned task's call took its 0.2 s, unbounded by it
    assert request_deadline(inner) is None  # the in-memory store has no bound
    deadline = request_deadline(store)
    assert deadline is not None and deadline - anyio.current_time() <= 5
