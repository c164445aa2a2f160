"""The CPU bench's server (`bench/cpu.py`): one tool, `echo(text) -> text`, declared
`@mcp.tool(task=True)`, on the store named by the environment; served over Streamable
HTTP by `python -m bench.cpu_app PORT` (the front end) or run by the worker command
(`python -m fastmcp_tasks worker bench/cpu_app.py:mcp`).

Environment: `BENCH_CPU_URL` (the store URL; required for `mcp` to exist),
`BENCH_CPU_CONCURRENCY` (the extension's concurrency: 0 for a front end in front of
workers, > 0 for one that runs its tasks itself), `BENCH_CPU_PROFILE` (a directory: then
SIGUSR1 starts a `cProfile` of the main thread and SIGUSR2 stops it and writes
`<role>-<pid>.<k>.prof` there, so the harness profiles exactly its measured window),
`BENCH_CPU_OPS` (a directory: then SIGHUP writes the round trips the process's store has
made so far to `<role>-<pid>.ops` there, `store_operations`), `BENCH_CPU_PROGRESS` (how
many progress messages `echo` reports, `--progress`), `BENCH_CPU_FREEZE` (non-empty: the
front end calls `gc.freeze()` before it serves, as a server's own code may; the worker
command does it by itself, `--freeze-front-end`).
"""

from __future__ import annotations

import cProfile
import gc
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType

from fastmcp import FastMCP

from fastmcp_tasks import Progress, TasksExtension
from fastmcp_tasks.server.monitored_store import innermost

TOOL = "echo"


_extension: TasksExtension | None = None


def build(url: str, concurrency: int) -> FastMCP:
    """The bench server: `echo` only, `max_tasks` high enough for any run."""
    global _extension
    mcp = FastMCP("bench-cpu")
    _extension = TasksExtension(url=url, concurrency=concurrency, max_tasks=1_000_000)
    mcp.add_extension(_extension)

    reports = int(os.environ.get("BENCH_CPU_PROGRESS", "0"))
    if not reports:  # the plain `echo`: no dependency to resolve on any call

        @mcp.tool(task=True)
        async def echo(text: str) -> str:
            return text

        return mcp

    @mcp.tool(task=True, name=TOOL)
    async def reporting_echo(text: str, progress: Progress = Progress()) -> str:
        for step in range(reports):  # a task's each a status message, a sync call's not
            await progress.set_message(f"step {step + 1} of {reports}")
        return text

    return mcp


_profiler: cProfile.Profile | None = None
_dumps = 0


def _install_profile_hook(directory: Path, role: str) -> None:
    """SIGUSR1: start profiling the main thread; SIGUSR2: stop and write the profile."""

    def start(signum: int, frame: FrameType | None) -> None:
        global _profiler
        _profiler = cProfile.Profile(time.process_time)  # CPU, not wall, time
        _profiler.enable()

    def stop(signum: int, frame: FrameType | None) -> None:
        global _profiler, _dumps
        if _profiler is not None:
            _profiler.disable()
            _dumps += 1
            _profiler.dump_stats(str(directory / f"{role}-{os.getpid()}.{_dumps}.prof"))
            _profiler = None

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)


def store_operations() -> int:
    """Round trips this process's store has made so far: Redis commands, scripts and feed
    reads (`round_trips`), PostgreSQL statements and feed statements (a batch of them
    once, `postgres.batching`), SQLite write
    transactions, reads and feed polls (`StoreStats`); 0 in memory."""
    if _extension is None:
        return 0
    stats = getattr(innermost(_extension.store), "stats", None)
    if isinstance(stats, dict):  # PostgreSQL: statements that shared a round trip count once
        sent = sum(stats.get(key, 0) for key in ("round_trips", "statements", "feed_statements"))
        return sent - stats.get("batched", 0)
    if stats is not None:
        return int(stats.write_transactions + stats.reads + stats.feed_polls)
    return 0


def _install_count_hook(directory: Path, role: str) -> None:
    """SIGHUP: write `store_operations()` to `<role>-<pid>.ops` in `directory`."""

    def write(signum: int, frame: FrameType | None) -> None:
        target = directory / f"{role}-{os.getpid()}.ops"
        target.with_suffix(".tmp").write_text(str(store_operations()))
        target.with_suffix(".tmp").replace(target)

    signal.signal(signal.SIGHUP, write)


def serve(port: int) -> None:
    """The front end: `mcp` over Streamable HTTP on 127.0.0.1:`port` until SIGTERM."""
    import uvicorn

    if os.environ.get("BENCH_CPU_FREEZE"):  # what startup made, out of full collections
        gc.collect()
        gc.freeze()
    config = uvicorn.Config(
        mcp.http_app(),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        lifespan="on",
        timeout_keep_alive=600,
    )
    uvicorn.Server(config).run()


if "BENCH_CPU_URL" in os.environ:
    mcp = build(os.environ["BENCH_CPU_URL"], int(os.environ.get("BENCH_CPU_CONCURRENCY", "0")))
    _role = "front_end" if __name__ == "__main__" else "worker"
    if os.environ.get("BENCH_CPU_PROFILE"):
        _install_profile_hook(Path(os.environ["BENCH_CPU_PROFILE"]), _role)
    if os.environ.get("BENCH_CPU_OPS"):
        _install_count_hook(Path(os.environ["BENCH_CPU_OPS"]), _role)

if __name__ == "__main__":
    serve(int(sys.argv[1]))
