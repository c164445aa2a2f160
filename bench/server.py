"""The bench server and its task stores: `make_server` (`noop`, and with a `Probe` the
`asker`, `waiter` and `flood` tools), `store_url` (memory, a fresh SQLite file, Redis
under a prefix of its own, or a fresh PostgreSQL schema: `bench.pg`), the Redis helpers
of the run (`REDIS_URL`, prefixes, an untimed client, leftover cleanup) and untimed
reads and waits on a server's store (`retained`, `db_mib`, `drain`, `quiet`, `settle`).

`REDIS_URL` is set from `--redis-url` (by `bench.run` and `bench.load`): read it as
`server.REDIS_URL`, never import the name.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import secrets
import shutil
import sqlite3
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
from fastmcp import Context, FastMCP

from bench import pg
from bench.proto import TASKS, TERMINAL
from fastmcp_tasks import Progress, TasksExtension

#: Task stores the latency, tasks/get and throughput phases can run on (`--stores`).
STORES = ("memory", "sqlite", "redis", "postgres")


# --- server ---------------------------------------------------------------------------


@dataclass
class Probe:
    """What the probe tools report back to the harness (same process, same clock)."""

    gates: dict[str, anyio.Event]
    started_ns: dict[str, int]
    done_ns: dict[str, int]
    finished: dict[str, anyio.Event]

    def __init__(self) -> None:
        self.gates, self.started_ns, self.done_ns, self.finished = {}, {}, {}, {}

    def gate(self, key: str) -> anyio.Event:
        return self.gates.setdefault(key, anyio.Event())

    def finish(self, key: str) -> anyio.Event:
        return self.finished.setdefault(key, anyio.Event())


def make_server(
    max_tasks: int = 200_000, probe: Probe | None = None, url: str = "memory://"
) -> FastMCP:
    """The bench server: `noop`; with a `probe`, also `asker`, `waiter` and `flood`.

    `url` names the task store (`memory://`, `sqlite:///...`, `redis://...` or
    `postgresql://...?schema=...` from `store_url`).
    """
    mcp = FastMCP("bench")
    mcp.add_extension(TasksExtension(url=url, max_tasks=max_tasks))

    @mcp.tool(task=True)
    async def noop() -> str:
        return "ok"

    if probe is None:
        return mcp

    @mcp.tool(task=True)
    async def asker(rounds: int, ctx: Context) -> str:
        """Park on `ctx.elicit()` `rounds` times in a row."""
        for _ in range(rounds):
            await ctx.elicit("go?", bool)
        return "asked"

    @mcp.tool(task=True)
    async def waiter(key: str) -> str:
        """Wait for the harness to open gate `key`, then complete (time taken just before)."""
        await probe.gate(key).wait()
        probe.done_ns[key] = time.perf_counter_ns()
        return key

    @mcp.tool(task=True)
    async def flood(key: str, n: int, progress: Progress = Progress()) -> str:
        """After gate `key`, set the status message `n` times, yielding every 100."""
        await probe.gate(key).wait()
        probe.started_ns[key] = time.perf_counter_ns()
        for i in range(n):
            await progress.set_message(f"item {i}")
            if i % 100 == 99:
                await anyio.lowlevel.checkpoint()  # = `await anyio.sleep(0)`
        probe.done_ns[key] = time.perf_counter_ns()
        probe.finish(key).set()
        return "flooded"

    return mcp


def extension(server: FastMCP) -> TasksExtension:
    return server._extensions[TASKS]  # type: ignore[attr-defined,no-any-return]


@asynccontextmanager
async def store_url(store: str) -> AsyncIterator[str]:
    """The store URL of one server: `memory://`; a fresh SQLite file in a temporary
    directory (`tempfile.mkdtemp`), removed with its `-wal`/`-shm` files afterwards;
    Redis under a prefix of its own (`redis_prefix`), whose keys are deleted afterwards
    (`RedisTaskStore.clear()`, once the server using it is down); or a fresh schema on
    PostgreSQL (`pg.postgres_schema`), dropped afterwards."""
    if store == "memory":
        yield "memory://"
        return
    if store == "postgres":
        async with pg.postgres_schema() as url:
            yield url
        return
    if store == "redis":
        url = redis_store_url(redis_prefix())
        try:
            yield url
        finally:
            with anyio.CancelScope(shield=True):
                await clear_redis(url)
        return
    if store != "sqlite":
        raise SystemExit(f"unknown store {store!r} (known: {', '.join(STORES)})")
    directory = tempfile.mkdtemp(prefix="fastmcp-tasks-bench-")
    try:
        yield f"sqlite:///{directory}/tasks.db"
    finally:
        shutil.rmtree(directory, ignore_errors=True)


# --- Redis ---------------------------------------------------------------------------------

REDIS_URL = "redis://127.0.0.1:6379/15"  # set from --redis-url
#: Every key prefix of this run starts with it (one prefix per server, `redis_prefix`).
REDIS_RUN = f"fastmcp-tasks-bench-{os.getpid()}-{secrets.token_hex(3)}"
_redis_prefixes = itertools.count(1)
_redis_client: Any = None


def redis_prefix() -> str:
    """A key prefix used by no other store, this run's or another's."""
    return f"{REDIS_RUN}-{next(_redis_prefixes)}"


def redis_store_url(prefix: str) -> str:
    return f"{REDIS_URL}{'&' if '?' in REDIS_URL else '?'}prefix={prefix}"


def redis_answers(url: str) -> str | None:
    """`None` when Redis at `url` answers PING within 1 s, else why not."""
    try:
        import redis
    except ImportError as exc:
        return f"the redis package is missing ({exc})"
    try:
        with contextlib.closing(redis.Redis.from_url(url, socket_connect_timeout=1)) as client:
            client.ping()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def redis_client() -> Any:
    """A blocking redis-py client of the harness's own (untimed reads, cleanup)."""
    global _redis_client
    if _redis_client is None:
        import redis

        _redis_client = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    return _redis_client


