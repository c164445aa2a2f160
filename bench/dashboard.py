"""What the dashboard's data layer costs with 100,000 retained tasks on SQLite.

    .venv/bin/python -m bench.dashboard                # about 30 s
    .venv/bin/python -m bench.dashboard --tasks 20000

Writes the tasks straight into a fresh SQLite file (the store's own schema and row
format; 90% finished, 10% active, 12 tools of which `rare` has 20 tasks), then times,
through `SQLiteTaskStore`: `TaskIndex.page()` before the load (straight from the store),
`load()` (and the longest the event loop was held during it), `page()` after it
(unfiltered, by status, by the rare tool, by an id prefix, a deep cursor), `overview()`
(no cache), `workers()`, and the memory the loaded index holds (tracemalloc). In the
same run, a plain synchronous `tools/call` (in memory), so every row is also a ratio to
it. Prints a table; writes bench/results/dashboard.json.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import random
import sqlite3
import statistics
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from fastmcp import FastMCP

from bench.calls import summary, sync_call
from bench.transports import memory_transport
from fastmcp_tasks.dashboard import stats
from fastmcp_tasks.dashboard.index import TaskIndex, TaskQuery
from fastmcp_tasks.dashboard.workers import workers
from fastmcp_tasks.stores.base import TaskRecord
from fastmcp_tasks.stores.sqlite import SQLiteTaskStore
from fastmcp_tasks.stores.sqlite.schema import INSERT_TASK, to_row

TOOLS = [f"tool_{i}" for i in range(11)]
RESULTS = Path(__file__).resolve().parent / "results" / "dashboard.json"


async def sync_p50_ms(rounds: int = 300) -> float:
    """p50 of a plain synchronous `tools/call` in memory, the unit of every ratio."""
    mcp = FastMCP("bench-dashboard")

    @mcp.tool
    async def noop() -> str:
        return "ok"

    samples: list[int] = []
    async with memory_transport(mcp) as conn:
        for i in range(rounds + 50):
            start = time.perf_counter_ns()
            await sync_call(conn.send)
            if i >= 50:  # warmed up
                samples.append(time.perf_counter_ns() - start)
    return float(summary(samples)["p50_us"]) / 1000


def records(n: int, now: float) -> list[TaskRecord]:
    rng = random.Random(7)
    out = []
    for i in range(n):
        created = now - 86_400 + 86_400 * i / n
        tool = "rare" if i % (n // 20) == 0 else rng.choice(TOOLS)
        r = TaskRecord(
            task_id=str(uuid.UUID(int=rng.getrandbits(128))),
            tool=tool,
            status="working",
            created_at=created,
            updated_at=created,
            arguments={"n": i, "text": "x" * 40},
            status_message="Working on it",
            poll_interval_ms=1000,
            retention_ms=7 * 86_400_000,
            owner=f"user-{i % 7}",
            app="bench",
        )
        if rng.random() < 0.9:
            r.status = rng.choice(["completed", "completed", "completed", "failed", "cancelled"])  # type: ignore[assignment]
            r.terminal_at = r.updated_at = min(now, created + rng.expovariate(1 / 30))
            if r.status == "completed":
                r.result_json = '{"content":[{"type":"text","text":"done"}]}'
            elif r.status == "failed":
                r.error = {"code": -32603, "message": "boom " * 20}
        else:
            r.lease_owner = f"host-{i % 3}:{1000 + i % 3}:abcd{i % 3}"
            r.lease_expires = now + 30
            r.attempts = 1
        out.append(r)
    return out


async def timed(fn: Callable[[], Awaitable[Any]], rounds: int = 5) -> float:
    """Median milliseconds of `rounds` awaits of `fn()`."""
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        await fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


async def main(n: int) -> None:
    path = Path(tempfile.mkdtemp()) / "tasks.db"
    now = time.time()
    store = SQLiteTaskStore(path)
    await store.open()
    await store.close()
    with sqlite3.connect(path) as conn:
        conn.executemany(INSERT_TASK, [to_row(r) for r in records(n, now)])
    print(f"{n} tasks written to {path}")
    sync_ms = await sync_p50_ms()
    rows: list[dict[str, Any]] = []

    def row(name: str, ms: float, note: str = "") -> None:
        rows.append({"operation": name, "ms": ms, "per_sync_call": ms / sync_ms, "note": note})

    store = SQLiteTaskStore(path)
    await store.open()
    try:
        index = TaskIndex(store)
        rare = TaskQuery(tool="rare")
        for name, query in [
            ("no filter", TaskQuery()),
            ("status=failed", TaskQuery(status=frozenset({"failed"}))),
            ("tool=rare", rare),
        ]:
            ms = await timed(lambda q=query: index.page(q), 3)
            row(f"page() before load, {name}", ms)
        gaps: list[float] = []

        async def ticker(done: asyncio.Event) -> None:
            last = time.perf_counter()
            while not done.is_set():
                await asyncio.sleep(0.001)
                t = time.perf_counter()
                gaps.append(t - last)
                last = t

        async def held_loop(fn: Callable[[], Awaitable[Any]]) -> tuple[float, float]:
            """Milliseconds `fn()` took, and the longest it kept the loop from a ticker."""
            gaps.clear()
            done = asyncio.Event()
            tick = asyncio.create_task(ticker(done))
            start = time.perf_counter()
            await fn()
            took = (time.perf_counter() - start) * 1000
            done.set()
            await tick
            return took, max(gaps) * 1000

        took, held = await held_loop(index.load)
        row("load()", took, f"loop held <= {held:.1f} ms")
        gc.collect()
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        measured = TaskIndex(store)
        await measured.load()
        gc.collect()
        size = tracemalloc.get_traced_memory()[0] - base
        tracemalloc.stop()
        del measured
        mib, each = size / 2**20, size / len(index)
        memory = {"mib": mib, "bytes_per_task": each}
        first = await index.page(TaskQuery())
        some = first.tasks[3].task_id[:4]
        deep = TaskQuery(before=list(index.summaries())[n // 2].key)
        for name, query in [
            ("no filter", TaskQuery()),
            ("status=failed", TaskQuery(status=frozenset({"failed"}))),
            ("status=active", TaskQuery(status=frozenset({"working", "input_required"}))),
            ("tool=rare", rare),
            (f"q={some}", TaskQuery(id_prefix=some)),
            ("tool=nope (no match)", TaskQuery(tool="nope")),
            ("cursor at 50%", deep),
        ]:
            index._matching.clear()  # the matching-count cache
            row(f"page() loaded, {name}", await timed(lambda q=query: index.page(q)))
        sampler = stats.BacklogSampler()

        async def fresh_overview() -> None:
            stats._cache.clear()
            stats.overview(index, sampler, time.time())

        row("overview() (uncached)", await timed(fresh_overview))

        async def cached_overview() -> None:
            stats.overview(index, sampler, time.time())

        async def worker_rows() -> None:
            workers(index, time.time(), 30.0)

        row("overview() (cached)", await timed(cached_overview))
        row("workers()", await timed(worker_rows))
        took, held = await held_loop(index.reload)
        row("reload()", took, f"loop held <= {held:.1f} ms")
    finally:
        await store.close()
    print(f"\nsync tools/call p50 (in memory, same run): {sync_ms:.3f} ms")
    print(f"index memory: {memory['mib']:.1f} MiB ({memory['bytes_per_task']:.0f} B per task)\n")
    print("| operation | ms | / sync tools/call | |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['operation']} | {r['ms']:.2f} | {r['per_sync_call']:.1f}x | {r['note']} |")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    report = {"tasks": n, "sync_p50_ms": sync_ms, "memory": memory, "rows": rows}
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=100_000)
    asyncio.run(main(parser.parse_args().tasks))
