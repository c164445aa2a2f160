"""`tasks/cancel` of a task parked in `input_required`: the reply comes after the state.

A parked task runs nothing until it is answered, so its cancel ends it `cancelled` in the
store before the ack; the `tasks/get` right after the ack reads `cancelled` (it used to
read `input_required` for the ~20 ms the runner took to hear the request and record
it). The run is still stopped (the tool sees the cancellation) and the store's state
machine is kept: an answer racing the cancel is refused, nothing is recorded twice.
Both ways a task parks: `ctx.elicit` and a guard round (`InputRequiredResult`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest
from fastmcp import Context, FastMCP

from fastmcp_tasks import TasksExtension
from tests.wire import connect

pytestmark = pytest.mark.anyio

ROUNDS = 20


def parking_server(url: str | None) -> tuple[FastMCP, dict[str, anyio.Event]]:
    mcp = FastMCP("parking")
    mcp.add_extension(TasksExtension(url))
    stopped: dict[str, anyio.Event] = {}

    @mcp.tool(task=True)
    async def elicits(n: int, ctx: Context) -> str:
        try:
            answer = await ctx.elicit("Go on?", bool)
        except anyio.get_cancelled_exc_class():
            stopped.setdefault(f"elicits {n}", anyio.Event()).set()
            raise
        return answer.action

    @mcp.tool(task=True)
    async def guards(n: int, ctx: Context) -> str:
        if ctx.input_responses is None:
            stopped.setdefault(f"guards {n}", anyio.Event()).set()  # the round ended
            request = mcp_types.ElicitRequest(
                params=mcp_types.ElicitRequestFormParams(
                    message="Go on?",
                    requested_schema={"type": "object", "properties": {}},
                )
            )
            return mcp_types.InputRequiredResult(input_requests={"go": request})  # type: ignore[return-value]
        return "answered"

    return mcp, stopped


@pytest.fixture(params=["memory", "sqlite"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str | None:
    return None if request.param == "memory" else f"sqlite:///{tmp_path / 'tasks.db'}"


@pytest.mark.parametrize("tool", ["elicits", "guards"])
async def test_a_get_right_after_cancelling_a_parked_task_reads_cancelled(
    url: str | None, tool: str
) -> None:
    mcp, stopped = parking_server(url)
    async with connect(mcp, "memory") as wire:
        for n in range(ROUNDS):
            task_id = (await wire.call_tool(tool, {"n": n}))["taskId"]
            parked = await wire.wait_for(task_id, lambda t: t["status"] != "working")
            assert parked["status"] == "input_required", parked
            assert (await wire.cancel(task_id))["resultType"] == "complete"
            after: dict[str, Any] = await wire.get(task_id)
            assert after["status"] == "cancelled", (n, after)
            with anyio.fail_after(5):  # the run itself stopped
                await stopped.setdefault(f"{tool} {n}", anyio.Event()).wait()
            (key,) = parked["inputRequests"]
            await wire.update(task_id, {key: {"action": "accept", "content": {"value": True}}})
            assert (await wire.get(task_id))["status"] == "cancelled"  # an answer is too late
        echoed = await wire.wait(
            (await wire.call_tool(tool, {"n": ROUNDS}))["taskId"], ("input_required",)
        )
        assert echoed["status"] == "input_required"  # still serving
