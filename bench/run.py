"""fastmcp-tasks benchmark: sync vs. task latency, tasks/get cost, throughput, memory,
input round trips, push (subscriptions/listen) vs. polling, and a progress flood.
Latency, tasks/get and throughput also run on the SQLite, Redis and PostgreSQL stores,
beside the memory store and interleaved with it (`--stores memory,sqlite,redis,postgres`;
Redis and PostgreSQL only when they answer), and a scale-out phase on Redis and on
PostgreSQL runs tasks through a `concurrency=0` front end on 1 and on 2 worker
processes (`python -m fastmcp_tasks worker bench/redis_app.py`).

Run from the repo root:

    .venv/bin/python -m bench.run            # full run (~6.5 min on 2 cores, every store)
    .venv/bin/python -m bench.run --quick    # smoke run (~55 s)

Prints a table and writes JSON to bench/results/latest.json. See bench/README.md.
This module is the command line only (`parse_args`, `config`, `run_all`, `main`); the
phases, transports and report are modules of their own (bench/README.md, "Code").

The harness speaks raw JSON-RPC (like tests/wire.py, but without its schema
validation, which would dominate the timings): in memory through
`fastmcp.Client`'s session dispatcher, and over Streamable HTTP to uvicorn on a
free 127.0.0.1 port, with a minimal keep-alive HTTP/1.1 client (`--http-client
httpx` for httpx). Client and server share one process and one event loop.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python bench/run.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import calls, pg, server, transports
from bench.config import Config
from bench.pg import postgres_answers
from bench.phases import bench_get, bench_latency, bench_throughput
from bench.phases_probe import bench_flood, bench_input, bench_push
from bench.processes import bench_memory, memory_child
from bench.report import machine, print_notes, print_table, ratios_and_rows, skipped_lines
from bench.scaleout import bench_scaleout
from bench.server import STORES, redis_answers, redis_leftovers
from bench.transports import TRANSPORTS

RESULTS = Path(__file__).resolve().parent / "results"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="smoke run (~55 s): 300 samples, 20,000 retained, 300 calls, 5,000 memory tasks, "
        "50 input rounds, 20 pushed and 5 polled tasks (HTTP only), 1 flood run, "
        "SQLite and Redis beside memory on the in-memory transport only, 300 scale-out tasks",
    )
    p.add_argument("--transports", default="memory,http", help="comma list of memory,http")
    p.add_argument(
        "--stores",
        help="task stores of the latency, tasks/get and throughput phases, each on its own "
        "server, interleaved (memory,sqlite,redis,postgres; redis only if it answers, else "
        "SKIPPED; postgres SKIPPED with the reason when it does not answer, even if listed); "
        "SQLite on a fresh temporary file, Redis under a fresh prefix, PostgreSQL in a fresh "
        "schema, per server; the scale-out phase runs on redis and on postgres when listed",
    )
    p.add_argument(
        "--postgres-url",
        default=pg.POSTGRES_URL,
        help=f"PostgreSQL for the postgres store and its scale-out ({pg.POSTGRES_URL}); each "
        "server uses a schema of its own and drops it afterwards",
    )
    p.add_argument(
        "--redis-url",
        default=server.REDIS_URL,
        help=f"Redis for the redis store and the scale-out ({server.REDIS_URL}); each server "
        "uses a prefix of its own and deletes its keys afterwards",
    )
    p.add_argument(
        "--scaleout-tasks",
        type=int,
        help="tasks of the Redis scale-out per worker count, split over its runs "
        "(2000; quick 300); 0 skips",
    )
    p.add_argument(
        "--scaleout-order",
        help="worker counts of the scale-out runs, in order (1,2,2,1; quick 1,2)",
    )
    p.add_argument(
        "--worker-concurrency", type=int, default=10, help="--concurrency of each worker (10)"
    )
    p.add_argument(
        "--scaleout-sleep-ms", type=float, default=50.0, help="how long each task sleeps (50)"
    )
    p.add_argument(
        "--scaleout-transport",
        choices=("memory", "http"),
        default="memory",
        help="transport between the harness and the in-process front end (memory)",
    )
    p.add_argument(
        "--scaleout-observe",
        choices=("poll", "listen"),
        default="poll",
        help="how the scale-out sees completions: pollers walking the ids in creation order "
        "(poll, default) or subscriptions/listen streams (listen)",
    )
    p.add_argument("--scaleout-pollers", type=int, default=2, help="scale-out pollers (poll; 2)")
    p.add_argument(
        "--scaleout-poll-ms",
        type=float,
        default=20.0,
        help="a poller's interval while its task is unfinished (poll; 20)",
    )
    p.add_argument(
        "--watch-batch",
        type=int,
        default=100,
        help="created tasks per subscriptions/listen stream (listen; 100)",
    )
    p.add_argument(
        "--store-transports",
        help="transports whose latency, tasks/get and throughput run on every --stores store "
        "(memory,http; quick: memory); the others use the memory store only",
    )
    p.add_argument("--warmup", type=int, help="warm-up iterations before each measurement (200)")
    p.add_argument(
        "--latency-samples", type=int, help="sequential samples of each call kind (2000)"
    )
    p.add_argument("--get-samples", type=int, help="tasks/get samples per retained size (2000)")
    p.add_argument(
        "--get-ids", type=int, default=50, help="distinct random task ids the gets cycle through"
    )
    p.add_argument("--retained-small", type=int, default=100)
    p.add_argument(
        "--retained-large",
        type=int,
        help="retained tasks for the large get run (100000; quick 20000)",
    )
    p.add_argument("--throughput-calls", type=int, help="calls per throughput run (2000)")
    p.add_argument("--concurrency", type=int, default=50, help="concurrent callers (50)")
    p.add_argument(
        "--poll-sleep-ms",
        type=float,
        default=0.0,
        help="sleep between tasks/get polls in the task throughput run (0: tight loop)",
    )
    p.add_argument(
        "--memory-tasks", type=int, help="tasks created for the memory metric (50000); 0 skips"
    )
    p.add_argument("--input-rounds", type=int, help="tasks/update round trips per transport (200)")
    p.add_argument("--push-tasks", type=int, help="tasks observed through listen (100)")
    p.add_argument(
        "--poll-tasks",
        type=int,
        help="tasks polled at the default pollIntervalMs, concurrently (20); 0 skips",
    )
    p.add_argument(
        "--poll-transports",
        help="transports that run the ~5 s polling baseline (memory,http; quick: http)",
    )
    p.add_argument(
        "--flood-updates", type=int, default=10_000, help="status messages of the flood task"
    )
    p.add_argument(
        "--flood-runs", type=int, help="flood runs with and without a subscriber, each (3)"
    )
    p.add_argument(
        "--http-client",
        choices=("raw", "httpx"),
        default="raw",
        help="HTTP client: a minimal keep-alive HTTP/1.1 client (default) or httpx",
    )
    p.add_argument(
        "--idempotency-keys",
        action="store_true",
        help="every task-creating tools/call carries an idempotency key, as our client sends",
    )
    p.add_argument("--output", type=Path, default=RESULTS / "latest.json")
    p.add_argument("--_memory-child", type=int, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def config(args: argparse.Namespace) -> Config:
    quick = args.quick

    def pick(value: int | None, full: int, fast: int) -> int:
        return value if value is not None else (fast if quick else full)

    redis_skipped = postgres_skipped = None
    if args.stores is None:  # the default: Redis and PostgreSQL too, if they answer
        stores = ["memory", "sqlite", "redis", "postgres"]
        why = redis_answers(server.REDIS_URL)
        if why is not None:
            stores.remove("redis")
            redis_skipped = f"{server.REDIS_URL} does not answer ({why})"
    else:
        stores = [s.strip() for s in args.stores.split(",") if s.strip()]
        why = redis_answers(server.REDIS_URL) if "redis" in stores else None
        if why is not None:
            raise SystemExit(f"--stores redis: {server.REDIS_URL} does not answer ({why})")
    if "postgres" in stores and (why := postgres_answers(pg.POSTGRES_URL)) is not None:
        stores.remove("postgres")  # said loudly, at the start and under the table
        postgres_skipped = f"{pg.POSTGRES_URL} does not answer ({why})"
    return Config(
        warmup=pick(args.warmup, 200, 50),
        latency_samples=pick(args.latency_samples, 2000, 300),
        get_samples=pick(args.get_samples, 2000, 300),
        get_ids=args.get_ids,
        retained_small=args.retained_small,
        retained_large=pick(args.retained_large, 100_000, 20_000),
        throughput_calls=pick(args.throughput_calls, 2000, 300),
        concurrency=args.concurrency,
        poll_sleep_ms=args.poll_sleep_ms,
        memory_tasks=pick(args.memory_tasks, 50_000, 5_000),
        transports=[t.strip() for t in args.transports.split(",") if t.strip()],
        stores=stores,
        redis_skipped=redis_skipped,
        postgres_skipped=postgres_skipped,
        scaleout_tasks=pick(args.scaleout_tasks, 2000, 300),
        scaleout_sleep_ms=args.scaleout_sleep_ms,
        scaleout_transport=args.scaleout_transport,
        worker_concurrency=args.worker_concurrency,
        watch_batch=args.watch_batch,
        scaleout_observe=args.scaleout_observe,
        scaleout_pollers=args.scaleout_pollers,
        scaleout_poll_ms=args.scaleout_poll_ms,
        scaleout_order=tuple(
            int(w) for w in (args.scaleout_order or ("1,2" if quick else "1,2,2,1")).split(",")
        ),
        store_transports=tuple(
            t.strip()
            for t in (args.store_transports or ("memory" if quick else "memory,http")).split(",")
            if t.strip()
        ),
        input_rounds=pick(args.input_rounds, 200, 50),
        push_tasks=pick(args.push_tasks, 100, 20),
        poll_tasks=pick(args.poll_tasks, 20, 5),
        poll_transports=tuple(
            t.strip()
            for t in (args.poll_transports or ("http" if quick else "memory,http")).split(",")
            if t.strip()
        ),
        flood_updates=args.flood_updates,
        flood_runs=pick(args.flood_runs, 3, 1),
    )


async def run_all(cfg: Config) -> dict[str, Any]:
    results: dict[str, Any] = {"transports": {}}
    unknown = sorted(set(cfg.stores) - set(STORES))
    if unknown or not cfg.stores:
        raise SystemExit(f"--stores: unknown or none {unknown} (known: {', '.join(STORES)})")
    for kind in cfg.transports:
        if kind not in TRANSPORTS:
            raise SystemExit(f"unknown transport {kind!r}")
        r = results["transports"][kind] = {}
        for name, fn in (
            ("latency", bench_latency),
            ("get", bench_get),
            ("throughput", bench_throughput),
            ("input", bench_input),
            ("push", bench_push),
            ("flood", bench_flood),
        ):
            t0 = time.perf_counter()
            r[name] = await fn(kind, cfg)
            r[name]["phase_seconds"] = round(time.perf_counter() - t0, 2)
            print(f"  {kind:6} {name:10} done in {r[name]['phase_seconds']:.1f} s", file=sys.stderr)
    for store, key in (("redis", "scaleout"), ("postgres", "postgres_scaleout")):
        if store in cfg.stores and cfg.scaleout_tasks > 0:
            t0 = time.perf_counter()
            results[key] = await bench_scaleout(cfg, store)
            results[key]["phase_seconds"] = round(time.perf_counter() - t0, 2)
            seconds = results[key]["phase_seconds"]
            print(f"  {store} scale-out done in {seconds:.1f} s", file=sys.stderr)
    return results


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args._memory_child is not None:
        print(json.dumps(asyncio.run(memory_child(args._memory_child, args.concurrency))))
        return
    # SIGTERM unwinds like Ctrl-C, so worker processes are stopped and Redis keys deleted
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    transports.HTTP_CLIENT = args.http_client
    calls.KEYED = args.idempotency_keys
    server.REDIS_URL = args.redis_url
    pg.POSTGRES_URL = args.postgres_url
    cfg = config(args)
    started = time.perf_counter()
    load_before = os.getloadavg()
    print(f"fastmcp-tasks bench ({'quick' if args.quick else 'full'}): {cfg}", file=sys.stderr)
    for line in skipped_lines(cfg):
        print(f"\n{line}\n", file=sys.stderr)
    left = schemas_left = 0
    try:
        results = asyncio.run(run_all(cfg))
    finally:
        if "redis" in cfg.stores:  # every store cleared its keys; this only makes sure
            left = redis_leftovers()
            if left:
                print(f"deleted {left} Redis keys left under {server.REDIS_RUN}-*", file=sys.stderr)
        if "postgres" in cfg.stores:  # every server dropped its schema; this only makes sure
            schemas_left = pg.postgres_leftovers()
            if schemas_left:
                print(f"dropped {schemas_left} schemas left: {pg.POSTGRES_RUN}_*", file=sys.stderr)
    if "redis" in cfg.stores:
        results["redis_keys_left"] = left
    if "postgres" in cfg.stores:
        results["postgres_schemas_left"] = schemas_left
    if cfg.memory_tasks > 0:
        t0 = time.perf_counter()
        results["memory"] = bench_memory(cfg)
        results["memory"]["transport"] = "memory (fresh interpreter; RSS from /proc/self/statm)"
        print(f"  memory done in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    ratios, rows = ratios_and_rows(results)
    report: dict[str, Any] = {
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "mode": "quick" if args.quick else "full",
        "machine": machine(),
        "config": {
            **cfg.__dict__,
            "http_client": transports.HTTP_CLIENT,
            "redis_url": server.REDIS_URL,
            "postgres_url": pg.POSTGRES_URL,
        },
        "loadavg_1_5_15": {"before": load_before, "after": os.getloadavg()},
        "results": results,
        "ratios": ratios,
        "all_pass": all(
            v["pass"] for group in ratios.values() for v in group.values() if v["pass"] is not None
        ),
        "total_seconds": round(time.perf_counter() - started, 1),
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print()
    print_table(rows)
    print()
    print_notes(cfg, results, transports.HTTP_CLIENT, report["total_seconds"], args.output)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
