"""The explicit client extension: transparent results, poll floor, errors, cancel."""

from __future__ import annotations

import itertools
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import anyio
import pytest
from fastmcp import Client, FastMCP
from fastmcp.exceptions import ToolError
from fastmcp.utilities.tasks import TaskConfig
from mcp.shared.exceptions import MCPError

from fastmcp_tasks import TasksExtension
from fastmcp_tasks.client import TasksClientExtension
from tests.servers import make_server

pytestmark = pytest.mark.anyio


FAST = timedelta(milliseconds=20)


async def test_call_tool_resolves_a_task_to_its_result() -> None:
    mcp, _ = make_server(poll=FAST)
    seen: list[dict] = []
    async with Client(mcp, extensions=[TasksClientExtension(on_status=seen.append)]) as client:
        result = await client.call_tool("echo", {"text": "transparent"})
    assert result.data == "transparent"
    assert seen[0]["status"] == "working" and seen[-1]["status"] == "completed"


async def test_failed_task_raises_the_json_rpc_error() -> None:
    mcp, _ = make_server(poll=FAST)
    async with Client(mcp, extensions=[TasksClientExtension()]) as client:
        with pytest.raises(MCPError) as info:
            await client.call_tool("protocol_error", {})
        with pytest.raises(ToolError, match="could not finish"):
            await client.call_tool("tool_error", {})
    assert info.value.error.code == -32050
    assert info.value.error.data == {"retryAfter": 3}


async def test_poll_interval_is_a_floor() -> None:
    mcp = FastMCP("slow-poll")
    extension = TasksExtension()
    mcp.add_extension(extension)
    polls: list[float] = []
    real_get = extension.store.get

    async def counting_get(task_id: str):  # type: ignore[no-untyped-def]
        polls.append(anyio.current_time())
        return await real_get(task_id)

    extension.store.get = counting_get  # type: ignore[method-assign]

    @mcp.tool(task=TaskConfig(poll_interval=timedelta(milliseconds=300)))
    async def nap() -> str:
        await anyio.sleep(1.0)
        return "rested"

    async with Client(mcp, extensions=[TasksClientExtension()]) as client:
        result = await client.call_tool("nap", {})
    assert result.data == "rested"
    # 1 s of work polled no faster than every 300 ms: 3 or 4 polls, never more
    assert 3 <= len(polls) <= 4
    assert all(b - a >= 0.29 for a, b in itertools.pairwise(polls))


async def test_caller_cancellation_cancels_the_task() -> None:
    mcp, probes = make_server(poll=FAST)
    async with Client(mcp, extensions=[TasksClientExtension()]) as client:
        with anyio.move_on_after(0.5):
            await client.call_tool("blocker", {"key": "abandoned"})
        await probes.event("cancelled", "abandoned").wait()  # the tool saw it


def test_quickstart_example_runs() -> None:
    example = Path(__file__).parent.parent / "examples" / "quickstart.py"
    done = subprocess.run(
        [sys.executable, str(example)], capture_output=True, text=True, timeout=60, check=True
    )
    assert "Rendering page 3 of 5" in done.stdout
    assert "Result: Rendered 5 pages" in done.stdout
