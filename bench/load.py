"""fastmcp-tasks load test (issue 8): 1,000 tasks kept in flight for 60 s per store, with 50
pollers and 10 subscribers; reports errors, lost and duplicated tasks, `tasks/get` latency
(p50/p99, also as a ratio to a synchronous `tools/call` measured under the same load) and
peak memory of the server process.

Run from the repo root (bounded, loopback only; not part of pytest or CI):

    .venv/bin/python -m bench.load            # full run: 3 stores x (60 s + drain), ~5 min
    .venv/bin/python -m bench.load --quick    # smoke run: 10 s, 200 tasks per store

For each store (`memory://`; `sqlite:///` in a fresh temp dir; Redis under a fresh
`?prefix=` on `--redis-url`), the server (`bench/load_server.py`) runs as a subprocess: a
real uvicorn Streamable HTTP server on a free 127.0.0.1 port, `TasksExtension(concurrency=
--concurrency)`. This process generates the load (`bench/load_drive.py`), samples the
server's RSS (with its children) and its own every 0.25 s, prints a table and writes JSON
to bench/results/load.json. See bench/README.md, "Load test".
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

if __package__ in (None, ""):  # `python bench/load.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import server as bench_server
from bench.load_drive import Driver, Load
from bench.load_wire import Caller, pct_ms, summary
from bench.proto import free_port
from bench.report import machine

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "bench" / "results" / "load.json"
_live: list[subprocess.Popen[bytes]] = []


@atexit.register
def _kill_servers() -> None:
    """Last resort (an exception or Ctrl-C on the way out): no server outlives the harness."""
    for proc in _live:
        if proc.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)


class Server:
    """`bench.load_server` in a session of its own; output to a temporary log file."""

    def __init__(self, url: str, args: argparse.Namespace) -> None:
        self.port = free_port()
        self.log = tempfile.NamedTemporaryFile(prefix="bench-load-", suffix=".log")
        command = [
            sys.executable, "-m", "bench.load_server", "--url", url, "--port", str(self.port),
            "--concurrency", str(args.concurrency), "--poll-ms", str(args.poll_ms),
            "--progress-ms", str(args.progress_ms), *(["--gc-freeze"] if args.gc_freeze else []),
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            command, cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True
        )
        _live.append(self.proc)
        self.ps = psutil.Process(self.proc.pid)
        self.peak_rss = 0
        self.me = psutil.Process()
        self.client_peak_rss = 0

    def sample(self) -> None:
        """Record the server's RSS (its children included) and this process's."""
        with contextlib.suppress(psutil.Error):
            procs = [self.ps, *self.ps.children(recursive=True)]
            self.peak_rss = max(self.peak_rss, sum(p.memory_info().rss for p in procs))
        self.client_peak_rss = max(self.client_peak_rss, self.me.memory_info().rss)

    def output(self) -> str:
        return Path(self.log.name).read_text(errors="replace")[-3000:]

    async def ready(self, limit_s: float = 60) -> None:
        caller = Caller(self.port)
        deadline = time.monotonic() + limit_s
        try:
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"server exited ({self.proc.returncode}):\n{self.output()}")
                with contextlib.suppress(Exception):
                    await caller.call("tools/call", {"name": "ping", "arguments": {}}, False)
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError(f"server not ready in {limit_s} s:\n{self.output()}")
                await asyncio.sleep(0.1)
        finally:
            await caller.aclose()

    async def stats(self, runs: bool = False) -> dict[str, Any]:
        caller = Caller(self.port)
        try:
            params = {"name": "stats", "arguments": {"runs": runs}}
            result = await caller.call("tools/call", params, False)
            return result["structuredContent"]  # type: ignore[no-any-return]
        finally:
            await caller.aclose()

    def stop(self) -> int | None:
        """SIGTERM (uvicorn shuts down gracefully), SIGKILL to the group after 15 s."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self.log.close()
        return self.proc.returncode


