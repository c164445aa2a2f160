"""Metrics 1-3, per transport and per store, every store's server up at once and the
samples interleaved: `bench_latency` (sync vs. task-creating `tools/call`), `bench_get`
(`tasks/get` with few and many retained tasks; `fill_store`, `redis_fill`,
`bench.pg.postgres_fill`) and
`bench_throughput` (calls/s with concurrent callers).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import random
import secrets
import sqlite3
import time
from dataclasses import replace
from typing import Any

import anyio
import anyio.to_thread
from fastmcp import FastMCP

from bench import pg
from bench.calls import (
    TOOL,
    append_to,
    create_task,
    fan_out,
    get_task,
    rotated,
    run_task,
    server_side,
    summary,
    sync_call,
    timed,
)
from bench.config import Config
from bench.proto import Send
from bench.server import (
    db_mib,
    drain,
    extension,
    quiet,
    redis_used_mib,
    retained,
    settle,
    sqlite_path,
    store_kind,
)
from bench.transports import servers
from fastmcp_tasks.stores.base import TaskRecord
from fastmcp_tasks.stores.sqlite import schema as sqlite_schema


async def bench_latency(kind: str, cfg: Config) -> dict[str, Any]:
    """Metric 1: sync vs. task-creating `tools/call`, one caller, interleaved sample by sample.

    One server per store, all up at once. Each round: a sync call (on the first
    store's server; the store plays no part in it) and one creation per store, in
    an order that rotates round by round (`rotated`). After each creation the
    harness waits, untimed, until the task's run has finished, so every sample
    starts from an idle server.
    """
    async with servers(kind, cfg.stores_for(kind)) as up:
        ref = next(iter(up.values()))[1]
        for _ in range(cfg.warmup):
            await sync_call(ref.send)
            for server, conn in up.values():
                await drain(server, await create_task(conn.send))
        gc.collect()
        sync_ns: list[int] = []
        create_ns: dict[str, list[int]] = {store: [] for store in up}
        for i in range(cfg.latency_samples):
            for store in rotated([None, *up], i):
                if store is None:
                    sync_ns.append(await timed(lambda: sync_call(ref.send), ref, "sync"))
                    continue
                server, conn = up[store]
                created: list[str] = []
                create_ns[store].append(
                    await timed(
                        lambda c=created, s=conn.send: append_to(c, create_task(s)),
                        conn,
                        f"create_{store}",
                    )
                )
                await drain(server, created[0])
        server_times = server_side(*(conn for _, conn in up.values()))
    out: dict[str, Any] = {
        "sync": summary(sync_ns),
        "stores": {store: {"create": summary(ns)} for store, ns in create_ns.items()},
    }
    if server_times:
        out["server_side"] = server_times
    return out


async def fill_store(server: FastMCP, count: int, template: TaskRecord) -> tuple[float, list[str]]:
    """Insert `count` completed tasks directly into the store; (seconds taken, their ids).

    Memory store: each record is what a completed run leaves behind (the store's
    `create`, then `transition(..., "completed", result=...)`), with its own copy
    of a real task's result. SQLite store: rows equal to `template` (a task run
    through the wire) but for id and times, written in one transaction on a
    connection of the harness's own (`executemany` of the store's INSERT). Redis
    store: the same records through the store's own `create` (its Lua script and
    argument encoding), pipelined 1,000 at a time (`redis_fill`). PostgreSQL store:
    rows equal to `template` but for id and times, encoded by the store's own
    `schema.to_params`, in one `executemany` transaction on a connection of the
    harness's own, counted in its retained-task count (`pg.postgres_fill`).
    """
    ext = extension(server)
    store = ext.store
    ids = [secrets.token_urlsafe(24) for _ in range(count)]
    start = time.perf_counter()
    if store_kind(server) == "redis":
        await redis_fill(store, ids, template)
        return time.perf_counter() - start, ids
    if store_kind(server) == "postgres":
        await pg.postgres_fill(store, ids, template)
        return time.perf_counter() - start, ids
    path = sqlite_path(server)
    if path is not None:

        def insert() -> None:
            rows = []
            for task_id in ids:
                now = time.time()
                record = replace(
                    template, task_id=task_id, created_at=now, updated_at=now, terminal_at=now
                )
                rows.append(sqlite_schema.to_row(record))
            with contextlib.closing(sqlite3.connect(path, timeout=30, isolation_level=None)) as db:
                db.execute("BEGIN IMMEDIATE")
                db.executemany(sqlite_schema.INSERT_TASK, rows)
                db.execute("COMMIT")

        await anyio.to_thread.run_sync(insert)
        return time.perf_counter() - start, ids
    result = template.result
    assert result is not None
    text = json.dumps(result)
    for task_id in ids:
        now = time.time()
        record = TaskRecord(
            task_id=task_id,
            tool=TOOL,
            status="working",
            created_at=now,
            updated_at=now,
            arguments={},
            poll_interval_ms=5000,
            retention_ms=ext.retention_ms,
        )
        await store.create(record)
        await store.transition(record.task_id, "completed", result=json.loads(text))
    return time.perf_counter() - start, ids


async def redis_fill(store: Any, ids: list[str], template: TaskRecord) -> None:
    """Create a completed copy of `template` per id in a Redis store, 1,000 at a time.

    The creates of one chunk are made together: the store's script batching
    (`stores.redis.batching`) sends the calls made while one is on its way in one
    round trip, so a chunk takes a few round trips, not a thousand.
    """

    async def one(task_id: str) -> None:
        now = time.time()
        copy = replace(template, task_id=task_id, created_at=now, updated_at=now, terminal_at=now)
        assert await store.create(copy) is None

    for start in range(0, len(ids), 1000):
        await asyncio.gather(*(one(task_id) for task_id in ids[start : start + 1000]))


async def make_completed(server: FastMCP, send: Send, count: int) -> list[str]:
    """Create `count` tasks through the wire, each run to completion."""
    ids = []
    for _ in range(count):
        task_id = await create_task(send)
        await drain(server, task_id)
        ids.append(task_id)
    return ids


async def bench_get(kind: str, cfg: Config) -> dict[str, Any]:
    """Metric 2: `tasks/get` of completed tasks on servers retaining few and many tasks.

    Per store, one server retaining `retained_small` tasks and one retaining
    `retained_large`; every server is up at once and the samples are
    interleaved (each round a sync call on the first small server and, per store,
    a get on its small server and one on its large server, in an order that
    rotates round by round), so the ratios compare like with like even when the
    machine's load drifts.
    """
    rng = random.Random(2663)
    large_max = max(200_000, cfg.retained_large + 1000)
    async with (
        servers(kind, cfg.stores_for(kind)) as small_up,
        servers(kind, cfg.stores_for(kind), large_max) as large_up,
    ):
        ref = next(iter(small_up.values()))[1]
        stores: dict[str, dict[str, Any]] = {}
        pick: dict[tuple[str, str], list[str]] = {}
        for store in small_up:
            (small_server, small), (large_server, large) = small_up[store], large_up[store]
            small_ids = await make_completed(small_server, small.send, cfg.retained_small)
            wire_ids = await make_completed(large_server, large.send, min(100, cfg.retained_large))
            record = await extension(large_server).store.get(wire_ids[0])
            assert record is not None and record.status == "completed", record
            fill_s, filled = await fill_store(
                large_server, cfg.retained_large - retained(large_server), record
            )
            await quiet(large_server)
            all_large = wire_ids + filled
            pick[store, "small"] = [rng.choice(small_ids) for _ in range(cfg.get_ids)]
            pick[store, "large"] = [rng.choice(all_large) for _ in range(cfg.get_ids)]
            del all_large, filled
            stores[store] = {
                "retained_small": retained(small_server),
                "retained_large": retained(large_server),
                "fill_seconds": round(fill_s, 2),
            }
            if sqlite_path(large_server) is not None:
                stores[store]["db_mib_large"] = db_mib(large_server)
            if store == "redis":  # the whole Redis server, every store of the run
                stores[store]["redis_used_mib_large"] = redis_used_mib()
            if store == "postgres":  # the large server's tasks table, indexes included
                stores[store]["postgres_mib_large"] = pg.postgres_mib(extension(large_server).store)
        sends = {
            (store, size): up[store][1]
            for store in small_up
            for size, up in (("small", small_up), ("large", large_up))
        }
        for i in range(cfg.warmup):
            await sync_call(ref.send)
            for key, conn in sends.items():
                await get_task(conn.send, pick[key][i % cfg.get_ids])
        gc.collect()
        samples: dict[Any, list[int]] = {"sync": [], **{key: [] for key in sends}}
        for i in range(cfg.get_samples):
            for key in rotated(["sync", *sends], i):
                if key == "sync":
                    samples["sync"].append(await timed(lambda: sync_call(ref.send), ref, "sync"))
                    continue
                conn, task_id = sends[key], pick[key][i % cfg.get_ids]
                samples[key].append(
                    await timed(
                        lambda t=task_id, s=conn.send: get_task(s, t),
                        conn,
                        f"get_{key[1]}_{key[0]}",
                    )
                )
        server_times = server_side(*(c for _, c in [*small_up.values(), *large_up.values()]))
    for key in sends:
        stores[key[0]][key[1]] = summary(samples[key])
    return {
        **({"server_side": server_times} if server_times else {}),
        "distinct_ids_sampled": cfg.get_ids,
        "sync_reference": summary(samples["sync"]),
        "stores": stores,
    }


async def bench_throughput(kind: str, cfg: Config) -> dict[str, Any]:
    """Metric 3: calls/s with `concurrency` callers: sync calls, task creations (no
    polling) and end-to-end tasks (create, poll until completed), per store.

    Each run kind does `throughput_calls` in two halves, in palindrome order (sync,
    creation per store, tasks per store, then the same backwards), so a linear
    drift of the machine's speed cancels out. After a creation run the harness
    waits, untimed, until every created task has been recorded as completed.
    """
    poll_sleep = cfg.poll_sleep_ms / 1000
    n, c = cfg.throughput_calls, cfg.concurrency
    half = (n // 2, n - n // 2)

    async def sync_job(send: Send) -> None:
        await sync_call(send)

    async def create_job(send: Send) -> None:
        await create_task(send)

    async def task_job(send: Send) -> int:
        return await run_task(send, poll_sleep)

    async with servers(kind, cfg.stores_for(kind)) as up:
        ref = next(iter(up.values()))[1]
        warm = max(c, cfg.warmup)
        await fan_out(ref, warm, c, sync_job)
        for server, conn in up.values():
            await fan_out(conn, warm, c, create_job)
            await settle(server)
            await fan_out(conn, warm, c, task_job)
            await quiet(server)
        order: list[tuple[str, str | None]] = [("sync", None)]
        order += [("create", store) for store in up] + [("task", store) for store in up]
        seconds: dict[tuple[str, str | None], float] = {}
        polls: dict[str, list[int]] = {store: [] for store in up}
        settled: dict[str, float] = {store: 0.0 for store in up}
        for part, runs in enumerate((order, order[::-1])):
            for run, store in runs:
                server, conn = up[store] if store is not None else (None, ref)
                job = {"sync": sync_job, "create": create_job, "task": task_job}[run]
                took, results = await fan_out(conn, half[part], c, job)
                seconds[run, store] = seconds.get((run, store), 0.0) + took
                if run == "task" and store is not None:
                    polls[store] += results
                if server is not None and store is not None:
                    if run == "create":
                        settled[store] += await settle(server)
                    else:
                        await quiet(server)
        db = {store: db_mib(server) for store, (server, _) in up.items()}
    return {
        "calls": n,
        "concurrency": c,
        "poll_sleep_ms": cfg.poll_sleep_ms,
        "sync_seconds": seconds["sync", None],
        "sync_tps": n / seconds["sync", None],
        "stores": {
            store: {
                "create_seconds": seconds["create", store],
                "create_tps": n / seconds["create", store],
                "settle_seconds_after_creation": round(settled[store], 3),
                "task_seconds": seconds["task", store],
                "task_tps": n / seconds["task", store],
                "gets_per_task_mean": sum(polls[store]) / len(polls[store]),
                "gets_per_task_max": max(polls[store]),
                **({"db_mib": db[store]} if db[store] is not None else {}),
            }
            for store in up
        },
    }
