"""What a task costs in CPU, per process, against a plain synchronous call of the same tool
in the same run: `python -m bench.cpu` (`--help` for the knobs).

Each configuration (a store and a number of worker processes) gets a fresh store (a
SQLite file, a Redis prefix, a PostgreSQL schema: `bench.server.store_url`), a front end
in a process of its own (`python -m bench.cpu_app PORT`, Streamable HTTP; on the memory
store with `concurrency` > 0 and no workers, on a durable store with `concurrency=0`)
and `--workers` worker processes (`python -m fastmcp_tasks worker bench/cpu_app.py:mcp`).
After a warm-up of the same size (`--tasks` sync calls and `--tasks` tasks, so that every
process's connection pool has grown to what the run needs and every pooled connection has
prepared and planned its statements: the measured phases then hold what each further
task costs, not what a process pays once), it runs, with `--callers` callers on
keep-alive connections of their own:

- the **sync** phase: `--tasks` plain `tools/call`s of `echo` (no tasks opt-in);
- the **task** phase: `--tasks` task-creating `tools/call`s of `echo`, an untimed wait
  until the store holds no active task (read on a connection of the harness's own), then
  one `tasks/get` per task (a task not yet finished is asked again, counted).

CPU comes from `/proc/<pid>/stat` of the front end and of each worker, from the Redis
server's process (pid from `INFO server`), or from the store's PostgreSQL backends (by
`application_name`) plus, apart and shared with the host, the server's background
processes (`bench.cpu_probe`); SQLite runs inside the processes. A task's CPU is
everything spent from the first creation to the last `tasks/get`, divided by the tasks;
the ratio divides it by the front end's CPU per sync call of the same run. Beside CPU,
each process counts the round trips its store made over the task phase (Redis commands,
scripts and feed reads; PostgreSQL statements; `bench.cpu_app.store_operations`): a
count per task that sharing two cores among many processes cannot move, so that how it
grows from one worker to several shows the work that grows with the pool.

`--profile DIR` also profiles (`cProfile`, main thread) the front end and every worker
over the task phase (`bench.cpu_app`'s SIGUSR1/SIGUSR2 hook) and writes each role's top
functions to `DIR/<store>-<n>w-<role>.txt`; profiling inflates the CPU numbers, so
measure and profile in separate runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio

from bench import cpu_report, pg, server
from bench.calls import pct
from bench.cpu_probe import Meter, proc_cpu
from bench.processes import Worker, live_workers
from bench.proto import TERMINAL, RawHttp, RpcError, caps, free_port, parse_http, request_frame

ROOT = Path(__file__).resolve().parent.parent
APP = Path(__file__).resolve().parent / "cpu_app.py"
RESULTS = Path(__file__).resolve().parent / "results" / "cpu.json"


class FrontEnd:
    """`python -m bench.cpu_app PORT` on the store at `url`."""

    def __init__(
        self, url: str, concurrency: int, log: Path, profile: Path | None, ops: Path
    ) -> None:
        self.port = free_port()
        self.log = log
        env = {**os.environ, "BENCH_CPU_URL": url, "BENCH_CPU_CONCURRENCY": str(concurrency)}
        env["BENCH_CPU_OPS"] = str(ops)
        if profile is not None:
            env["BENCH_CPU_PROFILE"] = str(profile)
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "bench.cpu_app", str(self.port)],
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        live_workers.add(self.proc)

    async def ready(self, limit_s: float = 60) -> None:
        with anyio.fail_after(limit_s):
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"front end exited:\n{self.log.read_text()[-3000:]}")
                with contextlib.suppress(OSError):
                    _, writer = await asyncio.open_connection("127.0.0.1", self.port)
                    writer.close()
                    return
                await anyio.sleep(0.05)

    async def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        with anyio.move_on_after(15):
            while self.proc.poll() is None:  # noqa: ASYNC110 - a child process
                await anyio.sleep(0.02)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        live_workers.discard(self.proc)


class Caller:
    """One keep-alive connection to the front end; `call` sends one request."""

    def __init__(self, port: int) -> None:
        self.raw = RawHttp("127.0.0.1", port)
        self.counter = 0

    async def call(self, method: str, params: dict[str, Any], opt_in: bool) -> dict[str, Any]:
        self.counter += 1
        body, headers = request_frame(method, params, caps(opt_in), self.counter, "bench-cpu")
        status, rheaders, payload = await self.raw.post("/mcp", body, headers)
        message = parse_http(rheaders.get("content-type", ""), payload)
        if "error" in message or status != 200:
            raise RpcError(f"HTTP {status}: {message.get('error') or payload[:300]!r}")
        return message["result"]  # type: ignore[no-any-return]


async def fan(callers: list[Caller], items: list[Any], job: Any) -> list[int]:
    """Run `job(caller, item)` for every item, one caller per item at a time; latencies."""
    queue = list(reversed(items))
    samples: list[int] = []

    async def run(caller: Caller) -> None:
        while queue:
            item = queue.pop()
            start = time.perf_counter_ns()
            await job(caller, item)
            samples.append(time.perf_counter_ns() - start)

    async with anyio.create_task_group() as group:
        for caller in callers:
            group.start_soon(run, caller)
    return samples


#: What every call's text carries after `hello {i}` (`--text-bytes`): echoed back, so
#: the arguments and the result each hold that many bytes more.
PADDING = {"text": ""}


def args_of(i: int) -> dict[str, Any]:
    return {"name": "echo", "arguments": {"text": f"hello {i}{PADDING['text']}"}}


async def sync_call(caller: Caller, i: int) -> None:
    result = await caller.call("tools/call", args_of(i), False)
    assert result.get("resultType") != "task" and not result.get("isError"), result


#: The floor request: a method no server has, answered -32601 by the MCP SDK's dispatch
#: after FastMCP's request seam, before any handler, tool or extension code runs; what
#: any request through the seam costs.
FLOOR_METHOD = "bench/unknown-method"


async def floor_call(caller: Caller, i: int) -> None:
    try:
        await caller.call(FLOOR_METHOD, {}, False)
    except RpcError as error:
        assert "-32601" in str(error), error
        return
    raise AssertionError(f"{FLOOR_METHOD} answered")


async def active_count(store: str, url: str) -> int:
    """Untimed: the store's active tasks, read on a connection of the harness's own."""
    if store == "sqlite":
        path = url.removeprefix("sqlite:///")
        query = "SELECT COUNT(*) FROM tasks WHERE status IN ('working', 'input_required')"
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
            return int(conn.execute(query).fetchone()[0])
    if store == "redis":
        from fastmcp_tasks.stores.redis import RedisTaskStore

        keys = RedisTaskStore(url).keys  # not opened: only its key names
        return int(server.redis_client().zcard(keys.active))
    schema = url.rpartition("schema=")[2]
    return pg.postgres_counts(SimpleNamespace(schema=schema))["active"]


async def idle(pid: int, tick: float = 0.05) -> None:
    """Untimed: wait until process `pid` used no CPU over two `tick`s in a row."""
    quiet, last = 0, proc_cpu(pid)
    with anyio.fail_after(300):
        while quiet < 2:
            await anyio.sleep(tick)
            now = proc_cpu(pid)
            quiet, last = (quiet + 1 if now == last else 0), now


async def task_phase(
    callers: list[Caller], n: int, store: str, url: str, meter: Meter, profile: Path | None
) -> dict[str, Any]:
    ids: list[str] = []
    regets = 0

    async def create(caller: Caller, i: int) -> None:
        result = await caller.call("tools/call", args_of(i), True)
        assert result["resultType"] == "task", result
        ids.append(result["taskId"])

    async def get(caller: Caller, task_id: str) -> None:
        nonlocal regets
        while True:
            task = await caller.call("tasks/get", {"taskId": task_id}, True)
            if task["status"] in TERMINAL:
                assert task["status"] == "completed", task
                return
            regets += 1
            await anyio.sleep(0.01)

    pids = [meter.front.proc.pid, *(w.proc.pid for w in meter.workers)]
    ops_before = await meter.operations()
    if profile is not None:
        for pid in pids:
            os.kill(pid, signal.SIGUSR1)
    t0 = meter.sample()
    create_ns = await fan(callers, list(range(n)), create)
    t1 = meter.sample()
    if store != "memory":
        with anyio.fail_after(300):
            while await active_count(store, url):  # noqa: ASYNC110 - another process's store
                await anyio.sleep(0.02)
    else:  # the tasks run in the front end: wait until it stops using CPU
        await idle(meter.front.proc.pid)
    t2 = meter.sample()
    get_ns = await fan(callers, ids, get)
    t3 = meter.sample()
    operations = await meter.operations() - ops_before
    if profile is not None:
        for pid in pids:
            os.kill(pid, signal.SIGUSR2)
        await anyio.sleep(0.5)  # let them write it before the next phase starts profiling
    total = meter.delta(t0, t3)
    return {
        "total": total,
        "front_end_create": meter.delta(t0, t1)["front_end"],
        "front_end_wait": meter.delta(t1, t2)["front_end"],
        "front_end_get": meter.delta(t2, t3)["front_end"],
        "create_ns": create_ns,
        "get_ns": get_ns,
        "regets": regets,
        "store_operations": operations,
    }


async def run_config(
    store: str, workers: int, cfg: argparse.Namespace, logs: Path
) -> dict[str, Any]:
    """One configuration: fresh store, front end, workers; warm-up, sync, task phase."""
    n = cfg.tasks
    prof = Path(cfg.profile) if cfg.profile else None
    async with server.store_url(store) as url:
        concurrency = cfg.callers if store == "memory" else 0
        # a directory of its own for each run: a repeat must not count the last one's calls
        ops = Path(tempfile.mkdtemp(prefix=f"{store}-{workers}-ops-", dir=logs))
        front = FrontEnd(url, concurrency, logs / f"{store}-{workers}-front.log", prof, ops)
        procs: list[Worker] = []
        callers: list[Caller] = []
        try:
            await front.ready()
            env = {"BENCH_CPU_URL": url, "BENCH_CPU_OPS": str(ops)}
            env.update({"BENCH_CPU_PROFILE": str(prof)} if prof else {})
            for i in range(workers):
                log = logs / f"{store}-{workers}-worker-{i}.log"
                procs.append(Worker(url, cfg.worker_concurrency, 0, log, app=APP, env=env))
            for proc in procs:
                await proc.ready()
            callers = [Caller(front.port) for _ in range(cfg.callers)]
            meter = Meter(store, url, front, procs, ops)
            warm = n  # a steady state first: pools grown, statements planned (module doc)
            await fan(callers, list(range(warm)), sync_call)
            await task_phase(callers, warm, store, url, meter, None)
            halves = [n // 2, n - n // 2]
            sync_ns: list[int] = []
            syncs, floors, parts = [], [], []
            first = [("sync", halves[0]), ("floor", halves[0]), ("task", halves[0])]
            second = [("task", halves[1]), ("floor", halves[1]), ("sync", halves[1])]
            for kind, half in [*first, *second]:  # a palindrome: drift cancels
                if kind == "task":
                    parts.append(await task_phase(callers, half, store, url, meter, prof))
                    continue
                s0 = meter.sample()
                ns = await fan(
                    callers, list(range(half)), floor_call if kind == "floor" else sync_call
                )
                (floors if kind == "floor" else syncs).append(meter.delta(s0, meter.sample()))
                sync_ns += ns if kind == "sync" else []
            sync, tasks = cpu_report.merge(syncs), cpu_report.merge(parts)
            tasks["floor"] = cpu_report.merge(floors)["front_end"]
            tasks["create_p50_us"] = pct(tasks.pop("create_ns"), 50)
            tasks["get_p50_us"] = pct(tasks.pop("get_ns"), 50)
        finally:
            for caller in callers:
                await caller.raw.aclose()
            for proc in procs:
                proc.terminate()
            for proc in procs:
                await proc.stop()
            await front.stop()
            if store == "postgres" and "meter" in locals():
                meter.pg.close()  # type: ignore[union-attr]
    if prof is not None:
        cpu_report.write_profiles(prof, f"{store}-{workers}w", n)
    return cpu_report.per_task(store, workers, n, sync, pct(sync_ns, 50), tasks)


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.cpu", description=__doc__.split("\n")[0])
    p.add_argument("--tasks", type=int, default=1000, help="tasks (and sync calls) per phase")
    p.add_argument("--quick", action="store_true", help="200 tasks, 1 and 2 workers")
    p.add_argument("--stores", default="memory,sqlite,redis,postgres")
    p.add_argument("--workers", default="1,2,4", help="worker counts of the durable stores")
    p.add_argument("--callers", type=int, default=20)
    p.add_argument("--worker-concurrency", type=int, default=10)
    p.add_argument("--repeat", type=int, default=1, help="runs of every configuration")
    p.add_argument("--profile", default="", help="directory: profile the task phase")
    p.add_argument("--text-bytes", type=int, default=0, help="pad each call's text to this size")
    p.add_argument("--progress", type=int, default=0, help="progress messages each call reports")
    p.add_argument(
        "--freeze-front-end",
        action="store_true",
        help="the front end calls gc.freeze() once it has started (workers always do)",
    )
    p.add_argument("--out", default=str(RESULTS))
    cfg = p.parse_args(argv)
    PADDING["text"] = "x" * max(0, cfg.text_bytes - len("hello 0"))
    os.environ["BENCH_CPU_PROGRESS"] = str(cfg.progress)  # the front end's and workers' `echo`
    os.environ["BENCH_CPU_FREEZE"] = "1" if cfg.freeze_front_end else ""  # the front end's
    if cfg.quick:
        cfg.tasks, cfg.workers = 200, "1,2"
    return cfg


async def run_all(cfg: argparse.Namespace, logs: Path) -> list[dict[str, Any]]:
    """Every configuration, `--repeat` times (all of them once, then again)."""
    stores = [s for s in cfg.stores.split(",") if s]
    counts = [int(w) for w in cfg.workers.split(",") if w]
    configs: list[tuple[str, int]] = []
    for store in stores:
        configs += [(store, 0)] if store == "memory" else [(store, w) for w in counts]
    runs: list[dict[str, Any]] = []
    for r in range(cfg.repeat):
        for store, workers in configs:
            try:
                runs.append(await run_config(store, workers, cfg, logs))
            except BaseException:
                print_logs(logs)
                raise
            print(f"  run {r + 1}: {cpu_report.line(runs[-1])}", file=sys.stderr)
    return runs


def print_logs(logs: Path) -> None:
    """On a failure: the end of every process's output."""
    for log in sorted(p for p in logs.iterdir() if p.is_file()):
        print(f"--- {log.name}\n{log.read_text()[-2000:]}", file=sys.stderr)


def main(argv: list[str] | None = None) -> None:
    cfg = parse(argv)
    if cfg.profile:
        Path(cfg.profile).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fastmcp-tasks-bench-cpu-") as tmp:
        runs = asyncio.run(run_all(cfg, Path(tmp)))
    print(cpu_report.table(runs))
    out = Path(cfg.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "tasks": cfg.tasks,
        "callers": cfg.callers,
        "worker_concurrency": cfg.worker_concurrency,
        "text_bytes": cfg.text_bytes,
        "progress": cfg.progress,
        "freeze_front_end": cfg.freeze_front_end,
    }
    out.write_text(json.dumps({**meta, "runs": runs}, indent=1))
    print(f"wrote {out}", file=sys.stderr)
    server.redis_leftovers()
    pg.postgres_leftovers()


if __name__ == "__main__":
    main()
