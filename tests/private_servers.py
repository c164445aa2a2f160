"""Real faults on loopback: a private `redis-server`, a black-hole TCP proxy, a SQLite lock.

- `PrivateRedis(directory)`: a `redis-server` of our own on a free 127.0.0.1 port with
  its own directory (`--appendonly yes --appendfsync always --save ''`: every
  acknowledged write survives a SIGKILL). `start()`, `await ready()`, `kill()`
  (SIGKILL by pid, reaped), `start()` again on the same port and directory, `stop()`.
- `blackhole_proxy(port, target_host=...)`: an asyncio TCP proxy 127.0.0.1:P ->
  target_host:port (127.0.0.1 unless told, e.g. the shared Redis's host). In
  black-hole mode (`proxy.black_hole()`) it keeps every connection open, accepts new
  ones, and forwards no byte in either direction (bytes already read are held, the
  rest wait in the kernel): the timeout path, never a reset. `proxy.resume()`
  forwards again, held bytes first, as a healed network delivers retransmissions.
- `SQLiteLock(path)`: another process that holds `BEGIN IMMEDIATE` on a SQLite file
  for `seconds` (or until `release()`); `await lock.held()`, `await lock.released()`.
- `Lines(stream)`: a subprocess pipe read line by line in a thread; `await
  lines.wait_for(predicate, within)`.
- `answers_within_one_bound(url, hole)`: a server on the store at `url` (reached through
  the black-hole proxy `hole`) answers `tools/call`, `tasks/get` and `tasks/cancel` within
  one `store_timeout` once the hole swallows everything.

Every process is started by us and ended by its pid.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import IO, Any

import anyio
import anyio.abc
import httpx2
import pytest
from anyio.abc import SocketStream, TaskGroup
from fastmcp import FastMCP

from fastmcp_tasks import TasksExtension
from tests.wire import WireError, free_port, memory_wire

LOOPBACK = "127.0.0.1"


def redis_server_binary() -> str:
    """The `redis-server` to run; skips loudly without one (fails when `CI=true`)."""
    found = shutil.which("redis-server")
    if found is None:
        message = "NO redis-server ON PATH: the real Redis fault tests are untested"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found


def end_process(process: subprocess.Popen[Any], grace: float = 5.0) -> None:
    """SIGTERM, then SIGKILL after `grace`, by pid; reaped. Nothing if already gone."""
    if process.poll() is None:
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
    for pipe in (process.stdin, process.stdout, process.stderr):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()


class Lines:
    """The lines a subprocess writes to one pipe, collected by a reader thread."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[bytes]) -> None:
        with contextlib.suppress(ValueError, OSError):
            for raw in stream:
                self.lines.append(raw.decode(errors="replace").rstrip("\n"))

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    async def wait_for(self, predicate: Callable[[str], bool], within: float = 10) -> str:
        """The first line for which `predicate` holds (a deadline poll on the thread's list)."""
        with anyio.fail_after(within):
            while True:
                for line in list(self.lines):
                    if predicate(line):
                        return line
                await anyio.sleep(0.02)


# --- a private redis-server ----------------------------------------------------------


class PrivateRedis:
    """A `redis-server` of our own (module doc); `url` names database 0."""

    def __init__(self, directory: Path, port: int | None = None) -> None:
        self.binary = redis_server_binary()
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = port if port is not None else free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.url = f"redis://{LOOPBACK}:{self.port}/0"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self) -> None:
        assert self.process is None or self.process.poll() is not None, "already running"
        self.process = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                LOOPBACK,
                "--dir",
                str(self.directory),
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--save",
                "",
                "--daemonize",
                "no",
                "--logfile",
                str(self.directory / "redis.log"),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    async def ping(self, within: float = 1.0) -> bool:
        """Whether the server answers PING now (one raw RESP round trip)."""
        with anyio.move_on_after(within):
            try:
                async with await anyio.connect_tcp(LOOPBACK, self.port) as stream:
                    await stream.send(b"PING\r\n")
                    return (await stream.receive()).startswith(b"+PONG")
            except OSError:
                return False
        return False

    async def ready(self, within: float = 10) -> None:
        with anyio.fail_after(within):
            while not await self.ping():
                assert self.process is not None and self.process.poll() is None, self.log()
                await anyio.sleep(0.02)

    def kill(self) -> None:
        """SIGKILL by pid and reap: the server is gone, its port closed."""
        assert self.process is not None and self.process.poll() is None
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None:
            end_process(self.process)

    def log(self) -> str:
        path = self.directory / "redis.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else "(no log)"


# --- the black-hole proxy ------------------------------------------------------------


