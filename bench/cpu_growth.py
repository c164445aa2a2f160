"""Whether a task costs more CPU as the store fills: `python -m bench.cpu_growth`.

`bench.cpu` measures a task on a fresh store, 1,000 tasks in. PostgreSQL is the server at
`bench.pg.POSTGRES_URL`, as for `bench.cpu`. Here a front end (Streamable
HTTP, `concurrency=0`, `python -m bench.cpu_app`) and one worker process run on a fresh store
per store kind for `--phases` phases of `--seconds` each: `--callers` callers create tasks of
`echo` (each waiting for its reply, so the worker keeps up), then the phase waits until no
task is active, and the CPU the front end, the worker and the store server (Redis by its pid,
PostgreSQL by the store's backends) spent in the phase is divided by the tasks it created.
Every task stays retained (the default retention), so each phase starts with every earlier
phase's tasks, and their histories, in the store. CPU per task that grows from phase to
phase is work that grows with what is kept: a scan, a plan gone stale, a cache that no
longer holds the working set. Results go to `--out` (JSON) and a table on stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from bench import server
from bench.cpu import APP, Caller, FrontEnd, active_count, args_of, fan, sync_call
from bench.cpu_probe import Meter
from bench.processes import Worker

RESULTS = Path(__file__).resolve().parent / "results" / "cpu_growth.json"


async def grow(store: str, cfg: argparse.Namespace, logs: Path) -> list[dict[str, Any]]:
    """One store: its phases, each with the tasks retained at its end and CPU ms per task."""
    phases: list[dict[str, Any]] = []
    async with server.store_url(store) as url:
        ops = logs / f"{store}-ops"
        ops.mkdir()
        env = {"BENCH_CPU_URL": url, "BENCH_CPU_OPS": str(ops)}
        front = FrontEnd(url, 0, logs / f"{store}-front.log", None, ops)
        worker: Worker | None = None
        callers: list[Caller] = []
        try:
            await front.ready()
            worker = Worker(url, cfg.worker_concurrency, 0, logs / f"{store}-worker.log", APP, env)
            await worker.ready()
            meter = Meter(store, url, front, [worker], ops)
            callers = [Caller(front.port) for _ in range(cfg.callers)]
            await fan(callers, list(range(50)), sync_call)  # warm: imports, connections
            made = 0
            for phase in range(cfg.phases):
                before, first, until = meter.sample(), made, time.monotonic() + cfg.seconds

                async def create(caller: Caller, until: float = until) -> None:
                    nonlocal made
                    while time.monotonic() < until:
                        made += 1
                        result = await caller.call("tools/call", args_of(made), True)
                        assert result["resultType"] == "task", result

                async with anyio.create_task_group() as group:
                    for caller in callers:
                        group.start_soon(create, caller)
                with anyio.fail_after(300):
                    while await active_count(store, url):  # noqa: ASYNC110 - another process's
                        await anyio.sleep(0.05)
                spent = meter.delta(before, meter.sample())
                tasks = max(1, made - first)
                row = {
                    "store": store,
                    "phase": phase,
                    "tasks": made - first,
                    "retained": made,
                    "front_end_ms": spent["front_end"] / tasks * 1e3,
                    "worker_ms": sum(spent["workers"]) / tasks * 1e3,
                    "store_server_ms": spent.get("pg_backends", spent.get("store_server", 0.0))
                    / tasks
                    * 1e3,
                }
                row["task_ms"] = row["front_end_ms"] + row["worker_ms"] + row["store_server_ms"]
                print(line(row), flush=True)
                phases.append(row)
        finally:  # every process ends, whatever failed
            with contextlib.suppress(Exception):
                for caller in callers:
                    await caller.raw.aclose()
            try:
                if worker is not None:
                    worker.terminate()
                    await worker.stop()
            finally:
                await front.stop()
                if store == "postgres" and "meter" in locals():
                    meter.pg.close()  # type: ignore[union-attr]
    return phases


def line(row: dict[str, Any]) -> str:
    return (
        f"{row['store']} phase {row['phase']}: {row['retained']:,} retained, task "
        f"{row['task_ms']:.3f} ms (front end {row['front_end_ms']:.3f}, worker "
        f"{row['worker_ms']:.3f}, store server {row['store_server_ms']:.3f})"
    )


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown: each store's first and last phase, and how much the last costs more."""
    out = [
        "| store | retained, first → last phase | task ms, first → last | last / first |",
        "|---|---|---|---|",
    ]
    for store in dict.fromkeys(r["store"] for r in rows):
        mine = [r for r in rows if r["store"] == store]
        first, last = mine[0], mine[-1]
        out.append(
            f"| {store} | {first['retained']:,} → {last['retained']:,} "
            f"| {first['task_ms']:.2f} → {last['task_ms']:.2f} "
            f"| {last['task_ms'] / first['task_ms']:.2f} |"
        )
    return "\n".join(out)


async def run_all(cfg: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-cpu-growth-") as logs:
        for store in cfg.stores.split(","):
            rows += await grow(store, cfg, Path(logs))
    return rows


def main(argv: list[str] | None = None) -> None:
    cfg = parse(argv)
    rows = anyio.run(run_all, cfg)
    print(table(rows))
    out = Path(cfg.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"seconds": cfg.seconds, "callers": cfg.callers, "runs": rows}))
    print(f"wrote {out}")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.cpu_growth", description=__doc__.splitlines()[0]
    )
    p.add_argument("--stores", default="sqlite,redis,postgres")
    p.add_argument("--phases", type=int, default=4)
    p.add_argument("--seconds", type=float, default=10.0, help="creating, per phase")
    p.add_argument("--callers", type=int, default=3, help="a worker keeps up with 3")
    p.add_argument("--worker-concurrency", type=int, default=10)
    p.add_argument("--out", default=str(RESULTS))
    return p.parse_args(argv)


if __name__ == "__main__":
    main()