def verdict(driver: Driver, ledger: dict[str, Any], verified: dict[str, Any]) -> dict[str, Any]:
    """Lost and duplicated tasks, from the client's records and the server's ledger."""
    rec = driver.rec
    runs: dict[str, list[str]] = ledger.get("runs") or {}
    statuses = [t.status for t in rec.tasks.values()]
    never_terminal = [i for i, t in rec.tasks.items() if t.terminal_at is None]
    not_completed = [i for i, t in rec.tasks.items() if t.terminal_at and t.status != "completed"]
    wrong = [i for i, t in rec.tasks.items() if t.status == "completed" and not t.ok]
    never_ran = [i for i in rec.tasks if i not in runs]
    ran_twice = [i for i, keys in runs.items() if len(keys) > 1]
    wrong_key = [i for i, keys in runs.items() if i in rec.tasks and rec.tasks[i].key not in keys]
    orphans = [i for i in runs if i not in rec.tasks]  # ran, but no create answer named it
    lost = set(never_terminal) | set(not_completed) | set(wrong)
    lost |= {i for i in never_ran if rec.tasks[i].status == "completed"}
    dup_listen = rec.listen["duplicate_terminal"]
    duplicated = len(rec.duplicate_ids) + len(ran_twice) + len(wrong_key) + dup_listen
    duplicated += verified["n_changed"]
    return {
        "created": len(rec.tasks),
        "completed": sum(1 for t in rec.tasks.values() if t.status == "completed" and t.ok),
        "statuses": {s: statuses.count(s) for s in sorted(set(statuses))},
        "lost": len(lost),
        "lost_detail": {
            "never_terminal": len(never_terminal),
            "not_completed": len(not_completed),
            "wrong_result": len(wrong),
            "completed_without_a_run": len([i for i in never_ran if i in lost]),
            "listen_missed_terminal": rec.listen["missed_terminal"],
            "examples": sorted(lost)[:10],
        },
        "duplicated": duplicated,
        "duplicated_detail": {
            "same_task_id_created_twice": len(rec.duplicate_ids),
            "tool_ran_twice": len(ran_twice),
            "ran_with_another_key": len(wrong_key),
            "listen_terminal_twice": dup_listen,
            "changed_after_terminal": verified["n_changed"],
            "examples": (rec.duplicate_ids + ran_twice + wrong_key)[:10],
        },
        "orphan_runs": len(orphans),
        "never_ran_not_completed": len([i for i in never_ran if i not in lost]),
        "executions": ledger.get("executions"),
        "outside_task_runs": ledger.get("outside_task"),
    }


async def run_store(store: str, args: argparse.Namespace, load: Load) -> dict[str, Any]:
    async with bench_server.store_url(store) as url:
        server = Server(url, args)
        try:
            await server.ready()
            driver = Driver(store, server.port, load, server.sample, server.stats)
            limit = load.duration + load.drain + load.max_ms / 1000 + 240
            async with asyncio.timeout(limit):  # the hard deadline of this store
                run = await driver.run()
                verified = await driver.verify()
                ledger = await server.stats(runs=True)
            server.sample()
        finally:
            code = await asyncio.to_thread(server.stop)
    rec = driver.rec
    # the server's ledger when the ramp ended and when the load window closed
    before, after = run.pop("at_settle"), run.pop("at_stop")
    window = after["monotonic"] - before["monotonic"]
    running_mean = (after["task_seconds"] - before["task_seconds"]) / window
    server_cpu = 100 * (after["cpu_seconds"] - before["cpu_seconds"]) / window
    client_cpu = 100 * (after["client_cpu"] - before["client_cpu"]) / window
    lat = {kind: summary(values) for kind, values in sorted(rec.samples.items())}
    ratios = {}
    for kind in ("get", "get_probe", "create"):
        for q in ("p50_ms", "p99_ms"):
            base = lat.get("sync", {}).get(q)
            mine = lat.get(kind, {}).get(q)
            ratios[f"{kind}_{q[:3]}/sync_{q[:3]}"] = (
                round(mine / base, 2) if base and mine else None
            )
    return {
        "store": store,
        **verdict(driver, ledger, verified),
        "errors": sum(rec.errors.values()),
        "errors_by_kind": dict(rec.errors.most_common(20)),
        "error_examples": rec.examples,
        "latency": lat,
        "ratios": ratios,
        "poll_lateness": {
            q: pct_ms(rec.poll_late_ns, n) for q, n in (("p50_ms", 50), ("p99_ms", 99))
        },
        "listen": dict(rec.listen),
        "listen_problems": rec.listen_problems,
        "gets_per_task": round(
            sum(t.polls for t in rec.tasks.values()) / max(1, len(rec.tasks)), 2
        ),
        "tasks_per_second": round(len(rec.tasks) / load.duration, 1),
        **run,
        "server_running_mean": round(running_mean, 1),
        "server_running_peak": ledger["peak_running"],
        "server_rss_peak_mib": round(server.peak_rss / 2**20, 1),
        "server_maxrss_mib": round(ledger["maxrss_mib"], 1),
        "client_rss_peak_mib": round(server.client_peak_rss / 2**20, 1),
        "server_loop_lag_ms": after["loop_lag_ms"],
        "server_gc": after["gc"],
        "server_gc_objects_at_end": ledger["objects"],
        "server_cpu_percent": round(server_cpu, 1),
        "client_cpu_percent": round(client_cpu, 1),
        "verify": verified,
        "server_exit_code": code,
    }


