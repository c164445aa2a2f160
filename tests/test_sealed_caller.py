"""The caller's token and headers reach a worker, sealed at rest (`server.engine.sealed`).

Real processes over Streamable HTTP with a bearer verifier (`tests/sealed_server.py`):
a `concurrency=0` front end and `fastmcp-tasks worker` processes on one store (SQLite,
and for the main test also Redis and PostgreSQL), each given its key through
`FASTMCP_TASKS_ENCRYPTION_KEY`. The tool run by a worker
sees what the same call sees in the foreground; a worker without the key, or with
another, fails the task saying so; a token expired before the run is not restored;
the store (every byte of the SQLite files, of the Redis prefix's keys, of the PostgreSQL
schema's rows) holds neither the token nor a header value, nor, under `seal="all"`, an
argument or a result.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from fastmcp_tasks.server.engine.caller import TOKEN_EXPIRED
from fastmcp_tasks.server.payloads import SEAL_ENV
from fastmcp_tasks.server.sealing import KEY_ENV, NO_KEY, WRONG_KEY
from tests.private_postgres import shared_schema
from tests.sealed_server import STALE_SECONDS
from tests.test_store_contract import POSTGRES_URL, REDIS_URL, redis_store
from tests.wire import Wire, free_port, http_wire_for

pytestmark = pytest.mark.anyio

SERVER = Path(__file__).parent / "sealed_server.py"
ROOT = Path(__file__).parent.parent
#: `X-Secret` is never echoed by a tool, so its value is in the store only if leaked
ALICE = {
    "Authorization": "Bearer alice-token",
    "X-Demo": "demo-header-7f3a9",
    "X-Secret": "secret-header-91c2",
}
STALE = {"Authorization": "Bearer stale-token", "X-Demo": "stale-header-2b8c"}


#: a store's URL (or SQLite path) and how to read every byte it holds at rest
Store = tuple[str, Callable[[], Awaitable[bytes]]]


def _env(db: Path | str, key: str | None, seal: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (KEY_ENV, SEAL_ENV)}
    env["SEALED_STORE"] = str(db)
    if key is not None:
        env[KEY_ENV] = key
    if seal is not None:
        env[SEAL_ENV] = seal
    return env


def _spawn(command: list[str], env: dict[str, str], stdout: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(command, env=env, stdout=stdout, stderr=subprocess.PIPE, cwd=ROOT)


def _store_bytes(directory: Path) -> bytes:
    """Every file of the SQLite store (the database, its WAL and shared memory)."""
    return b"".join(path.read_bytes() for path in sorted(directory.glob("tasks.db*")))


def _redis_bytes(pattern: str) -> bytes:
    """Every key matching `pattern` and every byte of its value, whatever its type."""
    import redis

    parts: list[bytes] = []
    client = redis.Redis.from_url(REDIS_URL, socket_timeout=5)
    try:
        for key in client.scan_iter(match=pattern, count=500):
            parts.append(key)
            kind = client.type(key)
            if kind == b"string":
                parts.append(client.get(key) or b"")
            elif kind == b"hash":
                for field, value in client.hgetall(key).items():
                    parts += [field, value]
            elif kind == b"list":
                parts += client.lrange(key, 0, -1)
            elif kind == b"zset":
                for member, score in client.zrange(key, 0, -1, withscores=True):
                    parts += [member, repr(score).encode()]
            elif kind == b"stream":
                for entry_id, fields in client.xrange(key):
                    parts.append(entry_id)
                    for field, value in fields.items():
                        parts += [field, value]
            elif kind == b"set":
                parts += sorted(client.smembers(key))
            else:
                raise AssertionError(f"unexpected Redis type {kind!r} of {key!r}")
    finally:
        client.close()
    return b"".join(parts)


def _postgres_bytes(schema: str) -> bytes:
    """Every row of every table of `schema`, as text (a bytea column shows as hex)."""
    import psycopg

    parts: list[str] = []
    with psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=5) as conn:
        tables = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
            (schema,),
        ).fetchall()
        assert tables, f"no table in schema {schema}"
        for (table,) in tables:
            rows = conn.execute(f'SELECT t::text FROM "{schema}"."{table}" t').fetchall()
            parts += [table, *(row[0] for row in rows)]
    return "".join(parts).encode()


@pytest.fixture(params=["sqlite", "redis", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """A SQLite file, a fresh Redis prefix (its keys deleted afterwards) or a fresh schema
    of the shared PostgreSQL (dropped afterwards), with how to read all it holds."""
    if request.param == "sqlite":

        async def sqlite_bytes() -> bytes:
            return _store_bytes(tmp_path)

        yield str(tmp_path / "tasks.db"), sqlite_bytes
        return
    if request.param == "postgres":
        async with shared_schema() as url:  # skips without PostgreSQL (fails when CI=true)
            schema = url.rpartition("schema=")[2]

            async def postgres_bytes() -> bytes:
                return await anyio.to_thread.run_sync(_postgres_bytes, schema)

            yield url, postgres_bytes
        return
    tasks = redis_store()  # skips without Redis (fails when CI=true)
    pattern = f"{tasks.keys.base}*"  # type: ignore[attr-defined]

    async def redis_bytes() -> bytes:
        return await anyio.to_thread.run_sync(_redis_bytes, pattern)

    try:
        yield f"{REDIS_URL}?prefix={tasks.keys.prefix}", redis_bytes  # type: ignore[attr-defined]
    finally:
        await tasks.open()
        await tasks.close()  # deletes the prefix's keys


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            stream.close()


@asynccontextmanager
async def front_end(
    db: Path | str, key: str | None, seal: str | None = None
) -> AsyncIterator[Wire]:
    """A `concurrency=0` front end: every task waits for a worker."""
    port = free_port()
    command = [sys.executable, str(SERVER), "--port", str(port), "--concurrency", "0"]
    process = _spawn(command, _env(db, key, seal), subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        with anyio.fail_after(20):
            async with httpx.AsyncClient() as http:
                while True:
                    assert process.poll() is None, process.stderr.read().decode()  # type: ignore[union-attr]
                    try:
                        await http.get(url.replace("/mcp", "/"), timeout=1)
                        break
                    except httpx.TransportError:
                        await anyio.sleep(0.05)
        async with http_wire_for(url) as wire:
            yield wire
    finally:
        _stop(process)


@asynccontextmanager
async def worker(db: Path | str, key: str | None, seal: str | None = None) -> AsyncIterator[None]:
    """`python -m fastmcp_tasks worker tests/sealed_server.py`, started and ready."""
    command = [sys.executable, "-m", "fastmcp_tasks", "worker", str(SERVER)]
    process = _spawn(command, _env(db, key, seal), subprocess.PIPE)
    try:
        with anyio.fail_after(20):
            line = await anyio.to_thread.run_sync(process.stdout.readline)  # type: ignore[union-attr]
        assert line.startswith(b"fastmcp-tasks worker: "), line
        yield
    finally:
        _stop(process)


async def run_by_worker(
    wire: Wire, db: Path, key: str | None, name: str, headers: dict[str, str]
) -> dict[str, Any]:
    created = await wire.call_tool(name, headers=headers)
    assert created["statusMessage"].startswith("Queued"), created
    async with worker(db, key):
        return await wire.wait(created["taskId"], headers=headers, within=20)


async def test_a_worker_with_the_key_sees_the_foreground_caller(store: Store) -> None:
    db, at_rest = store
    async with front_end(db, "key A") as wire:
        foreground = await wire.call_tool("whoami", opt_in=False, headers=ALICE)
        created = {
            (name, who): (await wire.call_tool(name, headers=headers))["taskId"]
            for name in ("whoami", "headers_only")
            for who, headers in (("alice", ALICE), ("stale", STALE))
        }
        verified = time.time()
        # the stale token expires STALE_SECONDS after its calls were verified: the worker
        # starts after that
        await anyio.sleep(max(0.0, verified + STALE_SECONDS + 1 - time.time()))
        async with worker(db, "key A"):
            done = {
                which: await wire.wait(
                    task_id, headers=ALICE if which[1] == "alice" else STALE, within=20
                )
                for which, task_id in created.items()
            }
    assert done["whoami", "alice"]["status"] == "completed", done["whoami", "alice"]
    seen = done["whoami", "alice"]["result"]["structuredContent"]
    assert seen == foreground["structuredContent"]
    assert seen == {
        "subject": "alice",
        "client_id": "alice-app",
        "scopes": ["deploy"],
        "imperative": "alice-app",
        "demo": "demo-header-7f3a9",
    }
    # expired before the run: the token is not restored, the headers are
    assert done["whoami", "stale"]["status"] == "failed"
    assert done["whoami", "stale"]["error"]["message"] == TOKEN_EXPIRED.format(tool="whoami")
    stale = done["headers_only", "stale"]["result"]["structuredContent"]
    assert stale == {"token": False, "demo": "stale-header-2b8c"}
    # sealed at rest: neither the tokens nor a header value no tool returned (X-Demo's is
    # in the stored results) are in the store (nor hex-encoded, as PostgreSQL shows bytea)
    stored = await at_rest()
    assert b"demo-header-7f3a9" in stored, "the scan does not see the stored results"
    for secret in (b"alice-token", b"stale-token", b"secret-header-91c2"):
        assert secret not in stored
        assert secret.hex().encode() not in stored


async def test_a_task_recovered_from_a_killed_worker_runs_as_its_caller(tmp_path: Path) -> None:
    """Recovery, not only a first claim, opens the sealed caller: the worker running the
    task is SIGKILLed and another takes the task over when its lease runs out."""
    db, gate = tmp_path / "tasks.db", tmp_path / "gate"
    started = Path(f"{gate}.started")
    command = [sys.executable, "-m", "fastmcp_tasks", "worker", str(SERVER)]
    async with front_end(db, "key A") as wire:
        created = await wire.call_tool("held_whoami", {"gate": str(gate)}, headers=ALICE)
        first = _spawn(command, _env(db, "key A"), subprocess.DEVNULL)
        try:
            with anyio.fail_after(20):
                while not await anyio.Path(started).exists():  # noqa: ASYNC110 - the worker's
                    await anyio.sleep(0.05)
            killed = int(await anyio.Path(started).read_text())
            first.send_signal(signal.SIGKILL)
            first.wait(timeout=10)
        finally:
            _stop(first)
        gate.write_text("go")
        async with worker(db, "key A"):
            done = await wire.wait(created["taskId"], headers=ALICE, within=30)
    assert done["status"] == "completed", done
    seen = done["result"]["structuredContent"]
    assert seen["pid"] != killed
    assert (seen["subject"], seen["demo"]) == ("alice", "demo-header-7f3a9")


MARKER = "marker-argument-4e7b1"


async def test_seal_all_keeps_arguments_and_results_unreadable_at_rest(store: Store) -> None:
    db, at_rest = store
    async with front_end(db, "key A", seal="all") as wire:
        foreground = await wire.call_tool("echo", {"text": MARKER}, opt_in=False, headers=ALICE)
        created = await wire.call_tool("echo", {"text": MARKER}, headers=ALICE)
        again = await wire.call_tool("echo", {"text": MARKER}, headers=ALICE)  # deduplicated
        queued = await at_rest()
        async with worker(db, "key A", seal="all"):
            done = await wire.wait(created["taskId"], headers=ALICE, within=20)
        ended = await at_rest()
    assert again["taskId"] == created["taskId"]
    assert done["status"] == "completed", done
    assert done["result"]["structuredContent"] == foreground["structuredContent"]
    assert done["result"]["content"] == foreground["content"]
    for stored in (queued, ended):
        assert b"echo" in stored, "the scan does not see the task"
        for secret in (MARKER.encode(), b"alice-token", b"secret-header-91c2"):
            assert secret not in stored
            assert secret.hex().encode() not in stored


@pytest.mark.parametrize(("key", "reason"), [(None, NO_KEY), ("key B", WRONG_KEY)])
async def test_a_worker_that_cannot_open_the_caller_fails_the_task(
    tmp_path: Path, key: str | None, reason: str
) -> None:
    db = tmp_path / "tasks.db"
    async with front_end(db, "key A") as wire:
        done = await run_by_worker(wire, db, key, "headers_only", ALICE)
    assert done["status"] == "failed", done
    assert done["error"]["message"] == f"Task not run: {reason}"


async def test_a_rotated_worker_opens_a_task_sealed_with_the_old_key(tmp_path: Path) -> None:
    db = tmp_path / "tasks.db"
    async with front_end(db, "key A") as wire:
        done = await run_by_worker(wire, db, "key B, key A", "whoami", ALICE)
    assert done["status"] == "completed", done
    assert done["result"]["structuredContent"]["subject"] == "alice"
    assert done["result"]["structuredContent"]["demo"] == "demo-header-7f3a9"
