"""What a task's durable history costs: store bytes per task, and creation / `tasks/get` p50.

    .venv/bin/python -m bench.history                      # memory, sqlite, redis, postgres
    .venv/bin/python -m bench.history --stores sqlite --tasks 500

Two parts, on every store that answers (Redis at `--redis-url`, PostgreSQL at
`--postgres-url`; a store that does not answer is left out and said so):

- **Bytes.** `--tasks` finished tasks are written, then the history a typical task gets
  (created, taken, started, three status messages, finished: seven events with the
  details the engine writes) is added to each; the store's growth per task is the
  history's cost: the SQLite file's pages, PostgreSQL's schema relations
  (`pg_total_relation_size`), Redis `MEMORY USAGE` of the history keys, the memory
  store's allocations (tracemalloc). The task record alone is measured the same way.
- **Latency.** A server per store with the history on and one with it off
  (`TasksExtension(history=...)`), the same no-op tool, samples interleaved in a random
  order with a plain synchronous `tools/call` in memory (each created task is let finish,
  untimed, before the next sample): task-creating `tools/call` p50 and `tasks/get` p50,
  each as a ratio to the sync call of the same run.

Prints a table; writes bench/results/history.json.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import sqlite3
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastmcp import FastMCP

from bench.calls import create_task, get_task, pct, sync_call
from bench.transports import memory_transport
from fastmcp_tasks import TasksExtension
from fastmcp_tasks.stores import store_from_url
from fastmcp_tasks.stores.base import TaskRecord, TaskStore
from fastmcp_tasks.stores.operations import TaskEvent, operable

RESULTS = Path(__file__).resolve().parent / "results" / "history.json"
STORES = ("memory", "sqlite", "redis", "postgres")


def typical_history(task_id: str, at: float) -> list[tuple[str, TaskEvent]]:
    """The seven events of a task that was queued, run once and completed."""
    worker = f"build-host-7:{os.getpid()}:{uuid.uuid4().hex[:12]}"
    events = [
        TaskEvent(at, "created", {"app": "bench", "by": worker, "queued": True}),
        TaskEvent(at + 0.01, "taken", {"worker": worker}),
        TaskEvent(at + 0.02, "started", {"worker": worker, "attempt": 1}),
        TaskEvent(at + 2.0, "message", {"message": "Rendering page 1 of 3"}),
        TaskEvent(at + 4.0, "message", {"message": "Rendering page 2 of 3"}),
        TaskEvent(at + 6.0, "message", {"message": "Rendering page 3 of 3"}),
        TaskEvent(at + 8.0, "finished", {"outcome": "completed"}),
    ]
    return [(task_id, event) for event in events]


def finished_task(i: int) -> TaskRecord:
    now = time.time()
    return TaskRecord(
        task_id=uuid.uuid4().hex + uuid.uuid4().hex[:16],
        tool="render",
        status="working",
        created_at=now,
        updated_at=now,
        arguments={"document": f"doc-{i}", "pages": 3},
        poll_interval_ms=1000,
        retention_ms=3_600_000,
        app="bench",
    )


class Sizer:
    """How many bytes a store holds now, by the store's own measure."""

    def __init__(self, name: str, url: str) -> None:
        self.name, self.url = name, url
        self.tag = url.rpartition("=")[2]  # the Redis prefix or PostgreSQL schema

    async def size(self) -> int:
        if self.name == "memory":
            gc.collect()
            return tracemalloc.get_traced_memory()[0]
        if self.name == "sqlite":
            path = self.url.removeprefix("sqlite:///")
            with sqlite3.connect(path) as conn:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                pages = conn.execute("PRAGMA page_count").fetchone()[0]
                free = conn.execute("PRAGMA freelist_count").fetchone()[0]
                size = conn.execute("PRAGMA page_size").fetchone()[0]
            return int((pages - free) * size)
        if self.name == "redis":
            import redis.asyncio as aioredis

            client = aioredis.Redis.from_url(self.url.partition("?")[0])
            total = 0
            try:
                async for key in client.scan_iter(match=f"{{{self.tag}}}*", count=1000):
                    total += await client.memory_usage(key, samples=0) or 0
            finally:
                await client.aclose()
            return total
        import psycopg

        async with await psycopg.AsyncConnection.connect(
            self.url.partition("?")[0], autocommit=True
        ) as conn:
            cursor = await conn.execute(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = %s AND c.relkind IN ('r', 'm')",
                (self.tag,),
            )
            row = await cursor.fetchone()
        return int(row[0]) if row else 0


