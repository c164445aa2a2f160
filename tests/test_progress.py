"""Progress and logging inside a task: `statusMessage`, never a failure."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from fastmcp import Context, FastMCP
from fastmcp.dependencies import Progress as CoreProgress

from fastmcp_tasks import Progress, TasksExtension
from fastmcp_tasks.server.engine.progress import (
    core_progress_adapted,
    install_core_progress_adapter,
)
from fastmcp_tasks.server.observability import fingerprint
from tests.servers import make_server
from tests.wire import connect

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parent.parent


def stepping_server() -> tuple[FastMCP, dict[str, anyio.Event]]:
    """Tools that report progress, then wait for the test at each step."""
    mcp = FastMCP("progress")
    mcp.add_extension(TasksExtension())
    gates: dict[str, anyio.Event] = {}

    async def step(name: str) -> None:
        gates.setdefault(f"{name}-reached", anyio.Event()).set()
        await gates.setdefault(f"{name}-go", anyio.Event()).wait()

    @mcp.tool(task=True)
    async def with_core(progress: CoreProgress = CoreProgress()) -> str:
        await progress.set_total(4)
        await progress.increment()
        await step("core-count")
        await progress.set_message("Rendering page 2")
        await step("core-message")
        return "done"

    @mcp.tool(task=True)
    async def with_ours(progress: Progress = Progress()) -> str:
        await progress.set_total(10)
        await progress.increment(3)
        await step("ours-count")
        await progress.set_message("almost")
        await step("ours-message")
        return "done"

    @mcp.tool(task=True)
    async def with_ctx(ctx: Context) -> str:
        await ctx.report_progress(3, 10)
        await step("ctx-count")
        await ctx.report_progress(5, None)
        await step("ctx-bare")
        await ctx.report_progress(6, 10, "Copying files")
        await step("ctx-message")
        return "done"

    return mcp, gates


@pytest.mark.parametrize(
    ("tool", "prefix", "expected"),
    [
        ("with_core", "core", [("count", "1/4"), ("message", "Rendering page 2")]),
        ("with_ours", "ours", [("count", "3/10"), ("message", "almost")]),
        ("with_ctx", "ctx", [("count", "3/10"), ("bare", "5"), ("message", "Copying files")]),
    ],
)
async def test_progress_becomes_status_message(
    transport: str, tool: str, prefix: str, expected: list[tuple[str, str]]
) -> None:
    mcp, gates = stepping_server()
    async with connect(mcp, transport) as wire:
        created = await wire.call_tool(tool)
        for step, message in expected:
            await gates.setdefault(f"{prefix}-{step}-reached", anyio.Event()).wait()
            task = await wire.get(created["taskId"])
            assert task["status"] == "working"
            assert task["statusMessage"] == message
            gates.setdefault(f"{prefix}-{step}-go", anyio.Event()).set()
        done = await wire.wait(created["taskId"])
    assert done["status"] == "completed"


def counting_server() -> FastMCP:
    mcp = FastMCP("counting")
    mcp.add_extension(TasksExtension())

    @mcp.tool(task=True)
    async def core_counts(progress: CoreProgress = CoreProgress()) -> str:
        await progress.set_total(5)
        await progress.increment(2)
        await progress.set_message("hi")
        return f"{progress.current}/{progress.total} {progress.message}"

    @mcp.tool(task=True)
    async def our_counts(progress: Progress = Progress()) -> str:
        await progress.set_total(5)
        await progress.increment(2)
        await progress.set_message("hi")
        return f"{progress.current}/{progress.total} {progress.message}"

    return mcp


@pytest.mark.parametrize("tool", ["core_counts", "our_counts"])
async def test_progress_reads_back_the_same_in_both_modes(transport: str, tool: str) -> None:
    mcp = counting_server()
    async with connect(mcp, transport) as wire:
        sync = await wire.call_tool(tool, opt_in=False)
        created = await wire.call_tool(tool)
        done = await wire.wait(created["taskId"])
    assert sync["content"][0]["text"] == "2/5 hi"
    assert done["result"]["content"][0]["text"] == "2/5 hi"
    assert done["statusMessage"] == "hi"


async def test_logging_in_a_task_goes_to_the_server_log(
    transport: str, caplog: pytest.LogCaptureFixture
) -> None:
    mcp, _ = make_server()
    caplog.set_level(logging.DEBUG, logger="fastmcp_tasks.tool")
    async with connect(mcp, transport) as wire:
        created = await wire.call_tool("chatty")
        done = await wire.wait(created["taskId"])
    assert done["status"] == "completed"
    assert done["result"]["content"][0]["text"] == "logged"
    lines = [r for r in caplog.records if r.name.startswith("fastmcp_tasks.tool")]
    messages = [r.getMessage() for r in lines]
    assert [m.rsplit("] ", 1)[1] for m in messages] == [
        "debug line",
        "info line",
        "warning line",
        "error line",
        "custom",
    ]
    assert [r.levelno for r in lines] == [
        logging.DEBUG,
        logging.INFO,
        logging.WARNING,
        logging.ERROR,
        logging.INFO,
    ]
    # no authentication: the id is a credential, so the log names its fingerprint
    assert all(fingerprint(created["taskId"]) in m for m in messages)
    assert not any(created["taskId"] in m for m in messages)


def test_core_progress_adapter_is_installed_at_import() -> None:
    """In a fresh interpreter, importing the package is enough: no extension built yet."""
    code = (
        "import fastmcp_tasks\n"
        "from fastmcp_tasks.server.engine.progress import core_progress_adapted\n"
        "assert core_progress_adapted()\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=60)


def test_core_progress_adapter_is_installed_and_idempotent() -> None:
    # Installed at import (no test has to build a TasksExtension first); if a
    # FastMCP upgrade moves Progress.__aenter__, `_compat.check_seams()` fails loudly.
    assert core_progress_adapted()
    assert install_core_progress_adapter() is True
    assert install_core_progress_adapter() is True
    assert core_progress_adapted()
    assert issubclass(Progress, CoreProgress)
