"""The scale-out phase, on Redis and on PostgreSQL: tasks of `sleeper`
(`bench/redis_app.py`) created through an in-process front end (`concurrency=0`) and
run by 1 and by 2 worker processes (`bench_scaleout`; one run: `_scaleout_once`, its
clock: `_scaleout_drive`).
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from fastmcp import FastMCP

from bench import pg
from bench.calls import call_probe, get_task, pct
from bench.config import Config
from bench.processes import Worker, cpu_seconds, live_workers, print_worker_logs
from bench.proto import TERMINAL, Conn, RpcError, Send
from bench.server import extension, redis_client, store_counts, store_kind, store_url
from bench.transports import TRANSPORTS

SLEEPER = "sleeper"  # the tool of bench/redis_app.py


_worker_logs = itertools.count(1)


async def _scaleout_once(
    server: FastMCP,
    conn: Conn,
    url: str,
    workers: int,
    tasks: int,
    cfg: Config,
    logs: Path,
    warmup: int = 0,
) -> dict[str, Any]:
    """Start `workers` worker processes, run `tasks` tasks through the front end, stop them.

    The clock runs from the first `tools/call` to the arrival of the last `completed`
    frame. `concurrency` callers create the tasks (no polling); every `watch_batch`
    created ids get a `subscriptions/listen` stream of their own on the front end,
    read until each of its tasks has sent a terminal frame. `warmup` tasks run the
    same way first, untimed (the front end's first creations and listens).
    """
    procs: list[Worker] = []
    try:
        t0 = time.perf_counter()
        for i in range(workers):
            log = logs / f"worker-{next(_worker_logs)}-of-{workers}-{i}.log"
            procs.append(Worker(url, cfg.worker_concurrency, cfg.scaleout_sleep_ms, log))
        for proc in procs:
            await proc.ready()
        startup_s = time.perf_counter() - t0
        if warmup:
            await _scaleout_drive(conn, warmup, cfg)
        await _scaleout_idle(server)
        gc.collect()
        kind = store_kind(server)
        cpu = cpu_seconds(procs, kind)
        drive = await _scaleout_drive(conn, tasks, cfg)
        cpu = {k: round(v - cpu[k], 3) for k, v in cpu_seconds(procs, kind).items()}
        await _scaleout_idle(server)
    finally:
        for proc in procs:  # SIGTERM to all first, then wait for each
            proc.terminate()
        stops = [await proc.stop() for proc in procs]
    ids = drive.pop("ids")
    wall_start = drive.pop("wall_start")
    records = _completed_records(server, ids)
    pids = {proc.proc.pid: i for i, proc in enumerate(procs)}
    per_worker = [0] * workers
    for owner, _, _ in records:
        per_worker[pids[int(owner.split(":")[1])]] += 1
    created = [c for _, c, _ in records]
    ended = [t for _, _, t in records]
    turnaround = sorted(int((t - c) * 1e9) for _, c, t in records)
    return {
        "workers": workers,
        "tasks": tasks,
        **drive,
        # from the task hashes (wall clock, every process on this host): the store's own
        # span and how long the last completion took to reach the listening client
        "store_span_seconds": max(ended) - min(created),
        "first_create_to_first_completed_seconds": min(ended) - min(created),
        "last_completed_to_observed_seconds": wall_start + drive["seconds"] - max(ended),
        "turnaround_ms_p50_max": [pct(turnaround, 50) / 1000, turnaround[-1] / 1e6],
        "tasks_per_worker": per_worker,
        # CPU seconds spent while the clock ran (a little past it for the workers)
        "cpu_seconds": cpu,
        "worker_startup_seconds": round(startup_s, 2),
        **({"warmup_tasks": warmup} if warmup else {}),
        "worker_stops": stops,
    }


async def _scaleout_idle(server: FastMCP) -> None:
    """Untimed: wait until the store's indexes hold no active and no queued task."""
    with anyio.fail_after(30):
        while (counts := store_counts(server))["active"] or counts["queued"]:  # noqa: ASYNC110
            await anyio.sleep(0.01)


def _completed_records(server: FastMCP, ids: list[str]) -> list[tuple[str, float, float]]:
    """Untimed: (lease owner `host:pid:token`, created_at, terminal_at) of each of `ids`,
    read from the task hashes (Redis) or rows (PostgreSQL); each must be `completed`."""
    if store_kind(server) == "postgres":
        rows = pg.postgres_records(extension(server).store, ids)
        assert len(rows) == len(ids), (len(rows), len(ids))
        assert {status for status, *_ in rows} == {"completed"}, {s for s, *_ in rows}
        return [(owner, created, ended) for _, owner, created, ended in rows]
    keys = extension(server).store.keys  # type: ignore[attr-defined]
    client = redis_client()
    out: list[tuple[str, float, float]] = []
    for start in range(0, len(ids), 1000):
        pipe = client.pipeline(transaction=False)
        for task_id in ids[start : start + 1000]:
            pipe.hmget(keys.task(task_id), "status", "lease_owner", "created_at", "terminal_at")
        for status, owner, created, ended in pipe.execute():
            assert status == "completed", status
            out.append((owner, float(created), float(ended)))
    return out


async def _scaleout_drive(conn: Conn, tasks: int, cfg: Config) -> dict[str, Any]:
    """Create `tasks` tasks with `concurrency` callers (no polling) and observe each one
    completed, through the front end, by `scaleout_observe`:

    - `poll`: `scaleout_pollers` pollers walk the created ids in creation order (poller
      j takes every j-th), each asking `tasks/get` for its oldest unfinished task and,
      while that one is not finished, again every `scaleout_poll_ms`. The queue is oldest
      first, so a task is mostly polled once or twice; the last completion is seen at
      most one interval late.
    - `listen`: every `watch_batch` created ids get a `subscriptions/listen` stream of
      their own, read until each of its tasks has sent a terminal frame.
    """
    remaining = tasks
    ids: list[str] = []
    pending: list[str] = []
    done: dict[str, tuple[int, str]] = {}  # task id -> (when seen, terminal status)
    frames = gets = 0
    interval = cfg.scaleout_poll_ms / 1000

    async def watch(task_ids: list[str]) -> None:
        nonlocal frames
        assert conn.listen is not None
        left = set(task_ids)
        async with conn.listen(task_ids) as stream:
            while left:  # in memory the listen answer may overtake the last frames
                stamp, message = await stream.next(limit_s=300)
                if message.get("method") == "notifications/tasks":
                    frames += 1
                    task = message["params"]
                    if task["status"] in TERMINAL and task["taskId"] in left:
                        left.discard(task["taskId"])
                        done[task["taskId"]] = (stamp, task["status"])
                elif "error" in message:
                    raise RpcError(f"listen failed: {message['error']}")

    async def poller(send: Send, j: int) -> None:
        nonlocal gets
        i = j
        while i < tasks:
            if i >= len(ids):  # not created yet
                await anyio.sleep(interval)
                continue
            with anyio.fail_after(300):
                task = await get_task(send, ids[i])
            gets += 1
            if task["status"] in TERMINAL:
                done[ids[i]] = (time.perf_counter_ns(), task["status"])
                i += cfg.scaleout_pollers
            else:
                await anyio.sleep(interval)

    async def creator(send: Send, group: Any) -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            task_id = await call_probe(send, SLEEPER, {})
            ids.append(task_id)
            if cfg.scaleout_observe == "listen":
                pending.append(task_id)
                if len(pending) >= cfg.watch_batch:
                    group.start_soon(watch, pending[:])
                    pending.clear()

    async with contextlib.AsyncExitStack() as stack:  # a channel per caller and poller
        sends = [
            await stack.enter_async_context(conn.channel())
            for _ in range(cfg.concurrency + cfg.scaleout_pollers)
        ]
        wall_start = time.time()
        start = time.perf_counter_ns()
        async with anyio.create_task_group() as group:
            if cfg.scaleout_observe == "poll":
                for j in range(cfg.scaleout_pollers):
                    group.start_soon(poller, sends[cfg.concurrency + j], j)
            async with anyio.create_task_group() as creators:
                for send in sends[: cfg.concurrency]:
                    creators.start_soon(creator, send, group)
            created_ns = time.perf_counter_ns() - start
            if pending:
                group.start_soon(watch, pending[:])
    last = max(stamp for stamp, _ in done.values())
    statuses = {status for _, status in done.values()}
    assert len(done) == tasks and statuses == {"completed"}, (len(done), statuses)
    seconds = (last - start) / 1e9
    streams = math.ceil(tasks / cfg.watch_batch)
    observed = (
        {"gets_per_task": gets / tasks}
        if cfg.scaleout_observe == "poll"
        else {"listen_streams": streams, "frames_per_task": frames / tasks}
    )
    return {
        "ids": ids,
        "wall_start": wall_start,
        "seconds": seconds,
        "tps": tasks / seconds,
        "create_seconds": created_ns / 1e9,
        **observed,
    }


async def bench_scaleout(cfg: Config, store: str = "redis") -> dict[str, Any]:
    """Scale-out on `store` (`redis` or `postgres`): `scaleout_tasks` tasks of `sleeper`
    (`await anyio.sleep(0.05)`) through an in-process front end (`concurrency=0`), run by
    1 and by 2 worker processes.

    Runs in `scaleout_order` (full: the palindrome 1, 2, 2, 1 workers, half the tasks
    each, so a linear drift cancels as in the throughput metric; quick: 1, 2, all the
    tasks each). Each run starts its workers (untimed; the first run then also runs
    warm-up tasks, untimed), the clock runs from the first create to the last
    completion seen on the listen streams, and its workers then get SIGTERM
    (SIGKILL after 15 s).
    """
    kind = cfg.scaleout_transport
    n = cfg.scaleout_tasks
    order = cfg.scaleout_order
    k = order.count(1)
    if sorted(set(order)) != [1, 2] or order.count(2) != k:
        raise SystemExit(f"--scaleout-order: 1 and 2 the same number of times, got {order}")
    parts = [n // k + (1 if j < n % k else 0) for j in range(k)]
    logs = Path(tempfile.mkdtemp(prefix="fastmcp-tasks-bench-workers-"))
    from bench.redis_app import build

    runs: list[dict[str, Any]] = []
    try:
        async with store_url(store) as url:
            server = build(url, concurrency=0, sleep_ms=cfg.scaleout_sleep_ms)
            async with TRANSPORTS[kind](server, listen=True) as conn:
                for part, workers in enumerate(order):
                    occurrence = order[:part].count(workers)
                    tasks = parts[occurrence]
                    warm = min(100, tasks // 2) if part == 0 else 0
                    runs.append(
                        await _scaleout_once(server, conn, url, workers, tasks, cfg, logs, warm)
                    )
                    print(
                        f"  {store} scale-out {workers} worker(s): {runs[-1]['tps']:.0f} tasks/s",
                        file=sys.stderr,
                    )
    except BaseException:
        print_worker_logs(logs)
        raise
    finally:
        shutil.rmtree(logs, ignore_errors=True)
    by: dict[int, dict[str, Any]] = {}
    for workers in (1, 2):
        mine = [r for r in runs if r["workers"] == workers]
        tasks, seconds = sum(r["tasks"] for r in mine), sum(r["seconds"] for r in mine)
        by[workers] = {"tasks": tasks, "seconds": round(seconds, 3), "tps": tasks / seconds}
    return {
        "store": store,
        "transport": kind,
        "tasks": n,
        "sleep_ms": cfg.scaleout_sleep_ms,
        "worker_concurrency": cfg.worker_concurrency,
        "callers": cfg.concurrency,
        "ceiling_tps_per_worker": cfg.worker_concurrency * 1000 / cfg.scaleout_sleep_ms,
        "order": order,
        "observed_by": (
            f"{cfg.scaleout_pollers} tasks/get pollers (every {cfg.scaleout_poll_ms:g} ms)"
            if cfg.scaleout_observe == "poll"
            else f"subscriptions/listen, {cfg.watch_batch} tasks per stream"
        ),
        "one_worker": by[1],
        "two_workers": by[2],
        "runs": runs,
        "workers_left": sum(1 for proc in live_workers if proc.poll() is None),
    }