def store_url(name: str, args: argparse.Namespace, scratch: Path) -> str:
    tag = f"bench_history_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    if name == "memory":
        return "memory://"
    if name == "sqlite":
        return f"sqlite:///{scratch / (tag + '.db')}"
    if name == "redis":
        return f"{args.redis_url}?prefix={tag}"
    return f"{args.postgres_url}?schema={tag}"


@asynccontextmanager
async def opened(name: str, url: str) -> AsyncIterator[TaskStore]:
    store = store_from_url(url, max_tasks=None if name != "memory" else 1_000_000)
    await store.open()
    try:
        yield store
    finally:
        if name == "redis":
            await store.clear()  # type: ignore[attr-defined]
        await store.close()
        if name == "postgres":
            import psycopg

            schema = url.rpartition("=")[2]
            async with await psycopg.AsyncConnection.connect(
                url.partition("?")[0], autocommit=True
            ) as conn:
                await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


async def bytes_per_task(name: str, url: str, n: int) -> dict[str, float]:
    """Store growth per task: the finished task alone, then its seven-event history."""
    tracemalloc.start()
    try:
        async with opened(name, url) as store:
            ops = operable(store)
            assert ops is not None, f"{name} keeps no histories"
            sizer = Sizer(name, url)
            empty = await sizer.size()
            ids = []
            for i in range(n):
                task = finished_task(i)
                await store.create(task)
                await store.transition(task.task_id, "completed", result={"content": []})
                ids.append(task.task_id)
            tasks = await sizer.size()
            now = time.time()
            for start in range(0, n, 100):
                batch = [e for tid in ids[start : start + 100] for e in typical_history(tid, now)]
                await ops.add_events(batch)
            history = await sizer.size()
    finally:
        tracemalloc.stop()
    return {"task": (tasks - empty) / n, "history": (history - tasks) / n}


def bench_server(url: str, history: bool) -> FastMCP:
    mcp = FastMCP(f"bench-history-{history}")

    @mcp.tool(task=True)
    async def noop() -> str:
        return "ok"

    mcp.add_extension(TasksExtension(url=url, history=history))  # type: ignore[call-arg]
    return mcp


async def settle(send: Any, task_id: str) -> None:
    while (await get_task(send, task_id))["status"] not in ("completed", "failed"):  # noqa: ASYNC110 - polled, as a client does
        await asyncio.sleep(0)


#: The kinds `sample_on_off` times, each a list of nanosecond samples.
KINDS = ("sync", "create_on", "create_off", "get_on", "get_off")


async def sample_on_off(
    samples: dict[str, list[int]], sync_send: Any, on_send: Any, off_send: Any, rounds: int
) -> None:
    """Time `rounds` (after 50 warm-up rounds) of the five `KINDS` into `samples`: a sync
    call, a creation and a `tasks/get` on each server, in a fresh random order every round,
    each created task let finish (untimed) before the next sample."""
    await sample_servers(samples, sync_send, {"on": on_send, "off": off_send}, rounds)


