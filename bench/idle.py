"""fastmcp-tasks idle cost: the store work an idle task engine does, per second.

Run from the repo root (~50 s; loopback only; not part of pytest or CI):

    .venv/bin/python -m bench.idle                 # SQLite, Redis, PostgreSQL; 10 s windows
    .venv/bin/python -m bench.idle --seconds 30    # longer windows
    .venv/bin/python -m bench.idle --stores sqlite,postgres

For each store (SQLite: a fresh file in a temp dir; Redis: a `redis-server` of this run's
own on a free port, `--save '' --appendonly no`; PostgreSQL: a `postgres` of this run's
own, `log_statement=all` (`bench/idle_pg.py`); each stopped by pid at the end), two idle
processes are measured one after the other, in this process:

- **server**: a FastMCP server with `TasksExtension(url=...)` and one `task=True` tool,
  its lifespan entered by `async with Client(mcp)` (in memory), no task anywhere;
- **worker**: the same server run as `fastmcp-tasks worker` runs it (`cli.run_worker`:
  `concurrency` >= 1, `server._lifespan_manager()`), no front end, no task.

Each settles `--settle` s (2), then the store work of a `--seconds` window (10) is counted
(`bench/idle_count.py`): Redis round trips and commands at the client (redis-py's asyncio
connection wrapped), cross-checked with the private server's `INFO`; SQLite write-lock
takes (`BEGIN IMMEDIATE`), statements and `PRAGMA data_version` polls (a trace callback on
every `sqlite3` connection); PostgreSQL statements the private server logged (each one
round trip), beside those psycopg's cursors sent. Beside it, a synchronous `tools/call`
reference: the p50 of `--calls` (200) calls of a plain tool through `Client(mcp)` in
memory. Targets per row: <= 1 round trip/s (Redis), <= 1 write-lock take/s (SQLite),
<= 1 statement/s (PostgreSQL). Prints a table, writes bench/results/idle.json; exits
non-zero only on errors, not on FAIL. See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python bench/idle.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fastmcp import Client, FastMCP

from bench.idle_count import EngineLog, PrivateRedis, RedisTap, SqliteTap, delta
from bench.idle_pg import PgTap, PrivatePostgres, pg_rates
from bench.report import machine
from fastmcp_tasks import TasksExtension
from fastmcp_tasks.wire import TASKS_EXTENSION_ID

OUTPUT = Path(__file__).resolve().parent / "results" / "idle.json"
TARGET_PER_S = 1.0
WORKER_CONCURRENCY = 10
#: Bytes of our `INFO stats commandstats` (`PrivateRedis.counters`), as Redis reads them.
INFO_BYTES = len(b"*3\r\n$4\r\nINFO\r\n$5\r\nstats\r\n$12\r\ncommandstats\r\n")


def make_server(url: str) -> FastMCP:
    """One `task=True` tool (never called here) and `ping`, the sync reference tool."""
    mcp = FastMCP("bench-idle")
    mcp.add_extension(TasksExtension(url=url))

    @mcp.tool(task=True)
    async def work(seconds: float = 1.0) -> str:
        return "done"

    @mcp.tool
    def ping() -> str:
        return "pong"

    return mcp


@contextlib.asynccontextmanager
async def idle(process: str, url: str) -> AsyncIterator[None]:
    """An idle server (lifespan entered by an in-memory client) or an idle worker."""
    server = make_server(url)
    if process == "server":
        async with Client(server):
            yield
        return
    extension = server._extensions[TASKS_EXTENSION_ID]  # as `cli.run_worker` does
    if not extension.store.durable:
        raise SystemExit(f"{url}: a worker needs a durable store")
    extension.concurrency = WORKER_CONCURRENCY
    extension.shutdown_grace = 0.0
    async with server._lifespan_manager():
        yield


async def sync_reference(calls: int, warmup: int = 20) -> dict[str, Any]:
    """p50/p99 of `calls` sequential `ping` calls through `Client(mcp)` (memory store)."""
    samples: list[int] = []
    async with Client(make_server("memory://")) as client:
        for i in range(warmup + calls):
            t0 = time.perf_counter_ns()
            result = await client.call_tool("ping", {})
            if i >= warmup:
                samples.append(time.perf_counter_ns() - t0)
            if result.is_error:
                raise RuntimeError(f"ping failed: {result}")
    samples.sort()

    def pct(q: float) -> float:
        return samples[min(len(samples) - 1, max(0, round(q * len(samples)) - 1))] / 1e6

    p50 = pct(0.5)
    return {"calls": calls, "p50_ms": p50, "p99_ms": pct(0.99), "calls_per_s": 1000 / p50}


class Measure:
    """Snapshots of the taps (and the private Redis or PostgreSQL) taken at the same moment."""

    def __init__(self, store: str, tap: Any, server: PrivateRedis | PrivatePostgres | None) -> None:
        self.store, self.tap, self.server = store, tap, server

    def read(self) -> dict[str, Any]:
        # The synchronous INFO blocks the event loop, so nothing runs between the readings.
        client = self.tap.snapshot()
        server = self.server.counters() if self.server is not None else None
        return {"client": client, "server": server, "t": time.perf_counter()}

    async def case(self, process: str, url: str, settle: float, seconds: float) -> dict[str, Any]:
        start = self.tap.snapshot()
        with EngineLog().attached() as log:
            async with idle(process, url):
                await asyncio.sleep(settle)
                before = self.read()
                await asyncio.sleep(seconds)
                after = self.read()
        # the tap must have seen the store at work (opening it, at least): else it is blind
        seen = delta(start, self.tap.snapshot())
        if not seen.get("commands", seen.get("connections_opened")):
            raise RuntimeError(f"{self.store} {process}: the tap saw no store traffic at all")
        elapsed = after["t"] - before["t"]
        row: dict[str, Any] = {"store": self.store, "process": process, "seconds": elapsed}
        row["client"] = delta(before["client"], after["client"])
        row["client"].pop("connections_opened", None)
        row["whole_case"] = seen  # lifespan entry and exit included
        row["engine_log"] = log.records
        row["engine_errors"] = len(log.records)  # warnings too: a store call that failed
        if after["server"] is not None:
            row["server"] = delta(before["server"], after["server"])
        return row | rates(self.store, row, elapsed)


def rates(store: str, row: dict[str, Any], elapsed: float) -> dict[str, Any]:
    """Per-second figures of one case; the headline one is compared with the target."""
    client = row["client"]
    if store == "postgres":
        return pg_rates(row, elapsed)
    if store == "sqlite":
        return {
            "metric": "write-lock takes",
            "per_s": client["write_locks"] / elapsed,
            "ops_per_s": client["statements"] / elapsed,
            "check_per_s": client["data_version_polls"] / elapsed,
        }
    server = row["server"]
    own = server["by_command"].get("info", 0)  # our own INFO readings
    server_commands = server["total_commands_processed"] - own
    server_by = {k: v for k, v in server["by_command"].items() if k != "info"}
    client_by: dict[str, int] = {}
    for name, count in client["by_command"].items():
        key = name.split()[0]
        client_by[key] = client_by.get(key, 0) + count
    # every command the client sent, as the server counted it (scripts' inner ones apart)
    top_level = sum(server_by.get(k, 0) for k in client_by)
    calls = {
        k: [client_by.get(k, 0), server_by.get(k, 0)] for k in sorted({*client_by, *server_by})
    }
    server_bytes = server["net_input_bytes"] - own * INFO_BYTES
    # a blocking XREAD is counted by the server when it returns: one may straddle an edge
    agree = server_bytes == client["bytes_sent"] and all(
        abs(calls[k][0] - calls[k][1]) <= (1 if k == "xread" else 0) for k in client_by
    )
    return {
        "metric": "round trips",
        "per_s": client["round_trips"] / elapsed,
        "ops_per_s": client["commands"] / elapsed,
        "check_per_s": server_commands / elapsed,
        "server_top_level_per_s": top_level / elapsed,
        "server_inner_per_s": (server_commands - top_level) / elapsed,
        "calls_client_vs_server": calls,
        "bytes_client_vs_server": [client["bytes_sent"], server_bytes],
        "crosscheck_ok": agree,
    }


async def run_store(store: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    if store == "sqlite":
        tap = SqliteTap()
        tap.install()  # before any store of the run opens a connection
        try:
            for process in ("server", "worker"):
                directory = tempfile.mkdtemp(prefix="fastmcp-tasks-idle-")
                try:
                    url = f"sqlite:///{directory}/tasks.db"
                    rows.append(
                        await Measure(store, tap, None).case(
                            process, url, args.settle, args.seconds
                        )
                    )
                finally:
                    shutil.rmtree(directory, ignore_errors=True)
        finally:
            tap.uninstall()
        return rows
    if store == "postgres":
        server, tap = PrivatePostgres(), PgTap()
        tap.install()
        try:
            for n, process in enumerate(("server", "worker"), 1):
                url = f"{server.url}?schema=fastmcp_tasks_idle_{os.getpid()}_{n}"
                rows.append(
                    await Measure(store, tap, server).case(process, url, args.settle, args.seconds)
                )
                rows[-1]["postgres_version"] = server.version
        finally:
            tap.uninstall()
            server.stop()
        return rows
    try:  # only to label EVALSHA calls by script; the counts do not depend on it
        from fastmcp_tasks.stores.redis.scripts import SCRIPTS
    except ImportError:
        SCRIPTS = {}

    redis = PrivateRedis(args.redis_server)
    rtap = RedisTap(SCRIPTS)
    rtap.install()
    try:
        for n, process in enumerate(("server", "worker"), 1):
            url = f"{redis.url}?prefix=fastmcp-tasks-idle-{os.getpid()}-{n}"
            rows.append(
                await Measure(store, rtap, redis).case(process, url, args.settle, args.seconds)
            )
            rows[-1]["redis_version"] = redis.version
    finally:
        rtap.uninstall()
        redis.stop()
    return rows


def table(rows: list[dict[str, Any]], sync: dict[str, Any]) -> list[tuple[str, ...]]:
    out = []
    for r in rows:
        share = r["per_s"] / sync["calls_per_s"]
        out.append(
            (
                r["store"],
                r["process"],
                r["metric"],
                f"{r['per_s']:.1f}",
                f"{r['ops_per_s']:.1f}",
                f"{r['check_per_s']:.1f}",
                f"{share:.4f}",
                f"<= {TARGET_PER_S:g}/s",
                status(r),
            )
        )
    return out


def status(row: dict[str, Any]) -> str:
    """PASS/FAIL against the target; ERROR when the engine logged a warning or an error."""
    if row["engine_errors"]:
        return f"ERROR ({row['engine_errors']} engine warnings/errors logged)"
    return "PASS" if row["per_s"] <= TARGET_PER_S else "FAIL"


def print_table(rows: list[tuple[str, ...]]) -> None:
    header = ("store", "process", "metric", "/s", "cmds|stmts /s", "check /s", "÷ sync/s")
    header += ("target", "status")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.idle",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--seconds", type=float, default=10.0, help="counting window per case (10)")
    p.add_argument("--settle", type=float, default=2.0, help="seconds before the window (2)")
    p.add_argument("--stores", default="sqlite,redis,postgres", help="sqlite,redis,postgres")
    p.add_argument("--calls", type=int, default=200, help="sync tools/call reference (200)")
    p.add_argument("--redis-server", default="redis-server", help="the redis-server binary")
    p.add_argument("--output", type=Path, default=OUTPUT, help=f"JSON file ({OUTPUT.name})")
    args = p.parse_args(argv)
    args.stores = [s for s in args.stores.split(",") if s]
    if unknown := set(args.stores) - {"sqlite", "redis", "postgres"}:
        p.error(f"unknown store(s): {', '.join(sorted(unknown))}")
    return args


async def run_all(args: argparse.Namespace) -> dict[str, Any]:
    sync = await sync_reference(args.calls)
    rows: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}
    for store in args.stores:
        t0 = time.perf_counter()
        try:
            rows += await run_store(store, args)
        except FileNotFoundError as exc:  # no redis-server/postgres: said loudly, not an error
            skipped[store] = str(exc)
            print(f"*** SKIPPED {store}: {exc} ***", file=sys.stderr)
            continue
        print(f"  {store} done in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return {"sync": sync, "rows": rows, "skipped": skipped}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    started = time.perf_counter()
    print(f"fastmcp-tasks idle bench: {', '.join(args.stores)}", file=sys.stderr)
    results = asyncio.run(run_all(args))
    sync, rows = results["sync"], results["rows"]
    for r in rows:
        r["target_per_s"] = TARGET_PER_S
        r["pass"] = r["per_s"] <= TARGET_PER_S and not r["engine_errors"]
        r["status"] = status(r)
        r["per_sync_call_rate"] = r["per_s"] / sync["calls_per_s"]
    report = {
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "config": {k: v for k, v in vars(args).items() if k != "output"},
        "worker_concurrency": WORKER_CONCURRENCY,
        "loadavg_1_5_15": os.getloadavg(),
        **results,
        "all_pass": all(r["pass"] for r in rows),
        "total_seconds": round(time.perf_counter() - started, 1),
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print()
    print(
        f"Sync reference: tools/call p50 {sync['p50_ms']:.3f} ms, p99 {sync['p99_ms']:.3f} ms "
        f"({sync['calls']} calls, Client(mcp) in memory) = {sync['calls_per_s']:,.0f} calls/s "
        "for one sequential caller."
    )
    print()
    print_table(table(rows, sync))
    print()
    print(f"Idle for {args.settle:g} s, then counted over {args.seconds:g} s; no task anywhere.")
    print("/s: Redis round trips (commands or pipelines sent, a blocking XREAD = one), SQLite")
    print("BEGIN IMMEDIATE (write-lock takes) or PostgreSQL statements the server logged.")
    print("cmds|stmts: commands sent (Redis), statements run (SQLite) or sent by psycopg cursors")
    print("(PostgreSQL). check: Redis commands the private server processed (INFO, ours out;")
    print("Lua-inner ones included), SQLite PRAGMA data_version polls, or PostgreSQL statements")
    print("of the store's LISTEN connection.")
    print("÷ sync/s: the /s figure over the sync calls/s above (one caller).")
    for r in rows:
        if r.get("crosscheck_ok") is False:
            print(f"*** {r['store']} {r['process']}: client and server counts differ ***")
    if any(r.get("crosscheck_ok") for r in rows if r["store"] == "redis"):
        print("Redis cross-check: client commands and bytes = the private server's, per row.")
    if any(r.get("crosscheck_ok") for r in rows if r["store"] == "postgres"):
        print("PostgreSQL cross-check: the server ran at least the statements psycopg sent.")
    for store, why in results["skipped"].items():
        print(f"*** SKIPPED {store}: {why} ***")
    print(f"Total {report['total_seconds']} s; JSON written to {args.output}")
    if broken := [f"{r['store']} {r['process']}" for r in rows if r["engine_errors"]]:
        print(
            f"error: the engine logged warnings or errors while idle ({', '.join(broken)}):",
            file=sys.stderr,
        )
        for r in rows:
            for record in r["engine_log"][:3]:
                print(f"  {r['store']} {r['process']}: {record}", file=sys.stderr)
        raise SystemExit(1)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
