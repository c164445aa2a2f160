"""Where the CPU bench (`bench/cpu.py`) reads CPU time: any process by pid
(`/proc/<pid>/stat`, user + system), the Redis server (its pid from `INFO server`
`process_id`, so its CPU is read the same way) and PostgreSQL: the backends of one
store's connections (found in `pg_stat_activity` by the `application_name` the store
gives them, `fastmcp-tasks:<schema>` and `fastmcp-tasks-feed:<schema>`) and, apart, the
server's background processes (WAL writer, checkpointer, background writer, ...), which
the whole host shares, so other load on the server shows up there.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from bench import pg

_TICK = os.sysconf("SC_CLK_TCK")


def proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) of process `pid` so far; 0.0 once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


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
