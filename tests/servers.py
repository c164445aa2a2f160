"""The reference server the wire tests share: one tool per behaviour under test."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import anyio
from fastmcp import Context, FastMCP
from fastmcp.exceptions import ToolError
from fastmcp.utilities.tasks import TaskConfig
from mcp.shared.exceptions import MCPError

from fastmcp_tasks import TasksExtension


@dataclass
class Probes:
    """What the tools report back to the test, without sleeping."""

    started: dict[str, anyio.Event] = field(default_factory=dict)
    cancelled: dict[str, anyio.Event] = field(default_factory=dict)
    release: dict[str, anyio.Event] = field(default_factory=dict)
    runs: list[str] = field(default_factory=list)

    def event(self, table: str, key: str) -> anyio.Event:
        events: dict[str, anyio.Event] = getattr(self, table)
        return events.setdefault(key, anyio.Event())


def make_server(poll: timedelta | None = None, **extension: Any) -> tuple[FastMCP, Probes]:
    """The reference server; `poll` overrides the optional tools' default poll interval."""
    mcp = FastMCP("reference")
    mcp.add_extension(TasksExtension(**extension))
    probes = Probes()
    task: bool | TaskConfig = True if poll is None else TaskConfig(poll_interval=poll)

    @mcp.tool(task=task)
    async def echo(text: str) -> str:
        return text

    @mcp.tool(task=TaskConfig(mode="required", poll_interval=timedelta(milliseconds=1500)))
    async def required_job(n: int = 1) -> int:
        return n * 2

    @mcp.tool(task=TaskConfig(mode="forbidden"))
    async def never_task() -> str:
        return "sync"

    @mcp.tool
    def plain(x: int) -> int:
        return x + 1

    @mcp.tool(task=task)
    async def tool_error() -> str:
        raise ToolError("the job could not finish")

    @mcp.tool(task=task)
    async def crash() -> str:
        raise RuntimeError("boom: secret detail")

    @mcp.tool(task=task)
    async def protocol_error() -> str:
        raise MCPError(code=-32050, message="upstream refused", data={"retryAfter": 3})

    @mcp.tool(task=task)
    async def blocker(key: str) -> str:
        """Starts, then waits until the test releases it; records cancellation."""
        probes.runs.append(key)
        probes.event("started", key).set()
        try:
            await probes.event("release", key).wait()
        except anyio.get_cancelled_exc_class():
            probes.event("cancelled", key).set()
            raise
        return f"released {key}"

    @mcp.tool(task=task)
    async def chatty(ctx: Context) -> str:
        await ctx.debug("debug line")
        await ctx.info("info line")
        await ctx.warning("warning line")
        await ctx.error("error line")
        await ctx.log("custom", level="notice", logger_name="custom")
        return "logged"

    return mcp, probes


def napping(
    poll: timedelta, work: float, answer: Callable[[dict[str, Any]], dict[str, Any]] | None = None
) -> tuple[FastMCP, list[float]]:
    """A tool that works `work` seconds, polled every `poll`; records each tasks/get.

    `answer`, when given, rewrites each `tasks/get` result before it is sent.
    """
    mcp = FastMCP("napping")
    extension = TasksExtension()
    gets: list[float] = []
    real_get = extension._methods.get

    async def counting_get(ctx, params):  # type: ignore[no-untyped-def]
        gets.append(anyio.current_time())
        state = await real_get(ctx, params)
        return state if answer is None else answer(state)

    extension._methods.get = counting_get  # type: ignore[method-assign]
    mcp.add_extension(extension)

    @mcp.tool(task=TaskConfig(poll_interval=poll))
    async def nap() -> str:
        await anyio.sleep(work)
        return "rested"

    return mcp, gets