async def clear_redis(url: str) -> int:
    """Delete every key of the store at `url` (`RedisTaskStore.clear()`); how many."""
    from fastmcp_tasks.stores.redis import RedisTaskStore

    store = RedisTaskStore(url)
    await store.open()
    try:
        return await store.clear()
    finally:
        await store.close()


def redis_leftovers() -> int:
    """Untimed, at the end: delete any key of this run still in Redis; how many there were."""
    client = redis_client()
    keys = list(client.scan_iter(match=f"{{{REDIS_RUN}-*", count=1000))
    for start in range(0, len(keys), 1000):
        client.unlink(*keys[start : start + 1000])
    return len(keys)


def store_kind(server: FastMCP) -> str:
    """`memory`, `sqlite`, `redis` or `postgres`: the store the server's extension uses."""
    scheme = str(extension(server).store.scheme)  # type: ignore[attr-defined]
    return "postgres" if scheme.startswith("postgres") else scheme


def redis_counts(server: FastMCP) -> dict[str, int]:
    """Sizes of a Redis store's indexes (`active`, `queued`, `terminal`), read directly."""
    keys = extension(server).store.keys  # type: ignore[attr-defined]
    client = redis_client()
    return {
        "active": int(client.zcard(keys.active)),
        "queued": int(client.zcard(keys.queued)),
        "terminal": int(client.zcard(keys.terminal)),
    }


def store_counts(server: FastMCP) -> dict[str, int]:
    """`active`, `queued` and `terminal` tasks of a Redis or PostgreSQL store."""
    if store_kind(server) == "postgres":
        return pg.postgres_counts(extension(server).store)
    return redis_counts(server)


def redis_used_mib() -> float:
    """The whole Redis server's `used_memory`, in MiB."""
    return round(int(redis_client().info("memory")["used_memory"]) / 2**20, 1)


def sqlite_path(server: FastMCP) -> Path | None:
    """The database file of a server on the SQLite store (`None` for the other stores)."""
    return getattr(extension(server).store, "path", None)


def retained(server: FastMCP) -> int:
    """Tasks the server's store holds (SQLite, Redis: counted on a connection of our own)."""
    if store_kind(server) in ("redis", "postgres"):
        counts = store_counts(server)
        return counts["active"] + counts["terminal"]
    path = sqlite_path(server)
    if path is None:
        return len(extension(server).store)  # type: ignore[arg-type]
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM tasks").fetchone()[0])


def db_mib(server: FastMCP) -> float | None:
    """Size of the SQLite database with its WAL, in MiB (`None` for the other stores)."""
    path = sqlite_path(server)
    if path is None:
        return None
    files = [path, path.with_name(path.name + "-wal")]
    return round(sum(f.stat().st_size for f in files if f.exists()) / 2**20, 2)


# --- untimed waits on a server's store --------------------------------------------------


async def drain(server: FastMCP, task_id: str) -> None:
    """Untimed: wait (reading the store directly) until the task has finished."""
    store = extension(server).store
    with anyio.fail_after(10):
        while True:
            record = await store.get(task_id)
            if record is not None and record.status in TERMINAL:
                break
            await asyncio.sleep(0)
    for _ in range(3):  # let the run's task and the change feed finish their bookkeeping
        await asyncio.sleep(0)
    await quiet(server)


async def quiet(server: FastMCP) -> None:
    """Untimed, SQLite and Redis: a write wakes the store's change-feed readers, which then
    read the new rows in a worker thread (SQLite) or get the `XREAD BLOCK` reply for the
    new stream entry (Redis); give them 1 ms so the next sample starts idle.

    The loop spins (`sleep(0)`) rather than sleeping: a process that goes idle for a
    millisecond on a busy machine pays a wake-up cost in the next, timed, call.
    """
    if store_kind(server) != "memory":
        end = time.perf_counter() + 0.001
        while time.perf_counter() < end:  # noqa: ASYNC110 - a spin, not a wait
            await asyncio.sleep(0)


def active_tasks(server: FastMCP) -> int:
    """Tasks of the server's store still `working` or `input_required`."""
    if store_kind(server) in ("redis", "postgres"):
        return store_counts(server)["active"]
    path = sqlite_path(server)
    if path is None:
        records = extension(server).store._tasks.values()  # type: ignore[attr-defined]
        return sum(1 for record in records if record.status not in TERMINAL)
    with contextlib.closing(sqlite3.connect(path)) as conn:
        query = "SELECT COUNT(*) FROM tasks WHERE status IN ('working', 'input_required')"
        return int(conn.execute(query).fetchone()[0])


async def settle(server: FastMCP) -> float:
    """Untimed: wait until the runner holds no job and every task has been recorded as
    finished (after creations without polling); the seconds that took."""
    runner = extension(server).runner
    assert runner is not None
    start = time.perf_counter()
    with anyio.fail_after(120):
        while runner._jobs or active_tasks(server):  # noqa: ASYNC110
            await asyncio.sleep(0.002)
    await quiet(server)
    return time.perf_counter() - start
