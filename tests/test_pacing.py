"""Optional pacing of `tasks/get` (C19): off by default; when on, a spinning client is
refused with -32000 and `retryAfterMs`, and a client honouring `pollIntervalMs` never is."""

from __future__ import annotations

from datetime import timedelta

import pytest
from fastmcp import Client
from fastmcp.utilities.tasks import TaskConfig

from fastmcp_tasks import Limits
from fastmcp_tasks.server.pacing import PollPacer
from tests.servers import make_server
from tests.wire import WireError, connect

pytestmark = pytest.mark.anyio

EXTENSION = "io.modelcontextprotocol/tasks"


def test_a_bucket_allows_the_burst_then_one_poll_per_spacing() -> None:
    pacer = PollPacer(0.5, 2)
    assert pacer.retry_after_ms("t", 1000, now=0.0) is None
    assert pacer.retry_after_ms("t", 1000, now=0.0) is None
    assert pacer.retry_after_ms("t", 1000, now=0.0) == 500  # burst spent: 0.5 x 1000 ms
    assert pacer.retry_after_ms("t", 1000, now=0.3) == 200
    assert pacer.retry_after_ms("t", 1000, now=0.5) is None  # one token back after 500 ms
    assert pacer.retry_after_ms("other", 1000, now=0.5) is None  # buckets are per task
    assert pacer.retry_after_ms("t", None, now=0.5) is None  # no interval, no pacing
    assert pacer.retry_after_ms("t", 1000, now=100.0) is None  # refills up to the burst only
    assert pacer.retry_after_ms("t", 1000, now=100.0) is None
    assert pacer.retry_after_ms("t", 1000, now=100.0) is not None


def test_buckets_are_bounded() -> None:
    pacer = PollPacer(0.5, 1, max_tracked=100)
    for i in range(1000):
        pacer.retry_after_ms(f"id-{i}", 1000, now=0.0)
    assert len(pacer) == 100


async def test_polling_is_not_paced_by_default(transport: str) -> None:
    mcp, probes = make_server(poll=timedelta(seconds=10))
    async with connect(mcp, transport) as wire:
        created = await wire.call_tool("blocker", {"key": "k"})
        for _ in range(20):
            assert (await wire.get(created["taskId"]))["status"] == "working"
        probes.event("release", "k").set()
        await wire.wait(created["taskId"])


async def test_a_spinning_client_is_refused_with_retry_after(transport: str) -> None:
    limits = Limits(min_poll_fraction=0.5, poll_burst=2)
    mcp, probes = make_server(poll=timedelta(seconds=10), limits=limits)
    async with connect(mcp, transport) as wire:
        created = await wire.call_tool("blocker", {"key": "k"})
        other = await wire.call_tool("blocker", {"key": "k"})
        task_id = created["taskId"]
        await wire.get(task_id)
        await wire.get(task_id)
        with pytest.raises(WireError) as info:
            await wire.get(task_id)
        assert info.value.code == -32000
        assert "pollIntervalMs is 10000" in info.value.message
        assert info.value.data["limit"] == "min_poll_fraction"
        assert 4000 < info.value.data["retryAfterMs"] <= 5000
        assert (await wire.get(other["taskId"]))["status"] == "working"  # per task
        await wire.cancel(task_id)  # other methods are never paced
        await wire.update(task_id, {})
        probes.event("release", "k").set()


async def test_a_client_honouring_poll_interval_never_meets_the_pace() -> None:
    limits = Limits(min_poll_fraction=1.0, poll_burst=1)
    mcp, _ = make_server(limits=limits)

    @mcp.tool(task=TaskConfig(poll_interval=timedelta(milliseconds=100)))
    async def steps(n: int) -> int:
        import anyio

        await anyio.sleep(0.6)
        return n

    async with Client(mcp) as client:
        result = await client.call_tool("steps", {"n": 7})
    assert result.data == 7