async def sample_servers(
    samples: dict[str, list[int]], sync_send: Any, servers: dict[str, Any], rounds: int
) -> None:
    """`sample_on_off` for any number of named servers: `sync`, `create_<name>` and
    `get_<name>` samples, interleaved in a fresh random order every round."""
    shuffle = random.Random(2663).shuffle
    kinds: list[tuple[str, Any, tuple[Any, ...]]] = [("sync", sync_call, (sync_send,))]
    for name, send in servers.items():
        kinds.append((f"create_{name}", create_task, (send,)))
        kinds.append((f"get_{name}", get_task, (send, await create_task(send))))
    for i in range(rounds + 50):
        shuffle(kinds)
        for kind, call, args in kinds:
            start = time.perf_counter_ns()
            answer = await call(*args)
            took = time.perf_counter_ns() - start
            if i >= 50:
                samples.setdefault(kind, []).append(took)
            if kind.startswith("create"):
                await settle(args[0], answer)


async def latency(url_on: str, url_off: str, rounds: int) -> dict[str, float]:
    """p50s (microseconds) of sync / create / get with the history on and off.

    Samples are interleaved in a fresh random order every round, each created task is let
    finish before the next sample (untimed), and the two servers are built in one order
    for half the rounds and in the other for the rest: an earlier-built server is
    measurably slower on this harness whatever its options, and a fixed order would
    charge one kind for the work the previous kind left running.
    """
    plain = FastMCP("bench-history-sync")

    @plain.tool
    async def noop() -> str:
        return "ok"

    samples: dict[str, list[int]] = {k: [] for k in KINDS}
    async with memory_transport(plain) as sync_conn:
        for first_on in (True, False):
            order = [(url_on, True), (url_off, False)]
            if not first_on:
                order.reverse()
            async with (
                memory_transport(bench_server(*order[0])) as one,
                memory_transport(bench_server(*order[1])) as two,
            ):
                on, off = (one, two) if first_on else (two, one)
                await sample_on_off(samples, sync_conn.send, on.send, off.send, rounds // 2)
    return {kind: pct(values, 50) for kind, values in samples.items()}


def write_report(report: dict[str, Any], skipped: list[str], path: Path) -> None:
    """Say loudly which stores were left out, and write `report` (with them) to `path`."""
    for line in skipped:
        print(f"*** SKIPPED {line} ***")
    report["skipped"] = skipped
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")


async def reachable(name: str, url: str) -> str | None:
    """Why a store cannot be benchmarked (`None`: it answers)."""
    try:
        async with opened(name, url):
            return None
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


async def main(args: argparse.Namespace) -> None:
    scratch = Path(tempfile.mkdtemp(prefix="bench-history-"))
    report: dict[str, Any] = {"tasks": args.tasks, "rounds": args.rounds, "stores": {}}
    skipped = []
    for name in args.stores.split(","):
        why = await reachable(name, store_url(name, args, scratch))
        if why is not None:
            skipped.append(f"{name}: {why}")
            continue
        sizes = await bytes_per_task(name, store_url(name, args, scratch), args.tasks)
        p50 = await latency(
            store_url(name, args, scratch), store_url(name, args, scratch), args.rounds
        )
        report["stores"][name] = {"bytes_per_task": sizes, "p50_us": p50}
    print(
        "| store | task bytes | + history bytes | create p50 / sync (on / off) "
        "| tasks/get p50 / sync (on / off) |"
    )
    print("|---|---|---|---|---|")
    for name, row in report["stores"].items():
        b, p = row["bytes_per_task"], row["p50_us"]
        sync = p["sync"]
        print(
            f"| {name} | {b['task']:.0f} | {b['history']:.0f} | "
            f"{p['create_on'] / sync:.2f} / {p['create_off'] / sync:.2f} | "
            f"{p['get_on'] / sync:.2f} / {p['get_off'] / sync:.2f} |"
        )
    write_report(report, skipped, RESULTS)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--stores", default=",".join(STORES))
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/15")
    parser.add_argument("--postgres-url", default="postgresql://postgres@127.0.0.1:5432/test")
    asyncio.run(main(parser.parse_args()))
