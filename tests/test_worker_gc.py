"""`fastmcp-tasks worker` freezes what its startup loaded out of the garbage collector's
full passes (`cli.worker`), unless told `--no-gc-freeze`: a real worker process on a
SQLite file runs a task whose tool reports the worker's own collector, both ways. The
workers are fresh interpreters (`spawn.fresh_interpreter`): a fork of the test process
(the suite's other processes) freezes what it inherits by itself."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from fastmcp import FastMCP

from fastmcp_tasks import TasksExtension
from tests.spawn import fresh_interpreter
from tests.wire import memory_wire

pytestmark = pytest.mark.anyio

APP = """
import gc
import os

from fastmcp import FastMCP
from fastmcp_tasks import TasksExtension

mcp = FastMCP("gc")
mcp.add_extension(TasksExtension(url=os.environ["GC_TEST_URL"], concurrency=0))


@mcp.tool(task=True)
async def collector() -> str:
    return f"{os.getpid()} {gc.get_freeze_count()}"  # who ran it, and what it had frozen
"""


def front_end(url: str) -> FastMCP:
    """The same server as the worker's file, as a front end (it runs nothing)."""
    mcp = FastMCP("gc")
    mcp.add_extension(TasksExtension(url=url, concurrency=0))

    @mcp.tool(task=True)
    async def collector() -> str:
        raise AssertionError("a front end with concurrency=0 runs no task")

    return mcp


def start_worker(directory: Path, *flags: str) -> tuple[str, subprocess.Popen[bytes]]:
    """A fresh `fastmcp-tasks worker` of `APP` on a SQLite file in `directory`, started
    with `flags`; the store's URL."""
    directory.mkdir()
    url = f"sqlite:///{directory / 'tasks.db'}"
    app = directory / "app.py"
    app.write_text(APP)
    with fresh_interpreter():
        worker = subprocess.Popen(
            [sys.executable, "-m", "fastmcp_tasks", "worker", str(app), *flags],
            env={**os.environ, "GC_TEST_URL": url},
            stdout=subprocess.PIPE,
            stderr=(directory / "worker.log").open("wb"),
        )
    return url, worker


async def frozen_by_a_worker(directory: Path, *flags: str) -> int:
    """How many objects a real worker started with `flags` had frozen when it ran a task
    created once it had started (its startup line, printed after the freeze)."""
    url, worker = start_worker(directory, *flags)
    try:
        with anyio.fail_after(60):
            assert worker.stdout is not None
            line = await anyio.to_thread.run_sync(worker.stdout.readline)
            log = (directory / "worker.log").read_bytes().decode(errors="replace")
            assert line.startswith(b"fastmcp-tasks worker: "), (line, log)
            async with memory_wire(front_end(url)) as wire:
                created = await wire.call_tool("collector")
                done = await wire.wait(created["taskId"], within=50)
        assert done["status"] == "completed", done
        pid, frozen = done["result"]["content"][0]["text"].split()
        assert int(pid) == worker.pid  # the worker ran it, not this process
        return int(frozen)
    finally:
        worker.terminate()
        worker.wait(timeout=30)


async def test_a_worker_freezes_its_startup_and_no_gc_freeze_leaves_the_collector_alone(
    tmp_path: Path,
) -> None:
    frozen = await frozen_by_a_worker(tmp_path / "default")
    kept = await frozen_by_a_worker(tmp_path / "kept", "--no-gc-freeze")
    assert frozen > 10_000  # FastMCP, pydantic, the SDK and the app: all of startup
    assert kept == 0
