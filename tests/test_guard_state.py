"""A guard round that only sets state (`InputRequiredResult(request_state=...)`, no requests).

The spec allows it (at least one of `inputRequests` / `requestState`). In the foreground,
FastMCP's `Client` (the SDK's `run_input_required_driver`) retries the call with the
state after a short backoff and gives up after 10 rounds. A task does the same: the
tool runs again with `ctx.request_state` and no `ctx.input_responses`, after the same
backoff, and after 10 such rounds in a row the task ends `failed` with a clear error.
Each test runs the same tool both ways and compares.
"""

from __future__ import annotations

import mcp_types
import pytest
from fastmcp import Client, Context, FastMCP
from mcp.client._input_required import InputRequiredRoundsExceededError

from fastmcp_tasks import TasksExtension
from tests.wire import memory_wire

pytestmark = pytest.mark.anyio


def state_server() -> tuple[FastMCP, list[tuple[str, str | None, bool]]]:
    mcp = FastMCP("state")
    mcp.add_extension(TasksExtension())
    runs: list[tuple[str, str | None, bool]] = []

    async def two_step(ctx: Context) -> str:
        runs.append(("two_step", ctx.request_state, ctx.input_responses is not None))
        if ctx.request_state is None:
            return mcp_types.InputRequiredResult(request_state="step-1")  # type: ignore[return-value]
        return f"done after {ctx.request_state}"

    async def stuck(ctx: Context) -> str:
        runs.append(("stuck", ctx.request_state, ctx.input_responses is not None))
        return mcp_types.InputRequiredResult(request_state="again")  # type: ignore[return-value]

    for tool in (two_step, stuck):
        mcp.tool(name=tool.__name__, task=True)(tool)  # the task
        mcp.tool(name=f"{tool.__name__}_sync")(tool)  # the same body, never a task

    return mcp, runs


async def test_a_state_only_round_runs_the_tool_again_with_its_state() -> None:
    mcp, runs = state_server()
    async with Client(mcp) as client:
        sync = await client.call_tool("two_step_sync", {})
    sync_runs = list(runs)
    runs.clear()
    async with memory_wire(mcp) as wire:
        task = await wire.wait((await wire.call_tool("two_step", {}))["taskId"])
    assert task["status"] == "completed", task
    synchronous = sync.content[0]
    assert isinstance(synchronous, mcp_types.TextContent)
    assert task["result"]["content"] == [{"type": "text", "text": synchronous.text}]
    assert sync.data == "done after step-1"
    assert runs == sync_runs == [("two_step", None, False), ("two_step", "step-1", False)]


@pytest.mark.bound(40)
async def test_a_tool_that_only_ever_sets_state_stops_after_the_foreground_rounds() -> None:
    mcp, runs = state_server()
    async with Client(mcp) as client:
        with pytest.raises(InputRequiredRoundsExceededError):
            await client.call_tool("stuck_sync", {})
    sync_runs = len(runs)
    runs.clear()
    async with memory_wire(mcp) as wire:
        task = await wire.wait((await wire.call_tool("stuck", {}))["taskId"], within=20)
    assert task["status"] == "failed", task
    assert task["error"]["code"] == -32603
    assert "without naming any request" in task["error"]["message"]
    assert "'stuck'" in task["error"]["message"]
    assert len(runs) == sync_runs == 11  # the first run, then ten rounds with the state
    assert runs[1:] == [("stuck", "again", False)] * 10
