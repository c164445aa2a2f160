"""The load-test server (`bench/load.py`): a real uvicorn Streamable HTTP server in a process
of its own, so the harness can measure its resident memory apart from the load generator.

    python -m bench.load_server --url memory:// --port 8123 --concurrency 1000

Tools:

- `work(key, ms)`, `task=TaskConfig(poll_interval=--poll-ms)`: sleeps `ms` milliseconds
  in `--progress-ms` steps, reporting each step through `Progress` (the task's
  `statusMessage`), and returns `"done <key>"`. Every run is written into a ledger
  (task id from `current_task()`, key), so the harness can tell a tool body that ran twice.
- `ping()`: a plain synchronous tool (`"pong"`), the reference the ratios divide by.
- `stats()`: the ledger (runs per task id, keys per task id), tools running now and at
  peak, task-seconds run so far, this process's RSS, peak RSS (`ru_maxrss`) and CPU
  seconds, and the event-loop lag since the previous `stats()` (a 20 ms sleep, how
  late it woke up; sampled from the first `ping()` on) and garbage-collection pauses.

`--gc-freeze` calls `gc.freeze()` at the first `ping()` (the server is up and idle), so
full collections no longer walk the objects of startup (modules, FastMCP, pydantic).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import math
import resource
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import anyio
import uvicorn
from fastmcp import FastMCP
from fastmcp.utilities.tasks import TaskConfig

from fastmcp_tasks import Progress, TasksExtension
from fastmcp_tasks.server.engine.context import current_task


@dataclass
class Ledger:
    """What the `work` tool did, in this process."""

    runs: dict[str, list[str]] = field(default_factory=dict)  # task id -> keys, one per run
    outside_task: int = 0  # runs with no current task (a sync call of `work`: never expected)
    running: int = 0
    peak_running: int = 0
    task_seconds: float = 0.0  # integral of `running` over time
    since: float = field(default_factory=time.monotonic)
    lags: list[float] = field(default_factory=list)  # event-loop lag samples since `stats`
    monitor: asyncio.Task[None] | None = None
    gc_started: float = 0.0
    gc_pauses: list[tuple[int, float]] = field(default_factory=list)  # (generation, seconds)

    def on_gc(self, phase: str, info: dict[str, Any]) -> None:
        """`gc.callbacks` hook: the length of every collection, by generation."""
        if phase == "start":
            self.gc_started = time.perf_counter()
        else:
            self.gc_pauses.append((info["generation"], time.perf_counter() - self.gc_started))

    def watch_loop(self, freeze: bool = False) -> None:
        """Start sampling this process's event-loop lag (a 20 ms sleep, how late it woke);
        with `freeze`, first move every object alive now out of the collector's sight."""
        if self.monitor is None:
            if freeze:
                gc.freeze()
            self.monitor = asyncio.get_running_loop().create_task(self._monitor())

    async def _monitor(self) -> None:
        while True:
            start = time.perf_counter()
            await asyncio.sleep(0.02)
            self.lags.append(time.perf_counter() - start - 0.02)

    def _advance(self) -> float:
        now = time.monotonic()
        self.task_seconds += self.running * (now - self.since)
        self.since = now
        return now

    def start(self, task_id: str | None, key: str) -> None:
        self._advance()
        if task_id is None:
            self.outside_task += 1
        else:
            self.runs.setdefault(task_id, []).append(key)
        self.running += 1
        self.peak_running = max(self.peak_running, self.running)

    def stop(self) -> None:
        self._advance()
        self.running -= 1

    def snapshot(self, runs: bool) -> dict[str, Any]:
        now = self._advance()
        usage = resource.getrusage(resource.RUSAGE_SELF)
        with open("/proc/self/statm") as statm:
            rss = int(statm.read().split()[1]) * resource.getpagesize()
        lags, self.lags = sorted(self.lags), []
        pauses, self.gc_pauses = self.gc_pauses, []
        gc_stats = {}
        for gen in (0, 1, 2):
            times = [seconds for generation, seconds in pauses if generation == gen]
            gc_stats[f"gen{gen}"] = {
                "n": len(times),
                "total_ms": round(sum(times) * 1000, 1),
                "max_ms": round(max(times, default=0) * 1000, 1),
            }
        return {
            "gc": gc_stats,
            "objects": len(gc.get_objects()) if runs else None,
            "loop_lag_ms": {
                "n": len(lags),
                "p50": round(lags[len(lags) // 2] * 1000, 1) if lags else None,
                "p99": round(lags[int(len(lags) * 0.99)] * 1000, 1) if lags else None,
                "max": round(lags[-1] * 1000, 1) if lags else None,
            },
            "monotonic": now,
            "running": self.running,
            "peak_running": self.peak_running,
            "task_seconds": self.task_seconds,
            "executions": sum(len(keys) for keys in self.runs.values()),
            "outside_task": self.outside_task,
            "runs": self.runs if runs else None,
            "rss_mib": rss / 2**20,
            "maxrss_mib": usage.ru_maxrss / 1024,
            "cpu_seconds": usage.ru_utime + usage.ru_stime,
        }


def build(
    url: str, concurrency: int, poll_ms: int, progress_ms: int, gc_freeze: bool = False
) -> FastMCP:
    mcp = FastMCP("load")
    mcp.add_extension(TasksExtension(url=url, concurrency=concurrency, max_tasks=500_000))
    ledger = Ledger()
    gc.callbacks.append(ledger.on_gc)
    config = TaskConfig(mode="optional", poll_interval=timedelta(milliseconds=poll_ms))

    @mcp.tool(task=config)
    async def work(key: str, ms: int, progress: Progress = Progress()) -> str:
        """Sleep `ms` milliseconds in steps of about `--progress-ms`, reporting each step."""
        running = current_task()
        ledger.start(running.task_id if running is not None else None, key)
        try:
            steps = max(1, math.ceil(ms / progress_ms))
            await progress.set_total(steps)
            for _ in range(steps):
                await anyio.sleep(ms / steps / 1000)
                await progress.increment()
        finally:
            ledger.stop()
        return f"done {key}"

    @mcp.tool
    async def ping() -> str:
        ledger.watch_loop(freeze=gc_freeze)
        return "pong"

    @mcp.tool
    async def stats(runs: bool = False) -> dict[str, Any]:
        """The ledger; the loop-lag samples are those since the previous call."""
        return ledger.snapshot(runs)

    return mcp


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="task store URL")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--concurrency", type=int, default=1000)
    parser.add_argument("--poll-ms", type=int, default=1000)
    parser.add_argument("--progress-ms", type=int, default=1000)
    parser.add_argument("--gc-freeze", action="store_true", help="gc.freeze() at the first ping")
    args = parser.parse_args()
    mcp = build(args.url, args.concurrency, args.poll_ms, args.progress_ms, args.gc_freeze)
    uvicorn.run(
        mcp.http_app(),
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        timeout_keep_alive=600,
        timeout_graceful_shutdown=5,
    )


if __name__ == "__main__":
    main()