def table(results: list[dict[str, Any]]) -> str:
    head = ("store", "created", "completed", "errors", "lost", "dup", "get p50", "get p99",
            "sync p50", "sync p99", "create p99", "srv RSS MiB", "in flight",
            "running")  # fmt: skip
    rows = [head]
    for r in results:
        if "failure" in r:
            rows.append((r["store"], "FAILED: " + r["failure"][:60], *[""] * (len(head) - 2)))
            continue
        lat = r["latency"]

        def ms(kind: str, q: str, lat: dict[str, Any] = lat) -> str:
            value = lat.get(kind, {}).get(q)
            return "-" if value is None else f"{value:.1f}"

        rows.append((
            r["store"], str(r["created"]), str(r["completed"]), str(r["errors"]), str(r["lost"]),
            str(r["duplicated"]), ms("get", "p50_ms"), ms("get", "p99_ms"),
            ms("sync", "p50_ms"), ms("sync", "p99_ms"), ms("create", "p99_ms"),
            f"{r['server_rss_peak_mib']:.0f}", f"{r['in_flight_mean']}",
            f"{r['server_running_mean']}",
        ))  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["  ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines) + "\n(latencies in ms; in flight / running: mean tasks)"


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="smoke run: 10 s, 200 tasks")
    p.add_argument("--duration", type=float, help="seconds of load per store (60; quick 10)")
    p.add_argument("--tasks", type=int, help="tasks kept in flight (1000; quick 200)")
    p.add_argument("--pollers", type=int, default=50)
    p.add_argument("--subscribers", type=int, default=10)
    p.add_argument("--stores", default="memory,sqlite,redis")
    p.add_argument("--redis-url", default=bench_server.REDIS_URL)
    p.add_argument("--creators", type=int, default=20, help="concurrent creating callers")
    p.add_argument("--watch", type=int, default=20, help="tasks per listen stream")
    p.add_argument("--min-ms", type=int, help="shortest tool run (10000; quick 2000)")
    p.add_argument("--max-ms", type=int, help="longest tool run (30000; quick 5000)")
    p.add_argument("--poll-ms", type=int, help="the tool's pollIntervalMs (5000; quick 1000)")
    p.add_argument("--progress-ms", type=int, default=2000, help="progress step of the tool")
    p.add_argument("--probe-ms", type=int, default=50, help="pause between sync probes")
    p.add_argument("--concurrency", type=int, help="TasksExtension concurrency (= --tasks)")
    p.add_argument("--settle", type=float, help="ramp seconds left out of latencies (15; quick 3)")
    p.add_argument("--drain", type=float, default=60.0, help="longest wait for in-flight tasks")
    p.add_argument("--gc-freeze", action="store_true", help="server: gc.freeze() once up")
    p.add_argument("--output", type=Path, default=OUTPUT)
    args = p.parse_args(argv)
    args.duration = args.duration or (10.0 if args.quick else 60.0)
    args.tasks = args.tasks or (200 if args.quick else 1000)
    args.concurrency = args.concurrency or args.tasks
    if args.settle is None:
        args.settle = 3.0 if args.quick else 15.0
    # quick: shorter tasks polled more often, so that 10 s see several generations of them
    args.min_ms = args.min_ms or (2000 if args.quick else 10_000)
    args.max_ms = args.max_ms or (5000 if args.quick else 30_000)
    args.poll_ms = args.poll_ms or (1000 if args.quick else 5000)
    return args


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    load = Load(args.duration, args.tasks, args.pollers, args.subscribers, args.creators,
                args.watch, args.min_ms, args.max_ms, args.poll_ms, args.probe_ms, args.drain,
                args.settle)  # fmt: skip
    results = []
    for store in [s for s in args.stores.split(",") if s]:
        if store == "redis" and (why := bench_server.redis_answers(args.redis_url)):
            raise SystemExit(f"Redis does not answer at {args.redis_url}: {why}")
        print(f"[{store}] {args.tasks} tasks in flight for {args.duration:.0f} s ...", flush=True)
        try:
            results.append(await run_store(store, args, load))
        except Exception as exc:  # a store that fails (or hits its deadline) is reported
            results.append({"store": store, "failure": f"{type(exc).__name__}: {exc}"})
        print(table(results[-1:]).splitlines()[-2], flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    bench_server.REDIS_URL = args.redis_url
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # unwind like Ctrl-C
    load_before = os.getloadavg()
    try:
        results = asyncio.run(main_async(args))
    except KeyboardInterrupt:
        print("interrupted: servers stopped, nothing written", file=sys.stderr)
        return 130
    finally:  # any Redis key of this run still there (crash paths) is deleted
        keys_left = bench_server.redis_leftovers() if "redis" in args.stores else None
    print()
    print(table(results))
    ok = all(
        "failure" not in r and r["errors"] == 0 and r["lost"] == 0 and r["duplicated"] == 0
        for r in results
    )
    report = {
        "timestamp": datetime.now(UTC).isoformat(),
        "mode": "quick" if args.quick else "full",
        "machine": machine(),
        "config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "loadavg_1_5_15": {"before": load_before, "after": os.getloadavg()},
        "results": results,
        "redis_keys_left": keys_left,
        "all_ok": ok,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\n{'OK' if ok else 'PROBLEMS'}: errors, lost and duplicated tasks "
          f"{'all 0' if ok else 'not all 0'}; JSON in {args.output}")  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
