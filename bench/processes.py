"""The harness's child processes: the scale-out's worker processes (`Worker`, the worker
command as deployed; an `atexit` hook kills any left) with their CPU time
(`cpu_seconds`), and the fresh interpreter of the memory metric (`bench_memory` runs
`python -m bench.run --_memory-child`, which calls `memory_child`).
"""

from __future__ import annotations

import asyncio
import atexit
import gc
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio

from bench import pg
from bench.calls import create_task, fan_out
from bench.config import Config
from bench.proto import Send
from bench.server import extension, make_server, redis_client
from bench.transports import memory_transport

REDIS_APP = Path(__file__).resolve().parent / "redis_app.py"


#: Worker processes started and not yet seen to exit (killed at exit, if any is left).
live_workers: set[subprocess.Popen[bytes]] = set()


@atexit.register
def _kill_leftover_workers() -> None:
    for proc in list(live_workers):
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        live_workers.discard(proc)


class Worker:
    """One `python -m fastmcp_tasks worker bench/redis_app.py:mcp` process (the worker
    command, as deployed; another server file with `app`, more environment with `env`)
    on the store at `url`, its output in `log`; `stop()` sends SIGTERM, then SIGKILL."""

    def __init__(
        self,
        url: str,
        concurrency: int,
        sleep_ms: float,
        log: Path,
        app: Path = REDIS_APP,
        env: dict[str, str] | None = None,
    ) -> None:
        self.log = log
        self.signalled = False
        root = Path(__file__).resolve().parent.parent
        cmd = [
            sys.executable,
            "-m",
            "fastmcp_tasks",
            "worker",
            f"{app}:mcp",
            "--concurrency",
            str(concurrency),
            "--grace",
            "5",
        ]
        env = {
            **os.environ,
            "BENCH_REDIS_URL": url,
            "BENCH_SLEEP_MS": str(sleep_ms),
            **(env or {}),
        }
        with open(log, "wb") as out:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(
                cmd,
                cwd=root,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C of the harness reaches it through stop()
            )
        live_workers.add(self.proc)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    async def ready(self, limit_s: float = 60) -> None:
        """Wait until the worker has entered its lifespan (it prints `fastmcp-tasks worker:`)."""
        with anyio.fail_after(limit_s):
            while "fastmcp-tasks worker: " not in self.output():
                if self.proc.poll() is not None:
                    raise RuntimeError(f"worker exited ({self.proc.returncode}):\n{self.output()}")
                await anyio.sleep(0.02)

    def terminate(self) -> None:
        """Send SIGTERM once (a second one, after the worker's handler is gone, kills it)."""
        if not self.signalled and self.proc.poll() is None:
            self.signalled = True
            self.proc.send_signal(signal.SIGTERM)

    async def stop(self, limit_s: float = 15) -> dict[str, Any]:
        """SIGTERM (if not sent yet), then SIGKILL after `limit_s`; how it ended."""
        start = time.perf_counter()
        self.terminate()
        killed = False
        with anyio.move_on_after(limit_s):
            while self.proc.poll() is None:  # noqa: ASYNC110 - a child process, no event
                await anyio.sleep(0.02)
        if self.proc.poll() is None:
            killed = True
            self.proc.kill()
            self.proc.wait()
        live_workers.discard(self.proc)
        return {
            "pid": self.proc.pid,
            "returncode": self.proc.returncode,
            "sigkill": killed,
            "stop_seconds": round(time.perf_counter() - start, 2),
        }


def cpu_seconds(procs: list[Worker], store: str = "redis") -> dict[str, float]:
    """CPU seconds (user + system) used so far by this process (the front end and the
    client), by each worker (`/proc/<pid>/stat`) and by the store's server: Redis
    (`INFO cpu`), or every `postgres` process of the host (`pg.postgres_cpu_seconds`)."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {"front_end": time.process_time()}
    for i, proc in enumerate(procs):
        with open(f"/proc/{proc.proc.pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
        out[f"worker_{i}"] = (int(fields[11]) + int(fields[12])) / tick
    if store == "postgres":
        out["postgres"] = pg.postgres_cpu_seconds()
        return out
    info = redis_client().info("cpu")
    out["redis"] = float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
    return out


def print_worker_logs(logs: Path) -> None:
    """On a failure: the end of every worker's output."""
    for log in sorted(logs.iterdir()):
        print(f"--- {log.name}\n{log.read_text(errors='replace')[-3000:]}", file=sys.stderr)


# --- memory (in a fresh interpreter, memory transport only) -----------------------------


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def memory_child(count: int, concurrency: int) -> dict[str, Any]:
    """Create `count` tasks through the in-memory wire; RSS growth once they have all completed.

    Tasks are created without polling (a `tasks/get` changes nothing that is
    retained); the harness then waits until the runner holds no job.
    """
    server = make_server(max_tasks=count + 10_000)
    ext = extension(server)

    async def create(send: Send) -> None:
        await create_task(send)

    async with memory_transport(server) as conn:
        runner = ext.runner
        assert runner is not None

        async def settle() -> None:
            with anyio.fail_after(60):
                while runner._jobs:  # noqa: ASYNC110
                    await asyncio.sleep(0.01)
            gc.collect()

        await fan_out(conn, 2_000, concurrency, create)  # warm every path and allocator pool
        await settle()
        baseline_tasks = len(ext.store)  # type: ignore[arg-type]
        before = rss_bytes()
        elapsed, _ = await fan_out(conn, count, concurrency, create)
        await settle()
        after = rss_bytes()
        retained = len(ext.store) - baseline_tasks  # type: ignore[arg-type]
        statuses: dict[str, int] = {}
        for record in ext.store._tasks.values():  # type: ignore[attr-defined]
            statuses[record.status] = statuses.get(record.status, 0) + 1
        sample = next(reversed(ext.store._tasks.values()))  # type: ignore[attr-defined]
    return {
        "tasks": retained,
        "statuses": statuses,
        "rss_before_mib": round(before / 2**20, 2),
        "rss_after_mib": round(after / 2**20, 2),
        "kib_per_task": (after - before) / 1024 / retained,
        "create_seconds": round(elapsed, 2),
        "record_sample": {k: getattr(sample, k) for k in ("status", "arguments", "result")},
    }


def bench_memory(cfg: Config) -> dict[str, Any]:
    """Metric 4, in a fresh interpreter so memory freed by earlier phases cannot hide growth."""
    cmd = [
        sys.executable,
        "-m",
        "bench.run",
        "--_memory-child",
        str(cfg.memory_tasks),
        "--concurrency",
        str(cfg.concurrency),
    ]
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run(cmd, cwd=root, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]