class Proxy:
    """Forwards 127.0.0.1:`port` to the target; see `black_hole` and `resume`."""

    def __init__(self, port: int, target_port: int, target_host: str = LOOPBACK) -> None:
        self.port = port
        self.target_port = target_port
        self.target_host = target_host
        self._flowing = True
        self._resumed = anyio.Event()
        self.connections = 0  # open right now
        self.accepted = 0
        self.forwarded = 0  # bytes, both directions
        self.held = 0  # bytes read while black-holed, waiting for `resume`

    def url(self, db: int = 0) -> str:
        return f"redis://{LOOPBACK}:{self.port}/{db}"

    @property
    def black_holed(self) -> bool:
        return not self._flowing

    def black_hole(self) -> None:
        """Stop forwarding in both directions; connections stay open, new ones are accepted."""
        if self._flowing:
            self._flowing = False
            self._resumed = anyio.Event()

    def resume(self) -> None:
        self._flowing = True
        self._resumed.set()

    async def _flow(self) -> None:
        while not self._flowing:
            await self._resumed.wait()

    async def handle(self, client: SocketStream) -> None:
        self.accepted += 1
        self.connections += 1
        try:
            async with (
                client,
                await anyio.connect_tcp(self.target_host, self.target_port) as upstream,
            ):
                async with anyio.create_task_group() as pumps:
                    pumps.start_soon(self._pump, client, upstream, pumps)
                    pumps.start_soon(self._pump, upstream, client, pumps)
        except OSError:
            pass  # the target is down: the client sees the connection close
        finally:
            self.connections -= 1

    async def _pump(self, source: SocketStream, sink: SocketStream, pumps: TaskGroup) -> None:
        try:
            while True:
                await self._flow()
                data = await source.receive(65536)
                if not self._flowing:
                    self.held += len(data)
                    await self._flow()  # bytes read as the hole opened are held too
                    self.held -= len(data)
                await sink.send(data)
                self.forwarded += len(data)
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass
        pumps.cancel_scope.cancel()  # one side is done: close both


@asynccontextmanager
async def blackhole_proxy(target_port: int, target_host: str = LOOPBACK) -> AsyncIterator[Proxy]:
    """A `Proxy` to `target_host`:`target_port` for the duration of the block."""
    listener = await anyio.create_tcp_listener(local_host=LOOPBACK, local_port=0)
    port = int(listener.extra(anyio.abc.SocketAttribute.local_port))
    async with listener, anyio.create_task_group() as group:
        proxy = Proxy(port, target_port, target_host)
        group.start_soon(listener.serve, proxy.handle, group)
        try:
            yield proxy
        finally:
            proxy.resume()
            group.cancel_scope.cancel()


async def answers_within_one_bound(url: str, hole: Proxy) -> None:
    """A task made and finished on the store at `url`, then `hole.black_hole()`: each of
    `tools/call`, `tasks/get` and `tasks/cancel` fails "Task store unavailable" within one
    `store_timeout` (1 s, with a margin), however long the store's own timeout."""
    mcp = FastMCP("outage")
    mcp.add_extension(TasksExtension(url, store_timeout=timedelta(seconds=1)))

    @mcp.tool(task=True)
    async def echo(text: str) -> str:
        return text

    async with memory_wire(mcp) as wire:
        task_id = (await wire.call_tool("echo", {"text": "before"}))["taskId"]
        assert (await wire.wait(task_id))["status"] == "completed"
        hole.black_hole()
        for request in (
            lambda: wire.call_tool("echo", {"text": "in the hole"}),
            lambda: wire.get(task_id),
            lambda: wire.cancel(task_id),
        ):
            started = time.monotonic()
            with pytest.raises(WireError, match="Task store unavailable"):
                await request()
            assert time.monotonic() - started < 1.5
        hole.resume()


@asynccontextmanager
async def tcp_relay(
    upstream: httpx2.URL, relay: Callable[[SocketStream], Awaitable[None]]
) -> AsyncIterator[str]:
    """Serve `relay` for each connection on a free loopback port; yield `upstream` with that
    port (an HTTP proxy in front of a server: the relay decides what it passes on)."""
    listener = await anyio.create_tcp_listener(local_host=LOOPBACK)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as group:
        group.start_soon(listener.serve, relay)
        yield str(upstream.copy_with(port=port))
        group.cancel_scope.cancel()


# --- a SQLite lock held by another process -------------------------------------------

_HOLDER = """
import select, sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
select.select([sys.stdin], [], [], float(sys.argv[2]))  # a line on stdin releases it early
conn.execute("ROLLBACK")
print("released", flush=True)
"""


class SQLiteLock:
    """A subprocess holding `BEGIN IMMEDIATE` (the write lock) on `path` for `seconds`."""

    def __init__(self, path: Path, seconds: float) -> None:
        self.path = path
        self.seconds = seconds
        self.process: subprocess.Popen[bytes] | None = None
        self.out: Lines | None = None

    async def __aenter__(self) -> SQLiteLock:
        self.process = subprocess.Popen(  # noqa: ASYNC220 - starting it does not block
            [sys.executable, "-c", _HOLDER, str(self.path), str(self.seconds)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        self.out = Lines(self.process.stdout)  # type: ignore[arg-type]
        await self.held()
        return self

    async def held(self, within: float = 20) -> None:
        assert self.out is not None
        await self.out.wait_for(lambda line: line == "locked", within)

    async def released(self, within: float | None = None) -> None:
        assert self.out is not None
        await self.out.wait_for(lambda line: line == "released", within or self.seconds + 10)

    @property
    def done(self) -> bool:
        """The lock is released (or its process is gone)."""
        out, process = self.out, self.process
        return (
            process is None
            or process.poll() is not None
            or (out is not None and "released" in out.lines)
        )

    def release(self) -> None:
        if self.process is not None and self.process.poll() is None and self.process.stdin:
            with contextlib.suppress(OSError):
                self.process.stdin.write(b"go\n")
                self.process.stdin.flush()

    async def __aexit__(self, *exc: object) -> None:
        if self.process is not None:
            end_process(self.process)
