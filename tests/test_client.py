"""The explicit client extension: transparent results, poll floor, errors, cancel."""

from __future__ import annotations

import itertools
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from fastmcp import Client, Context, FastMCP
from fastmcp.exceptions import ToolError
from fastmcp.utilities.tasks import TaskConfig
from mcp.shared.exceptions import MCPError

from fastmcp_tasks import TasksExtension
from fastmcp_tasks.client import TasksClientExtension
from tests.servers import make_server, napping
from tests.wire import http_server

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


def napping_server() -> tuple[FastMCP, list[float]]:
    """A 1 s tool polled every 300 ms; counts the tasks/get requests it serves."""
    return napping(timedelta(milliseconds=300), 1.0)


async def test_poll_interval_is_a_floor() -> None:
    mcp, polls = napping_server()
    async with Client(mcp, extensions=[TasksClientExtension(push=False)]) as client:
        result = await client.call_tool("nap", {})
    assert result.data == "rested"
    # 1 s of work polled no faster than every 300 ms: 3 or 4 polls, never more
    assert 3 <= len(polls) <= 4
    assert all(b - a >= 0.29 for a, b in itertools.pairwise(polls))


@pytest.mark.parametrize("transport", ["memory", "http"])
async def test_push_replaces_polling_when_the_server_offers_it(transport: str) -> None:
    mcp, polls = napping_server()
    seen: list[str] = []
    tasks = TasksClientExtension(on_status=lambda t: seen.append(t["status"]))
    if transport == "http":
        async with http_server(mcp) as url, Client(url, extensions=[tasks]) as client:
            result = await client.call_tool("nap", {})
    else:
        async with Client(mcp, extensions=[tasks]) as client:
            result = await client.call_tool("nap", {})
    assert result.data == "rested"
    assert polls == []  # every state arrived as a notification
    assert seen[-1] == "completed"


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


def test_approval_example_runs() -> None:
    example = Path(__file__).parent.parent / "examples" / "approval.py"
    for flag, outcome in (([], "deployed (change #42)"), (["--decline"], "deployment stopped")):
        done = subprocess.run(
            [sys.executable, str(example), *flag],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        assert "[input_required] Deploy billing to production?" in done.stdout
        assert outcome in done.stdout


async def test_in_task_input_is_answered_once_per_key_in_one_update() -> None:
    mcp = FastMCP("asks")
    extension = TasksExtension()
    mcp.add_extension(extension)
    updates: list[dict] = []
    real_answer = extension.store.answer_input

    async def spy(task_id: str, responses: dict):  # type: ignore[no-untyped-def]
        updates.append(responses)
        return await real_answer(task_id, responses)

    extension.store.answer_input = spy  # type: ignore[method-assign]

    @mcp.tool(task=TaskConfig(poll_interval=timedelta(milliseconds=10)))
    async def two(ctx: Context) -> str:
        import asyncio

        a, b = await asyncio.gather(ctx.elicit("a?", str), ctx.elicit("b?", str))
        return f"{a.data}{b.data}"

    asked: list[str] = []

    async def on_input(key: str, request: dict) -> dict:
        asked.append(key)
        text = request["params"]["message"][0]
        return {"action": "accept", "content": {"value": text.upper()}}

    async def handler(message, response_type, params, context):  # type: ignore[no-untyped-def]
        raise AssertionError("on_input takes precedence")

    tasks = TasksClientExtension(on_input=on_input)
    async with Client(mcp, elicitation_handler=handler, extensions=[tasks]) as client:
        result = await client.call_tool("two", {})
    assert result.data in ("AB", "BA") and sorted(result.data) == ["A", "B"]
    assert len(asked) == len(set(asked)) == 2
    assert sum(len(u) for u in updates) == 2


async def test_any_client_resolves_tasks_once_fastmcp_tasks_is_imported() -> None:
    mcp, _ = make_server(poll=FAST)

    async def approve(message, response_type, params, context):  # type: ignore[no-untyped-def]
        return True

    mcp_asks = FastMCP("asks")
    mcp_asks.add_extension(TasksExtension())

    @mcp_asks.tool(task=TaskConfig(poll_interval=FAST))
    async def confirm(ctx: Context) -> str:
        answer = await ctx.elicit("sure?", bool)
        return f"{answer.action}:{answer.data}"

    async with Client(mcp) as client:  # no extensions passed: the default one is folded in
        assert (await client.call_tool("echo", {"text": "plain client"})).data == "plain client"
    async with Client(mcp_asks, elicitation_handler=approve) as client:
        assert (await client.call_tool("confirm", {})).data == "accept:True"


async def _call_and_count(mcp: FastMCP, transport: str) -> Any:
    tasks = TasksClientExtension(push=False)
    if transport == "http":
        async with http_server(mcp) as url, Client(url, extensions=[tasks]) as client:
            return await client.call_tool("nap", {})
    async with Client(mcp, extensions=[tasks]) as client:
        return await client.call_tool("nap", {})


@pytest.mark.parametrize("transport", ["memory", "http"])
async def test_a_one_second_interval_over_three_seconds(transport: str) -> None:
    """C62: 3 s of work at pollIntervalMs 1000 is 3 or 4 polls, each at least 1 s apart."""
    mcp, polls = napping(timedelta(seconds=1), 3.0)
    result = await _call_and_count(mcp, transport)
    assert result.data == "rested"
    assert 3 <= len(polls) <= 4
    assert all(b - a >= 0.99 for a, b in itertools.pairwise(polls))


@pytest.mark.parametrize("transport", ["memory", "http"])
async def test_a_changed_interval_is_honoured(transport: str) -> None:
    """The server may change pollIntervalMs (C19): each wait follows the latest value."""
    schedule = iter([150, 150, 600, 600])
    answered: list[tuple[float, int]] = []

    def changing(state: dict[str, Any]) -> dict[str, Any]:
        if state["status"] == "working":
            state = {**state, "pollIntervalMs": next(schedule, 150)}
        answered.append((anyio.current_time(), state.get("pollIntervalMs", 0)))
        return state

    mcp, _ = napping(timedelta(milliseconds=900), 2.2, changing)
    result = await _call_and_count(mcp, transport)
    assert result.data == "rested"
    gaps = [(b[0] - a[0], a[1]) for a, b in itertools.pairwise(answered)]
    assert all(gap >= asked / 1000 - 0.01 for gap, asked in gaps)  # a floor, always
    assert any(gap < 0.4 for gap, asked in gaps if asked == 150)  # and it follows it down
