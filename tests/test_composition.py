"""A tool keeps, as a task, what FastMCP gives it in the foreground (GUIDE §6).

Each test runs the same tool both ways over the same wire: without the tasks
opt-in (the synchronous call) and with it (a task, polled to `completed`), and
compares what the tool saw. The tool lives on the root server, on a mounted
child (`child_`), or two mounts down (`child_grand_`): `ctx.fastmcp`,
`get_server()` and `CurrentFastMCP()` must name the server it lives on, the
middleware of every level must run around it, and session state set by
middleware during the call must be readable from the task. Logging, progress
and elicitation must work inside a mounted task as they do unmounted.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import pytest
from fastmcp import Context, FastMCP
from fastmcp.dependencies import CurrentFastMCP
from fastmcp.server.dependencies import get_http_headers, get_server
from fastmcp.server.middleware import Middleware, MiddlewareContext
from mcp.types import CallToolRequestParams

from fastmcp_tasks import TasksExtension
from tests.wire import Wire, connect

pytestmark = pytest.mark.anyio

LEVELS = ["", "child_", "child_grand_"]


class SetsState(Middleware):
    """Sets session state and request-scoped state during the `tools/call`, as apps do."""

    async def on_call_tool(
        self, context: MiddlewareContext[CallToolRequestParams], call_next: Any
    ) -> Any:
        ctx = context.fastmcp_context
        assert ctx is not None
        await ctx.set_state("tenant", "acme")
        await ctx.set_state("connection", "live-handle", serializable=False)
        return await call_next(context)


class Records(Middleware):
    """Records each call it wraps: the tool name and whether the body ran as a task."""

    def __init__(self, server: str) -> None:
        self.server = server
        self.calls: list[tuple[str, str]] = []

    async def on_call_tool(
        self, context: MiddlewareContext[CallToolRequestParams], call_next: Any
    ) -> Any:
        self.calls.append((self.server, context.message.name))
        return await call_next(context)


def add_tools(server: FastMCP, gate: anyio.Event) -> None:
    @server.tool(task=True)
    async def report(ctx: Context, current: FastMCP = CurrentFastMCP()) -> dict[str, Any]:
        return {
            "ctx_server": ctx.fastmcp.name,
            "get_server": get_server().name,
            "current_fastmcp": current.name,
            "has_session_id": isinstance(ctx.session_id, str),
            "tenant": await ctx.get_state("tenant"),
            "connection": await ctx.get_state("connection"),
            "header": get_http_headers().get("x-tenant"),
            "background": ctx.is_background_task,
            "task_id": ctx.task_id,
        }

    @server.tool(task=True)
    async def chatty(ctx: Context) -> str:
        await ctx.info(f"chatty on {ctx.fastmcp.name} starts")
        await ctx.report_progress(1, 2, "half way")
        await gate.wait()
        answer = await ctx.elicit("Your name?", str)
        if answer.action != "accept":
            return f"no name ({answer.action})"
        return f"hello {answer.data} from {ctx.fastmcp.name} ({ctx.is_background_task})"


def build() -> tuple[FastMCP, dict[str, Records], anyio.Event]:
    gate = anyio.Event()
    root = FastMCP("root", middleware=[SetsState()])
    root.add_extension(TasksExtension())
    child, grand = FastMCP("child"), FastMCP("grand")
    records = {name: Records(name) for name in ("root", "child", "grand")}
    for server in (root, child, grand):
        server.add_middleware(records[server.name])
        add_tools(server, gate)
    child.mount(grand, namespace="grand")
    root.mount(child, namespace="child")
    return root, records, gate


async def both_ways(
    wire: Wire, name: str, headers: dict[str, str] | None = None
) -> tuple[dict[str, Any], dict[str, Any], str]:
    """The synchronous result, the task's completed result, and the task's id."""
    sync = await wire.call_tool(name, opt_in=False, headers=headers)
    created = await wire.call_tool(name, headers=headers)
    assert created["resultType"] == "task", created
    done = await wire.wait(created["taskId"], headers=headers)
    assert done["status"] == "completed", done
    return sync, done["result"], created["taskId"]


@pytest.mark.parametrize("level", LEVELS)
async def test_a_task_sees_the_server_state_and_headers_the_foreground_sees(
    transport: str, level: str
) -> None:
    root, _, _ = build()
    async with connect(root, transport) as wire:
        sync, tasked, task_id = await both_ways(wire, f"{level}report", {"X-Tenant": "t-1"})
    assert not sync.get("isError") and not tasked.get("isError"), (sync, tasked)
    foreground, background = sync["structuredContent"], tasked["structuredContent"]
    assert (foreground.pop("background"), foreground.pop("task_id")) == (False, None)
    assert (background.pop("background"), background.pop("task_id")) == (True, task_id)
    assert background == foreground
    lives_on = {"": "root", "child_": "child", "child_grand_": "grand"}[level]
    assert foreground["ctx_server"] == foreground["current_fastmcp"] == lives_on
    if not level:  # a mounted child reads its own state store, in the foreground too
        assert foreground["tenant"] == "acme" and foreground["connection"] == "live-handle"
    assert foreground["header"] == ("t-1" if transport == "http" else None)


@pytest.mark.parametrize("level", LEVELS[1:])
async def test_every_level_s_middleware_runs_around_a_mounted_task(level: str) -> None:
    root, records, _ = build()
    async with connect(root, "memory") as wire:
        await both_ways(wire, f"{level}report")
    levels = ["root", "child"] + (["grand"] if level == "child_grand_" else [])
    for name in levels:
        calls = records[name].calls
        # twice each: the synchronous call and the task (the root sees the wire name)
        assert len(calls) == 2 and calls[0] == calls[1], (name, calls)
    assert records["root"].calls[0] == ("root", f"{level}report")
    assert records["child"].calls[0][1] == level.removeprefix("child_") + "report"


@pytest.mark.parametrize("level", LEVELS)
async def test_logging_progress_and_elicitation_inside_a_mounted_task(
    transport: str, level: str, caplog: pytest.LogCaptureFixture
) -> None:
    root, _, gate = build()
    caplog.set_level(logging.INFO, logger="fastmcp_tasks.tool")
    async with connect(root, transport) as wire:
        created = await wire.call_tool(f"{level}chatty")
        task_id = created["taskId"]
        working = await wire.wait_for(task_id, lambda t: t.get("statusMessage") == "half way")
        assert working["status"] == "working"
        gate.set()
        parked = await wire.wait(task_id, {"input_required"})
        ((key, request),) = parked["inputRequests"].items()
        assert request["method"] == "elicitation/create"
        assert request["params"]["message"] == "Your name?"
        await wire.update(task_id, {key: {"action": "accept", "content": {"value": "Ada"}}})
        done = await wire.wait(task_id)
    lives_on = {"": "root", "child_": "child", "child_grand_": "grand"}[level]
    assert done["status"] == "completed", done
    assert done["result"]["content"][0]["text"] == f"hello Ada from {lives_on} (True)"
    assert any(f"chatty on {lives_on} starts" in r.getMessage() for r in caplog.records)


async def test_a_mounted_tool_s_task_options_are_honoured() -> None:
    """`task_options` on a child's tool reach the task made by the parent."""
    from datetime import timedelta

    from fastmcp_tasks import task_options

    root = FastMCP("root")
    root.add_extension(TasksExtension())
    child = FastMCP("child")

    @child.tool(task=True)
    @task_options(input_timeout=timedelta(milliseconds=50))
    async def impatient(ctx: Context) -> str:
        answer = await ctx.elicit("Quick?", str)
        return answer.action

    root.mount(child, namespace="child")
    async with connect(root, "memory") as wire:
        created = await wire.call_tool("child_impatient")
        done = await wire.wait(created["taskId"])
    assert done["result"]["content"][0]["text"] == "cancel"  # unanswered within 50 ms
