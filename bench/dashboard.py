"""What the dashboard's data layer costs with 100,000 retained tasks on SQLite.

    .venv/bin/python -m bench.dashboard                # about 30 s
    .venv/bin/python -m bench.dashboard --tasks 20000

Writes the tasks straight into a fresh SQLite file (the store's own schema and row
format; 90% finished, 10% active, 12 tools of which `rare` has 20 tasks), then times,
through `SQLiteTaskStore`: `TaskIndex.page()` before the load (straight from the store),
`load()` (and the longest the event loop was held during it), `page()` after it
(unfiltered, by status, by the rare tool, by an id prefix, a deep cursor), `overview()`
(no cache), `workers()`, and the memory the loaded index holds (tracemalloc).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
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

from fastmcp_tasks.dashboard import stats
from fastmcp_tasks.dashboard.index import TaskIndex, TaskQuery
from fastmcp_tasks.dashboard.workers import workers
from fastmcp_tasks.stores.base import TaskRecord
from fastmcp_tasks.stores.sqlite import SQLiteTaskStore
from fastmcp_tasks.stores.sqlite.schema import INSERT_TASK, to_row

TOOLS = [f"tool_{i}" for i in range(11)]


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
            print(f"page() before load, {name:17s} {ms:8.1f} ms")
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
        print(f"load():                          {took:8.1f} ms  (loop held <= {held:.1f} ms)")
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
        print(f"index memory:                    {mib:8.1f} MiB ({each:.0f} B per task)")
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
            print(f"page() loaded, {name:22s} {await timed(lambda q=query: index.page(q)):8.2f} ms")
        sampler = stats.BacklogSampler()

        async def fresh_overview() -> None:
            stats._cache.clear()
            stats.overview(index, sampler, time.time())

        print(f"overview() (uncached):           {await timed(fresh_overview):8.1f} ms")

        async def cached_overview() -> None:
            stats.overview(index, sampler, time.time())

        async def worker_rows() -> None:
            workers(index, time.time(), 30.0)

        print(f"overview() (cached):             {await timed(cached_overview):8.2f} ms")
        print(f"workers():                       {await timed(worker_rows):8.2f} ms")
        took, held = await held_loop(index.reload)
        print(f"reload():                        {took:8.1f} ms  (loop held <= {held:.1f} ms)")
    finally:
        await store.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=100_000)
    asyncio.run(main(parser.parse_args().tasks))
