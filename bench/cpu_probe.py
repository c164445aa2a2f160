"""Where the CPU bench (`bench/cpu.py`) reads CPU time: any process by pid
(`/proc/<pid>/stat`, user + system), the Redis server (its pid from `INFO server`
`process_id`, so its CPU is read the same way) and PostgreSQL: the backends of one
store's connections (found in `pg_stat_activity` by the `application_name` the store
gives them, `fastmcp-tasks:<schema>` and `fastmcp-tasks-feed:<schema>`) and, apart, the
server's background processes (WAL writer, checkpointer, background writer, ...), which
the whole host shares, so other load on the server shows up there. `Meter` reads them
all for one configuration, counts the voluntary context switches of the front end's and
the workers' threads (a thread that blocks: a hop between threads or processes, a wait
for the network), and asks each process for its store round trips.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path
from typing import Any

import anyio

from bench import pg, server

_TICK = os.sysconf("SC_CLK_TCK")


def proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) of process `pid` so far; 0.0 once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


def proc_switches(pid: int) -> int:
    """Voluntary context switches of every thread of process `pid` so far (0 once it is
    gone): each time a thread blocked (a wait for the network, a lock, another thread)."""
    total = 0
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        with contextlib.suppress(OSError):
            for text in status.read_text().splitlines():
                if text.startswith("voluntary_ctxt_switches:"):
                    total += int(text.split()[1])
    return total


def redis_pid(url: str) -> int:
    """The pid of the Redis server at `url` (it must run on this host)."""
    import redis

    with contextlib.closing(redis.Redis.from_url(url)) as client:
        return int(client.info("server")["process_id"])


class PostgresCpu:
    """CPU of one store's PostgreSQL backends and of the server's background processes.

    A backend that ends inside a window loses its CPU (read the window while the store's
    connections stay open); one that starts inside it counts from zero.
    """

    def __init__(self, schema: str) -> None:
        self.names = [f"fastmcp-tasks:{schema}"[:63], f"fastmcp-tasks-feed:{schema}"[:63]]
        self.conn: Any = pg._connect()

    def close(self) -> None:
        self.conn.close()

    def pids(self) -> tuple[list[int], list[int]]:
        """(this store's backends, the server's background processes)."""
        rows = self.conn.execute(
            "SELECT pid, application_name = ANY(%s), backend_type <> 'client backend' "
            "FROM pg_stat_activity",
            (self.names,),
        ).fetchall()
        mine = [int(pid) for pid, ours, _ in rows if ours]
        background = [int(pid) for pid, _, bg in rows if bg]
        return mine, background

    def sample(self) -> tuple[dict[int, float], dict[int, float]]:
        """CPU seconds so far of every backend of the store and of every background
        process, by pid."""
        mine, background = self.pids()
        return {pid: proc_cpu(pid) for pid in mine}, {pid: proc_cpu(pid) for pid in background}

    @staticmethod
    def delta(
        before: tuple[dict[int, float], dict[int, float]],
        after: tuple[dict[int, float], dict[int, float]],
    ) -> dict[str, float]:
        """Seconds used between two samples: `pg_backends` (the store's), `pg_background`."""
        out = {}
        for key, old, new in zip(("pg_backends", "pg_background"), before, after, strict=True):
            out[key] = sum(v - old.get(pid, 0.0) for pid, v in new.items())
        return out


class Meter:
    """CPU seconds so far of the front end, each worker and the store's server."""

    def __init__(self, store: str, url: str, front: Any, workers: list[Any], ops: Path) -> None:
        self.store, self.front, self.workers, self.ops_dir = store, front, workers, ops
        self.redis = redis_pid(server.REDIS_URL) if store == "redis" else None
        self.pg = PostgresCpu(url.rpartition("schema=")[2]) if store == "postgres" else None

    def sample(self) -> dict[str, Any]:
        out: dict[str, Any] = {"front_end": proc_cpu(self.front.proc.pid)}
        out["workers"] = [proc_cpu(w.proc.pid) for w in self.workers]
        pids = [self.front.proc.pid, *(w.proc.pid for w in self.workers)]
        out["switches"] = sum(proc_switches(pid) for pid in pids)
        if self.redis is not None:
            out["redis"] = proc_cpu(self.redis)
        if self.pg is not None:
            out["pg"] = self.pg.sample()
        return out

    async def operations(self) -> int:
        """Store round trips the front end and the workers have made so far, each
        process asked by SIGHUP (`cpu_app.store_operations`): a count that, unlike CPU
        time, does not depend on how many cores the processes share."""
        pids = [self.front.proc.pid, *(w.proc.pid for w in self.workers)]
        files = [next(self.ops_dir.glob(f"*-{pid}.ops"), None) for pid in pids]
        for file in files:
            if file is not None:
                file.unlink()
        for pid in pids:
            os.kill(pid, signal.SIGHUP)
        with anyio.fail_after(30):
            while len(found := list(self.ops_dir.glob("*.ops"))) < len(pids):  # noqa: ASYNC110
                await anyio.sleep(0.01)  # other processes' files
        return sum(int(file.read_text()) for file in found)

    def delta(self, before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"front_end": after["front_end"] - before["front_end"]}
        out["workers"] = [b - a for a, b in zip(before["workers"], after["workers"], strict=True)]
        out["switches"] = after["switches"] - before["switches"]
        if "redis" in after:
            out["store_server"] = after["redis"] - before["redis"]
        if self.pg is not None:
            out.update(self.pg.delta(before["pg"], after["pg"]))
            out["store_server"] = out["pg_backends"] + out["pg_background"]
        return out
