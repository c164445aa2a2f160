"""fastmcp-tasks benchmark: sync vs. task latency, tasks/get cost, throughput, memory,
input round trips, push (subscriptions/listen) vs. polling, and a progress flood.
Latency, tasks/get and throughput also run on the SQLite and Redis stores, beside the
memory store and interleaved with it (`--stores memory,sqlite,redis`; Redis only when
it answers), and a Redis scale-out phase runs tasks through a `concurrency=0` front end
on 1 and on 2 worker processes (`python -m fastmcp_tasks worker bench/redis_app.py`).

Run from the repo root:

    .venv/bin/python -m bench.run            # full run (~4.5 min on 2 cores)
    .venv/bin/python -m bench.run --quick    # smoke run (~55 s)

Prints a table and writes JSON to bench/results/latest.json. See bench/README.md.

The harness speaks raw JSON-RPC (like tests/wire.py, but without its schema
validation, which would dominate the timings): in memory through
`fastmcp.Client`'s session dispatcher, and over Streamable HTTP to uvicorn on a
free 127.0.0.1 port, with a minimal keep-alive HTTP/1.1 client (`--http-client
httpx` for httpx). Client and server share one process and one event loop.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import contextlib
import gc
import itertools
import json
import math
import os
import platform
import random
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python bench/run.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import anyio
import anyio.lowlevel
import anyio.to_thread
import httpx
import uvicorn
from fastmcp import Client, Context, FastMCP
from mcp.client.extension import ClientExtension, NotificationBinding
from mcp.shared.exceptions import MCPError
from mcp_types import NotificationParams
from pydantic import ConfigDict

from fastmcp_tasks import Progress, TasksExtension
from fastmcp_tasks.listen import METHOD_LISTEN
from fastmcp_tasks.stores import sqlite_schema
from fastmcp_tasks.stores.base import TaskRecord

TASKS = "io.modelcontextprotocol/tasks"
MODERN = "2026-07-28"
TERMINAL = frozenset({"completed", "failed", "cancelled"})
TOOL = "noop"
#: Task stores the latency, tasks/get and throughput phases can run on (`--stores`).
STORES = ("memory", "sqlite", "redis")
RESULTS = Path(__file__).resolve().parent / "results"

SUB = "io.modelcontextprotocol/subscriptionId"
#: The client capabilities a request declares so that `ctx.elicit()` may park its task.
ELICITATION: dict[str, Any] = {"elicitation": {}}

# `opt_in`: False (no tasks opt-in), True (the opt-in), or a dict of client
# capabilities to declare along with the opt-in (e.g. `ELICITATION`).
OptIn = bool | dict[str, Any]
Send = Callable[[str, dict[str, Any], OptIn], Awaitable[dict[str, Any]]]


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

    `url` names the task store (`memory://`, `sqlite:///...` or `redis://...` from
    `store_url`).
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
    directory (`tempfile.mkdtemp`), removed with its `-wal`/`-shm` files afterwards; or
    Redis under a prefix of its own (`redis_prefix`), whose keys are deleted afterwards
    (`RedisTaskStore.clear()`, once the server using it is down)."""
    if store == "memory":
        yield "memory://"
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
    """`memory`, `sqlite` or `redis`: the store the server's extension uses."""
    return str(extension(server).store.scheme)  # type: ignore[attr-defined]


def redis_counts(server: FastMCP) -> dict[str, int]:
    """Sizes of a Redis store's indexes (`active`, `queued`, `terminal`), read directly."""
    keys = extension(server).store.keys  # type: ignore[attr-defined]
    client = redis_client()
    return {
        "active": int(client.zcard(keys.active)),
        "queued": int(client.zcard(keys.queued)),
        "terminal": int(client.zcard(keys.terminal)),
    }


def redis_used_mib() -> float:
    """The whole Redis server's `used_memory`, in MiB."""
    return round(int(redis_client().info("memory")["used_memory"]) / 2**20, 1)


def sqlite_path(server: FastMCP) -> Path | None:
    """The database file of a server on the SQLite store (`None` for the other stores)."""
    return getattr(extension(server).store, "path", None)


def retained(server: FastMCP) -> int:
    """Tasks the server's store holds (SQLite, Redis: counted on a connection of our own)."""
    if store_kind(server) == "redis":
        counts = redis_counts(server)
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


# --- transports (copied from tests/wire.py, minus schema validation) -----------------------


class RpcError(Exception):
    pass


def _caps(opt_in: OptIn) -> dict[str, Any]:
    if isinstance(opt_in, dict):
        return {**opt_in, "extensions": {TASKS: {}}}
    return {"extensions": {TASKS: {}}} if opt_in else {}


class Stream:
    """The messages of one `subscriptions/listen` stream, each stamped when it arrived.

    A message is the JSON-RPC notification (`notifications/subscriptions/acknowledged`,
    `notifications/tasks`) or, last, the listen request's answer (`result` or `error`).
    The stamp is `time.perf_counter_ns()` taken by the reader as soon as it has parsed it.
    """

    def __init__(self) -> None:
        self._send, self._receive = anyio.create_memory_object_stream[tuple[int, dict[str, Any]]](
            math.inf
        )

    def put(self, message: dict[str, Any]) -> None:
        self._send.send_nowait((time.perf_counter_ns(), message))

    async def next(self, limit_s: float = 30) -> tuple[int, dict[str, Any]]:
        with anyio.fail_after(limit_s):
            return await self._receive.receive()

    async def task_frame(self, limit_s: float = 30) -> tuple[int, dict[str, Any]]:
        """The next `notifications/tasks` params (the ack is skipped; an end is an error)."""
        while True:
            stamp, message = await self.next(limit_s)
            if message.get("method") == "notifications/tasks":
                return stamp, message["params"]
            if "result" in message or "error" in message:
                raise RpcError(f"listen stream ended: {message}")


Listen = Callable[[list[str]], contextlib.AbstractAsyncContextManager[Stream]]


@dataclass
class Conn:
    """A connected transport: `send` for one sequential caller, `channel()` for concurrent ones.

    `listen(task_ids)` opens a `subscriptions/listen` stream on those tasks (memory:
    only when the transport was opened with `listen=True`).
    """

    send: Send
    channel: Callable[[], contextlib.AbstractAsyncContextManager[Send]]
    clock: ServerClock | None = None  # HTTP only: server-side time per request
    listen: Listen | None = None


class _AnyParams(NotificationParams):
    model_config = ConfigDict(extra="allow")


class _ListenRouter(ClientExtension):
    """In memory: hands each `notifications/tasks` to the stream of its subscription id."""

    identifier = "io.modelcontextprotocol/tasks-bench-listener"

    def __init__(self) -> None:
        self.streams: dict[Any, Stream] = {}

    def route(self, method: str, params: dict[str, Any]) -> None:
        stream = self.streams.get((params.get("_meta") or {}).get(SUB))
        if stream is not None:
            stream.put({"method": method, "params": params})

    def notifications(self) -> list[NotificationBinding[Any]]:
        async def handle(params: _AnyParams) -> None:
            self.route("notifications/tasks", params.model_dump(by_alias=True, exclude_none=True))

        return [
            NotificationBinding(
                method="notifications/tasks", params_type=_AnyParams, handler=handle
            )
        ]

    async def on_message(self, message: Any) -> None:
        method = getattr(message, "method", None)
        if method == "notifications/subscriptions/acknowledged":
            self.route(method, message.params.model_dump(by_alias=True, exclude_none=True))


class BareClient(Client):  # type: ignore[type-arg]
    """A `fastmcp.Client` without the internal client extensions that companion packages
    register (importing `fastmcp_tasks` registers a transparent `TasksClientExtension`):
    the harness speaks raw JSON-RPC and declares each request's capabilities itself."""

    _auto_internal_extensions = False


@asynccontextmanager
async def memory_transport(server: FastMCP, listen: bool = False) -> AsyncIterator[Conn]:
    """`listen=True` gives the client a notification binding for `notifications/tasks`
    (used only by the push and flood phases, so the other phases' client is unchanged)."""
    router = _ListenRouter() if listen else None
    extra: dict[str, Any] = {}
    if router is not None:
        extra = {"extensions": [router], "message_handler": router.on_message}
    listens = 0
    async with BareClient(server, **extra) as client:
        session = client.session

        async def send(method: str, params: dict[str, Any], opt_in: OptIn) -> dict[str, Any]:
            data: dict[str, Any] = {"method": method, "params": dict(params)}
            opts: dict[str, Any] = {}
            session._stamp(data, opts)
            meta = data["params"].setdefault("_meta", {})
            meta["io.modelcontextprotocol/clientCapabilities"] = _caps(opt_in)
            try:
                return await session._dispatcher.send_raw_request(method, data["params"], opts)
            except MCPError as exc:
                raise RpcError(f"{exc.error.code}: {exc.error.message}") from None

        @asynccontextmanager
        async def channel() -> AsyncIterator[Send]:
            yield send  # in-process dispatch: one session serves any number of callers

        @asynccontextmanager
        async def open_listen(task_ids: list[str]) -> AsyncIterator[Stream]:
            nonlocal listens
            assert router is not None, "memory_transport(..., listen=True) for listen streams"
            listens += 1
            sub = f"bench-listen-{listens}"
            stream = router.streams[sub] = Stream()

            async def drive() -> None:
                data: dict[str, Any] = {
                    "method": METHOD_LISTEN,
                    "params": {"notifications": {"taskIds": task_ids}},
                }
                opts: dict[str, Any] = {"request_id": sub}
                session._stamp(data, opts)
                meta = data["params"].setdefault("_meta", {})
                meta["io.modelcontextprotocol/clientCapabilities"] = _caps(True)
                try:
                    result = await session._dispatcher.send_raw_request(
                        METHOD_LISTEN, data["params"], opts
                    )
                    stream.put({"id": sub, "result": result})
                except MCPError as exc:
                    error = {"code": exc.error.code, "message": exc.error.message}
                    stream.put({"id": sub, "error": error})

            try:
                async with anyio.create_task_group() as group:
                    group.start_soon(drive)
                    yield stream
                    group.cancel_scope.cancel()
            finally:
                router.streams.pop(sub, None)

        yield Conn(send, channel, listen=open_listen if router is not None else None)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RawHttp:
    """A minimal HTTP/1.1 keep-alive client on one asyncio connection.

    It does only what this benchmark needs (POST, Content-Length or chunked
    bodies) and costs a small fraction of httpx per request, so the HTTP
    numbers are dominated by the server stack (uvicorn, Starlette, the MCP
    Streamable HTTP transport, FastMCP), not by the client.
    """

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(
        self, path: str, body: bytes, headers: dict[str, str]
    ) -> tuple[int, dict[str, str], bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        head = [
            f"POST {path} HTTP/1.1",
            f"Host: {self.host}:{self.port}",
            "Content-Type: application/json",
            f"Content-Length: {len(body)}",
        ]
        head += [f"{k}: {v}" for k, v in headers.items()]
        self.writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
        raw = await self.reader.readuntil(b"\r\n\r\n")
        lines = raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        rheaders = {}
        for line in lines[1:]:
            if line:
                k, _, v = line.partition(":")
                rheaders[k.strip().lower()] = v.strip()
        if "content-length" in rheaders:
            payload = await self.reader.readexactly(int(rheaders["content-length"]))
        elif rheaders.get("transfer-encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
                chunks.append(await self.reader.readexactly(size + 2))
                if size == 0:
                    break
            payload = b"".join(c[:-2] for c in chunks)
        else:  # pragma: no cover - not produced by uvicorn for these requests
            payload = await self.reader.read()
            rheaders["connection"] = "close"
        if rheaders.get("connection", "").lower() == "close":
            await self.aclose()
        return status, rheaders, payload

    async def aclose(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(Exception):
                await self.writer.wait_closed()
        self.reader = self.writer = None


async def raw_sse(
    host: str, port: int, path: str, body: bytes, headers: dict[str, str], stream: Stream
) -> None:
    """POST on a fresh connection and put every JSON-RPC message of the SSE answer on `stream`.

    Like `RawHttp`, only what this benchmark needs: uvicorn answers a listen with
    a chunked `text/event-stream` whose events carry one `data:` line of JSON
    each (or, for an error, a plain JSON body).
    """
    reader, writer = await asyncio.open_connection(host, port)
    try:
        head = [
            f"POST {path} HTTP/1.1",
            f"Host: {host}:{port}",
            "Content-Type: application/json",
            f"Content-Length: {len(body)}",
        ]
        head += [f"{k}: {v}" for k, v in headers.items()]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
        lines = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        rheaders = {}
        for line in lines[1:]:
            if line:
                k, _, v = line.partition(":")
                rheaders[k.strip().lower()] = v.strip()
        chunked = rheaders.get("transfer-encoding", "").lower() == "chunked"
        if not rheaders.get("content-type", "").startswith("text/event-stream"):
            if "content-length" in rheaders:
                payload = await reader.readexactly(int(rheaders["content-length"]))
            else:
                payload = await reader.read()
            stream.put(json.loads(payload))
            return
        pending = b""
        while True:
            if chunked:
                size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                data = (await reader.readexactly(size + 2))[:-2]
                if size == 0:
                    return
            else:
                data = await reader.read(65536)
                if not data:
                    return
            *complete, pending = (pending + data).split(b"\n")
            for line in complete:
                if line.startswith(b"data:") and line[5:].strip():
                    stream.put(json.loads(line[5:]))
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


def _parse_http(content_type: str, payload: bytes) -> dict[str, Any]:
    """The JSON-RPC message of a response, JSON or a single-message SSE stream."""
    if content_type.startswith("text/event-stream"):
        for line in payload.decode().splitlines():
            if line.startswith("data:") and line[5:].strip():
                message = json.loads(line[5:])
                if "result" in message or "error" in message:
                    return message  # type: ignore[no-any-return]
        raise RpcError(f"no JSON-RPC response in SSE body: {payload[:300]!r}")
    return json.loads(payload)  # type: ignore[no-any-return]


HTTP_CLIENT = "raw"  # or "httpx"; set from --http-client


class ServerClock:
    """ASGI wrapper: wall time of each HTTP request inside the server app.

    With one sequential caller this is the server's share of a round trip
    (uvicorn's h11 parsing and socket I/O excluded). Samples go to `label`.
    """

    def __init__(self, app: Any) -> None:
        self.app = app
        self.label: str | None = None
        self.samples: dict[str, list[int]] = {}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        label = self.label
        if scope["type"] != "http" or label is None:
            return await self.app(scope, receive, send)
        start = time.perf_counter_ns()
        try:
            await self.app(scope, receive, send)
        finally:
            self.samples.setdefault(label, []).append(time.perf_counter_ns() - start)


@asynccontextmanager
async def http_transport(server: FastMCP, listen: bool = False) -> AsyncIterator[Conn]:
    port = _free_port()
    clock = ServerClock(server.http_app())
    # Keep-alive connections may idle through an untimed fill (100k Redis tasks take
    # longer than uvicorn's default 5 s keep-alive): the idle timeout is 10 min here.
    config = uvicorn.Config(
        clock,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        lifespan="on",
        timeout_keep_alive=600,
    )
    uv = uvicorn.Server(config)
    counter = 0

    def frame(method: str, params: dict[str, Any], opt_in: OptIn) -> tuple[bytes, dict[str, str]]:
        from bench.load_wire import request_frame  # load_wire imports this module

        nonlocal counter
        counter += 1
        return request_frame(method, params, _caps(opt_in), counter, "bench")

    def answer(status: int, content_type: str, payload: bytes) -> dict[str, Any]:
        message = _parse_http(content_type, payload)
        if "error" in message:
            raise RpcError(f"{message['error']['code']}: {message['error']['message']}")
        if status != 200:
            raise RpcError(f"HTTP {status}: {payload[:300]!r}")
        return message["result"]  # type: ignore[no-any-return]

    @asynccontextmanager
    async def channel() -> AsyncIterator[Send]:
        # One keep-alive connection per caller (with httpx, a single pool shared
        # by 50 callers spends most of its time in httpcore's pool bookkeeping).
        if HTTP_CLIENT == "httpx":
            url = f"http://127.0.0.1:{port}/mcp"
            async with httpx.AsyncClient(
                timeout=30, limits=httpx.Limits(max_connections=1)
            ) as http:

                async def send(
                    method: str, params: dict[str, Any], opt_in: OptIn
                ) -> dict[str, Any]:
                    body, headers = frame(method, params, opt_in)
                    headers["Content-Type"] = "application/json"
                    r = await http.post(url, content=body, headers=headers)
                    return answer(r.status_code, r.headers.get("content-type", ""), r.content)

                yield send
        else:
            raw = RawHttp("127.0.0.1", port)
            try:

                async def send(
                    method: str, params: dict[str, Any], opt_in: OptIn
                ) -> dict[str, Any]:
                    body, headers = frame(method, params, opt_in)
                    status, rheaders, payload = await raw.post("/mcp", body, headers)
                    return answer(status, rheaders.get("content-type", ""), payload)

                yield send
            finally:
                await raw.aclose()

    @asynccontextmanager
    async def open_listen(task_ids: list[str]) -> AsyncIterator[Stream]:
        # Each listen stream is one long POST on a connection of its own.
        stream = Stream()
        params = {"notifications": {"taskIds": task_ids}}
        body, headers = frame(METHOD_LISTEN, params, True)

        async def pump() -> None:
            if HTTP_CLIENT == "httpx":
                headers["Content-Type"] = "application/json"
                url = f"http://127.0.0.1:{port}/mcp"
                async with (
                    httpx.AsyncClient(timeout=60) as http,
                    http.stream("POST", url, content=body, headers=headers) as response,
                ):
                    if not response.headers.get("content-type", "").startswith("text/event"):
                        stream.put(json.loads(await response.aread()))
                        return
                    async for line in response.aiter_lines():
                        if line.startswith("data:") and line[5:].strip():
                            stream.put(json.loads(line[5:]))
            else:
                await raw_sse("127.0.0.1", port, "/mcp", body, headers, stream)

        async with anyio.create_task_group() as listener:
            listener.start_soon(pump)
            yield stream
            listener.cancel_scope.cancel()

    async with anyio.create_task_group() as group:
        group.start_soon(uv.serve)
        with anyio.fail_after(10):
            while not uv.started:  # noqa: ASYNC110 - uvicorn exposes a flag, not an event
                await anyio.sleep(0.01)
        try:
            async with channel() as send:
                yield Conn(send, channel, clock, open_listen)
        finally:
            uv.should_exit = True


TRANSPORTS = {"memory": memory_transport, "http": http_transport}


@asynccontextmanager
async def servers(
    kind: str, stores: list[str], max_tasks: int = 200_000
) -> AsyncIterator[dict[str, tuple[FastMCP, Conn]]]:
    """One `noop` server per store, all up at once, each behind a `kind` transport of its
    own; a SQLite store gets a fresh database file, deleted when the servers are down."""
    async with contextlib.AsyncExitStack() as stack:
        up: dict[str, tuple[FastMCP, Conn]] = {}
        for store in stores:
            server = make_server(max_tasks, url=await stack.enter_async_context(store_url(store)))
            up[store] = (server, await stack.enter_async_context(TRANSPORTS[kind](server)))
        yield up


# --- wire helpers -----------------------------------------------------------------------


async def sync_call(send: Send) -> dict[str, Any]:
    result = await send("tools/call", {"name": TOOL, "arguments": {}}, False)
    assert result.get("resultType") != "task", result
    return result


async def create_task(send: Send) -> str:
    result = await send("tools/call", {"name": TOOL, "arguments": {}}, True)
    assert result["resultType"] == "task", result
    return result["taskId"]  # type: ignore[no-any-return]


async def get_task(send: Send, task_id: str) -> dict[str, Any]:
    return await send("tasks/get", {"taskId": task_id}, True)


async def run_task(send: Send, poll_sleep: float) -> int:
    """Create a task and poll it to completion; return how many `tasks/get` it took."""
    task_id = await create_task(send)
    polls = 0
    while True:
        polls += 1
        task = await get_task(send, task_id)
        if task["status"] in TERMINAL:
            assert task["status"] == "completed", task
            return polls
        if poll_sleep:
            await asyncio.sleep(poll_sleep)


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
    if store_kind(server) == "redis":
        return redis_counts(server)["active"]
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


# --- statistics ---------------------------------------------------------------------------


def pct(samples_ns: list[int], q: float) -> float:
    """Nearest-rank percentile, in microseconds."""
    ordered = sorted(samples_ns)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1] / 1000


def summary(samples_ns: list[int]) -> dict[str, Any]:
    return {
        "n": len(samples_ns),
        "p50_us": pct(samples_ns, 50),
        "p99_us": pct(samples_ns, 99),
        "min_us": min(samples_ns) / 1000,
        "mean_us": sum(samples_ns) / len(samples_ns) / 1000,
    }


async def timed(
    fn: Callable[[], Awaitable[Any]], conn: Conn | None = None, label: str | None = None
) -> int:
    """Client-observed nanoseconds of one call; the server's share goes to `conn.clock`."""
    clock = conn.clock if conn is not None else None
    if clock is not None:
        clock.label = label
    start = time.perf_counter_ns()
    await fn()
    elapsed = time.perf_counter_ns() - start
    if clock is not None:
        clock.label = None
    return elapsed


def server_side(*conns: Conn) -> dict[str, Any]:
    """Summaries of the server-side (ASGI) samples collected on `conns`, by label."""
    merged: dict[str, list[int]] = {}
    for conn in conns:
        if conn.clock is not None:
            for label, values in conn.clock.samples.items():
                merged.setdefault(label, []).extend(values)
    return {label: summary(values) for label, values in merged.items()}


async def fan_out(
    conn: Conn, total: int, concurrency: int, job: Callable[[Send], Awaitable[Any]]
) -> tuple[float, list[Any]]:
    """Run `job` `total` times with `concurrency` callers, each on its own channel.

    Returns (seconds, results). Channels are opened before the clock starts.
    """
    remaining = total
    results: list[Any] = []
    go = anyio.Event()
    ready = 0

    async def caller() -> None:
        nonlocal remaining, ready
        async with conn.channel() as send:
            ready += 1
            await go.wait()
            while remaining > 0:
                remaining -= 1
                results.append(await job(send))

    gc.collect()
    async with anyio.create_task_group() as group:
        for _ in range(concurrency):
            group.start_soon(caller)
        while ready < concurrency:  # noqa: ASYNC110 - wait until every channel is open
            await asyncio.sleep(0)
        start = time.perf_counter_ns()
        go.set()
    return (time.perf_counter_ns() - start) / 1e9, results


# --- the measurements -----------------------------------------------------------------------


@dataclass
class Config:
    warmup: int
    latency_samples: int
    get_samples: int
    get_ids: int
    retained_small: int
    retained_large: int
    throughput_calls: int
    concurrency: int
    poll_sleep_ms: float
    memory_tasks: int
    transports: list[str]
    input_rounds: int = 200
    push_tasks: int = 100
    poll_tasks: int = 20
    poll_transports: tuple[str, ...] = ("memory", "http")
    flood_updates: int = 10_000
    flood_runs: int = 3
    stores: list[str] = field(default_factory=lambda: list(STORES))
    store_transports: tuple[str, ...] = ("memory", "http")
    redis_skipped: str | None = None  # why the default run left Redis out
    scaleout_tasks: int = 2000
    scaleout_sleep_ms: float = 50.0
    scaleout_transport: str = "memory"
    worker_concurrency: int = 10
    watch_batch: int = 100
    scaleout_observe: str = "poll"
    scaleout_pollers: int = 2
    scaleout_poll_ms: float = 20.0
    scaleout_order: tuple[int, ...] = (1, 2, 2, 1)

    def stores_for(self, kind: str) -> list[str]:
        """The stores of the latency, tasks/get and throughput phases on transport `kind`
        (outside `store_transports`: the memory store only, as before the store dimension)."""
        return self.stores if kind in self.store_transports else ["memory"]


async def bench_latency(kind: str, cfg: Config) -> dict[str, Any]:
    """Metric 1: sync vs. task-creating `tools/call`, one caller, interleaved sample by sample.

    One server per store, all up at once. Each round: a sync call (on the first
    store's server; the store plays no part in it) and one creation per store, in
    an order that rotates round by round (`rotated`). After each creation the
    harness waits, untimed, until the task's run has finished, so every sample
    starts from an idle server.
    """
    async with servers(kind, cfg.stores_for(kind)) as up:
        ref = next(iter(up.values()))[1]
        for _ in range(cfg.warmup):
            await sync_call(ref.send)
            for server, conn in up.values():
                await drain(server, await create_task(conn.send))
        gc.collect()
        sync_ns: list[int] = []
        create_ns: dict[str, list[int]] = {store: [] for store in up}
        for i in range(cfg.latency_samples):
            for store in rotated([None, *up], i):
                if store is None:
                    sync_ns.append(await timed(lambda: sync_call(ref.send), ref, "sync"))
                    continue
                server, conn = up[store]
                created: list[str] = []
                create_ns[store].append(
                    await timed(
                        lambda c=created, s=conn.send: _append(c, create_task(s)),
                        conn,
                        f"create_{store}",
                    )
                )
                await drain(server, created[0])
        server_times = server_side(*(conn for _, conn in up.values()))
    out: dict[str, Any] = {
        "sync": summary(sync_ns),
        "stores": {store: {"create": summary(ns)} for store, ns in create_ns.items()},
    }
    if server_times:
        out["server_side"] = server_times
    return out


def rotated(kinds: list[Any], i: int) -> list[Any]:
    """Round `i`'s order of the interleaved kinds: rotated by one each round, so every kind
    follows every other equally often. (A call right after a different kind of work, above
    all after a SQLite store's worker-thread round trips, is slower than after its own
    kind; a fixed order would charge that to whichever kind comes next.)"""
    k = i % len(kinds)
    return kinds[k:] + kinds[:k]


async def _append(into: list[Any], value: Awaitable[Any]) -> None:
    into.append(await value)


async def fill_store(server: FastMCP, count: int, template: TaskRecord) -> tuple[float, list[str]]:
    """Insert `count` completed tasks directly into the store; (seconds taken, their ids).

    Memory store: each record is what a completed run leaves behind (the store's
    `create`, then `transition(..., "completed", result=...)`), with its own copy
    of a real task's result. SQLite store: rows equal to `template` (a task run
    through the wire) but for id and times, written in one transaction on a
    connection of the harness's own (`executemany` of the store's INSERT). Redis
    store: the same records through the store's own `create` (its Lua script and
    argument encoding), pipelined 1,000 at a time (`redis_fill`).
    """
    ext = extension(server)
    store = ext.store
    ids = [secrets.token_urlsafe(24) for _ in range(count)]
    start = time.perf_counter()
    if store_kind(server) == "redis":
        await redis_fill(store, ids, template)
        return time.perf_counter() - start, ids
    path = sqlite_path(server)
    if path is not None:

        def insert() -> None:
            rows = []
            for task_id in ids:
                now = time.time()
                record = replace(
                    template, task_id=task_id, created_at=now, updated_at=now, terminal_at=now
                )
                rows.append(sqlite_schema.to_row(record))
            with contextlib.closing(sqlite3.connect(path, timeout=30, isolation_level=None)) as db:
                db.execute("BEGIN IMMEDIATE")
                db.executemany(sqlite_schema.INSERT_TASK, rows)
                db.execute("COMMIT")

        await anyio.to_thread.run_sync(insert)
        return time.perf_counter() - start, ids
    result = template.result
    assert result is not None
    text = json.dumps(result)
    for task_id in ids:
        now = time.time()
        record = TaskRecord(
            task_id=task_id,
            tool=TOOL,
            status="working",
            created_at=now,
            updated_at=now,
            arguments={},
            poll_interval_ms=5000,
            retention_ms=ext.retention_ms,
        )
        await store.create(record)
        await store.transition(record.task_id, "completed", result=json.loads(text))
    return time.perf_counter() - start, ids


async def redis_fill(store: Any, ids: list[str], template: TaskRecord) -> None:
    """Create a completed copy of `template` per id in a Redis store, 1,000 per pipeline.

    `RedisTaskStore.create` builds the script call and awaits it on `store._client`;
    with a pipeline in its place the call is only queued (nothing awaits real I/O, so
    no other coroutine can run, and use the pipeline, before the client is put back).
    """
    client = store._client
    for start in range(0, len(ids), 1000):
        pipe = client.pipeline(transaction=False)
        store._client = pipe
        try:
            for task_id in ids[start : start + 1000]:
                now = time.time()
                await store.create(
                    replace(
                        template, task_id=task_id, created_at=now, updated_at=now, terminal_at=now
                    )
                )
        finally:
            store._client = client
        replies = await pipe.execute()
        assert all(reply == "ok" for reply in replies), sorted(set(map(str, replies)))


async def make_completed(server: FastMCP, send: Send, count: int) -> list[str]:
    """Create `count` tasks through the wire, each run to completion."""
    ids = []
    for _ in range(count):
        task_id = await create_task(send)
        await drain(server, task_id)
        ids.append(task_id)
    return ids


async def bench_get(kind: str, cfg: Config) -> dict[str, Any]:
    """Metric 2: `tasks/get` of completed tasks on servers retaining few and many tasks.

    Per store, one server retaining `retained_small` tasks and one retaining
    `retained_large`; every server is up at once and the samples are
    interleaved (each round a sync call on the first small server and, per store,
    a get on its small server and one on its large server, in an order that
    rotates round by round), so the ratios compare like with like even when the
    machine's load drifts.
    """
    rng = random.Random(2663)
    large_max = max(200_000, cfg.retained_large + 1000)
    async with (
        servers(kind, cfg.stores_for(kind)) as small_up,
        servers(kind, cfg.stores_for(kind), large_max) as large_up,
    ):
        ref = next(iter(small_up.values()))[1]
        stores: dict[str, dict[str, Any]] = {}
        pick: dict[tuple[str, str], list[str]] = {}
        for store in small_up:
            (small_server, small), (large_server, large) = small_up[store], large_up[store]
            small_ids = await make_completed(small_server, small.send, cfg.retained_small)
            wire_ids = await make_completed(large_server, large.send, min(100, cfg.retained_large))
            record = await extension(large_server).store.get(wire_ids[0])
            assert record is not None and record.status == "completed", record
            fill_s, filled = await fill_store(
                large_server, cfg.retained_large - retained(large_server), record
            )
            await quiet(large_server)
            all_large = wire_ids + filled
            pick[store, "small"] = [rng.choice(small_ids) for _ in range(cfg.get_ids)]
            pick[store, "large"] = [rng.choice(all_large) for _ in range(cfg.get_ids)]
            del all_large, filled
            stores[store] = {
                "retained_small": retained(small_server),
                "retained_large": retained(large_server),
                "fill_seconds": round(fill_s, 2),
            }
            if sqlite_path(large_server) is not None:
                stores[store]["db_mib_large"] = db_mib(large_server)
            if store == "redis":  # the whole Redis server, every store of the run
                stores[store]["redis_used_mib_large"] = redis_used_mib()
        sends = {
            (store, size): up[store][1]
            for store in small_up
            for size, up in (("small", small_up), ("large", large_up))
        }
        for i in range(cfg.warmup):
            await sync_call(ref.send)
            for key, conn in sends.items():
                await get_task(conn.send, pick[key][i % cfg.get_ids])
        gc.collect()
        samples: dict[Any, list[int]] = {"sync": [], **{key: [] for key in sends}}
        for i in range(cfg.get_samples):
            for key in rotated(["sync", *sends], i):
                if key == "sync":
                    samples["sync"].append(await timed(lambda: sync_call(ref.send), ref, "sync"))
                    continue
                conn, task_id = sends[key], pick[key][i % cfg.get_ids]
                samples[key].append(
                    await timed(
                        lambda t=task_id, s=conn.send: get_task(s, t),
                        conn,
                        f"get_{key[1]}_{key[0]}",
                    )
                )
        server_times = server_side(*(c for _, c in [*small_up.values(), *large_up.values()]))
    for key in sends:
        stores[key[0]][key[1]] = summary(samples[key])
    return {
        **({"server_side": server_times} if server_times else {}),
        "distinct_ids_sampled": cfg.get_ids,
        "sync_reference": summary(samples["sync"]),
        "stores": stores,
    }


async def bench_throughput(kind: str, cfg: Config) -> dict[str, Any]:
    """Metric 3: calls/s with `concurrency` callers: sync calls, task creations (no
    polling) and end-to-end tasks (create, poll until completed), per store.

    Each run kind does `throughput_calls` in two halves, in palindrome order (sync,
    creation per store, tasks per store, then the same backwards), so a linear
    drift of the machine's speed cancels out. After a creation run the harness
    waits, untimed, until every created task has been recorded as completed.
    """
    poll_sleep = cfg.poll_sleep_ms / 1000
    n, c = cfg.throughput_calls, cfg.concurrency
    half = (n // 2, n - n // 2)

    async def sync_job(send: Send) -> None:
        await sync_call(send)

    async def create_job(send: Send) -> None:
        await create_task(send)

    async def task_job(send: Send) -> int:
        return await run_task(send, poll_sleep)

    async with servers(kind, cfg.stores_for(kind)) as up:
        ref = next(iter(up.values()))[1]
        warm = max(c, cfg.warmup)
        await fan_out(ref, warm, c, sync_job)
        for server, conn in up.values():
            await fan_out(conn, warm, c, create_job)
            await settle(server)
            await fan_out(conn, warm, c, task_job)
            await quiet(server)
        order: list[tuple[str, str | None]] = [("sync", None)]
        order += [("create", store) for store in up] + [("task", store) for store in up]
        seconds: dict[tuple[str, str | None], float] = {}
        polls: dict[str, list[int]] = {store: [] for store in up}
        settled: dict[str, float] = {store: 0.0 for store in up}
        for part, runs in enumerate((order, order[::-1])):
            for run, store in runs:
                server, conn = up[store] if store is not None else (None, ref)
                job = {"sync": sync_job, "create": create_job, "task": task_job}[run]
                took, results = await fan_out(conn, half[part], c, job)
                seconds[run, store] = seconds.get((run, store), 0.0) + took
                if run == "task" and store is not None:
                    polls[store] += results
                if server is not None and store is not None:
                    if run == "create":
                        settled[store] += await settle(server)
                    else:
                        await quiet(server)
        db = {store: db_mib(server) for store, (server, _) in up.items()}
    return {
        "calls": n,
        "concurrency": c,
        "poll_sleep_ms": cfg.poll_sleep_ms,
        "sync_seconds": seconds["sync", None],
        "sync_tps": n / seconds["sync", None],
        "stores": {
            store: {
                "create_seconds": seconds["create", store],
                "create_tps": n / seconds["create", store],
                "settle_seconds_after_creation": round(settled[store], 3),
                "task_seconds": seconds["task", store],
                "task_tps": n / seconds["task", store],
                "gets_per_task_mean": sum(polls[store]) / len(polls[store]),
                "gets_per_task_max": max(polls[store]),
                **({"db_mib": db[store]} if db[store] is not None else {}),
            }
            for store in up
        },
    }


# --- input, push and flood (tools of a `Probe` server) ------------------------------------

YES = {"action": "accept", "content": {"value": True}}


async def call_probe(send: Send, name: str, arguments: dict[str, Any], opt_in: OptIn = True) -> str:
    result = await send("tools/call", {"name": name, "arguments": arguments}, opt_in)
    assert result["resultType"] == "task", result
    return result["taskId"]  # type: ignore[no-any-return]


async def parked_key(send: Send, task_id: str, previous: str | None = None) -> str:
    """Untimed: poll until the task is parked on one key other than `previous`; that key."""
    with anyio.fail_after(10):
        while True:
            task = await get_task(send, task_id)
            requests = task.get("inputRequests") or {}
            if task["status"] == "input_required" and requests and previous not in requests:
                (key,) = requests
                return key  # type: ignore[no-any-return]


async def bench_input(kind: str, cfg: Config) -> dict[str, Any]:
    """Metric 5: the `ctx.elicit()` round trip, `tasks/update` until the run has resumed.

    One task (`asker`) parks on `ctx.elicit("go?", bool)` round after round. Each
    round: a sync `tools/call` (the interleaved reference), then the clock starts,
    `tasks/update` answers the outstanding key and `tasks/get` polls in a tight
    loop. `applied`: the first get showing the update took effect (`working`, or
    parked on the next key); `next_key`: the first get showing the task parked on
    the next key, i.e. the coroutine resumed and asked again.
    """
    server = make_server(probe=Probe())
    warm = min(cfg.warmup, 50)
    total = warm + cfg.input_rounds
    async with TRANSPORTS[kind](server) as conn:
        send = conn.send
        task_id = await call_probe(send, "asker", {"rounds": total + 1}, ELICITATION)
        key = await parked_key(send, task_id)
        samples: dict[str, list[int]] = {"sync": [], "applied": [], "next_key": []}
        gets: list[int] = []
        gc.collect()
        for i in range(total):
            sync_ns = await timed(lambda: sync_call(send))
            start = time.perf_counter_ns()
            await send("tasks/update", {"taskId": task_id, "inputResponses": {key: YES}}, True)
            applied_ns, polls = 0, 0
            while True:
                task = await get_task(send, task_id)
                now = time.perf_counter_ns()
                polls += 1
                status, requests = task["status"], task.get("inputRequests") or {}
                assert status in ("working", "input_required"), task
                moved = key not in requests
                if not applied_ns and moved:
                    applied_ns = now - start
                if status == "input_required" and requests and moved:
                    (key,) = requests
                    break
            if i >= warm:
                samples["sync"].append(sync_ns)
                samples["applied"].append(applied_ns)
                samples["next_key"].append(now - start)
                gets.append(polls)
        await send("tasks/update", {"taskId": task_id, "inputResponses": {key: YES}}, True)
        with anyio.fail_after(10):
            while (await get_task(send, task_id))["status"] != "completed":
                pass
    return {
        "rounds": cfg.input_rounds,
        "sync_reference": summary(samples["sync"]),
        "applied": summary(samples["applied"]),
        "next_key": summary(samples["next_key"]),
        "gets_per_round_mean": sum(gets) / len(gets),
    }


async def bench_push(kind: str, cfg: Config) -> dict[str, Any]:
    """Metric 6: completion-to-observed latency, pushed (`subscriptions/listen`) vs. polled.

    Push: `push_tasks` tasks one after another; each `waiter` task gets a listen
    stream of its own, and once its current state has arrived the harness opens
    the tool's gate. Latency: from the tool's clock reading just before it
    returns to the subscriber's parsing of the `completed` frame.

    Poll (when `kind` is in `poll_transports`): `poll_tasks` tasks at once, each
    with a client that polls `tasks/get` every `pollIntervalMs` (the tool's
    default) from a random phase (stratified over the interval); every gate opens
    0.1 s after the polling starts. Latency: from the tool's clock reading to the
    client's receipt of the `tasks/get` that shows `completed`.
    """
    probe = Probe()
    server = make_server(probe=probe)
    out: dict[str, Any] = {}
    async with TRANSPORTS[kind](server, listen=True) as conn:
        assert conn.listen is not None
        send = conn.send
        warm = min(cfg.warmup, 20)
        push_ns: list[int] = []
        frames_per_task: list[int] = []
        for i in range(warm + cfg.push_tasks):
            key = f"push-{i}"
            task_id = await call_probe(send, "waiter", {"key": key})
            async with conn.listen([task_id]) as stream:
                _, first = await stream.task_frame()
                assert first["status"] == "working", first
                probe.gate(key).set()
                frames, end = 1, {}
                while True:
                    stamp, task = await stream.task_frame()
                    frames += 1
                    if task["status"] in TERMINAL:
                        break
                assert task["status"] == "completed", task
                while "result" not in end and "error" not in end:  # frames may follow
                    _, end = await stream.next()
                assert end.get("result", {}).get("resultType") == "complete", end
            if i >= warm:
                push_ns.append(stamp - probe.done_ns[key])
                frames_per_task.append(frames)
        out["push"] = summary(push_ns)
        out["push_frames_per_task_max"] = max(frames_per_task)
        if kind in cfg.poll_transports and cfg.poll_tasks > 0:
            out["poll"] = await _poll_baseline(conn, probe, cfg.poll_tasks)
    return out


async def _poll_baseline(conn: Conn, probe: Probe, count: int) -> dict[str, Any]:
    rng = random.Random(2663)
    keys = [f"poll-{i}" for i in range(count)]
    task_ids: dict[str, str] = {}
    interval_ms = None
    for key in keys:
        created = await conn.send("tools/call", {"name": "waiter", "arguments": {"key": key}}, True)
        task_ids[key] = created["taskId"]
        interval_ms = created.get("pollIntervalMs")
    assert isinstance(interval_ms, int), "the waiter tool's tasks carry no pollIntervalMs"
    interval = interval_ms / 1000
    phases = [(i + rng.random()) / count * interval for i in range(count)]
    rng.shuffle(phases)
    observed: dict[str, int] = {}
    polls: list[int] = []
    release_after = 0.1

    async def poller(key: str, phase: float, t0: float) -> None:
        async with conn.channel() as send:
            await anyio.sleep_until(t0 + phase)
            n = 0
            while True:
                task = await get_task(send, task_ids[key])
                n += 1
                if task["status"] in TERMINAL:
                    observed[key] = time.perf_counter_ns()
                    polls.append(n)
                    return
                await anyio.sleep(interval)

    started = time.perf_counter()
    async with anyio.create_task_group() as group:
        t0 = anyio.current_time() + 0.05
        for key, phase in zip(keys, phases, strict=True):
            group.start_soon(poller, key, phase, t0)
        await anyio.sleep_until(t0 + release_after)
        for key in keys:
            probe.gate(key).set()
    return {
        **summary([observed[key] - probe.done_ns[key] for key in keys]),
        "poll_interval_ms": interval_ms,
        "tasks": count,
        "gets_per_task_mean": sum(polls) / len(polls),
        "seconds": round(time.perf_counter() - started, 2),
    }


def feed_backlogs(server: FastMCP) -> list[int]:
    """Changes queued, unread, in each subscription to the memory store's change feed."""
    subscribers = getattr(extension(server).store, "_subscribers", {})
    return sorted(s.statistics().current_buffer_used for s in subscribers)


async def quiesce(server: FastMCP) -> None:
    """Untimed: wait until every change-feed reader has caught up (no run disturbs the next)."""
    with anyio.fail_after(60):
        while any(feed_backlogs(server)):  # noqa: ASYNC110
            await asyncio.sleep(0.001)
    gc.collect()


async def _flood_once(
    server: FastMCP,
    conn: Conn,
    probe: Probe,
    key: str,
    n: int,
    subscribe: bool,
    trace: bool = False,
) -> dict[str, Any]:
    """One `flood` task, with or without a subscriber; durations from the gate opening."""
    send = conn.send
    task_id = await call_probe(send, "flood", {"key": key, "n": n})
    await quiesce(server)
    if not subscribe:
        if trace:
            tracemalloc.start()
        opened = time.perf_counter_ns()
        probe.gate(key).set()
        with anyio.fail_after(120):
            await probe.finish(key).wait()
        out = {
            "tool_s": (probe.done_ns[key] - opened) / 1e9,
            "feed_backlogs_at_done": feed_backlogs(server),
        }
        if trace:
            with anyio.fail_after(30):  # until the run has been recorded as completed
                while (await get_task(send, task_id))["status"] not in TERMINAL:
                    pass
            out["traced_peak_kib"] = tracemalloc.get_traced_memory()[1] / 1024
            tracemalloc.stop()
        return out
    assert conn.listen is not None
    async with conn.listen([task_id]) as stream:
        _, first = await stream.task_frame()
        assert first["status"] == "working", first
        statuses: list[str] = []
        terminal_at: int | None = None
        ended_at: int | None = None
        backlogs: list[int] = []
        gc.collect()
        rss_before = _rss_bytes()
        if trace:
            tracemalloc.start()
        opened = time.perf_counter_ns()
        probe.gate(key).set()
        # In memory the listen answer may overtake the last notifications (the client
        # dispatches them through its binding queue): read until both have arrived.
        while terminal_at is None or ended_at is None:
            stamp, message = await stream.next(limit_s=120)
            if message.get("method") == "notifications/tasks":
                statuses.append(message["params"]["status"])
                if terminal_at is None and statuses[-1] in TERMINAL:
                    terminal_at = stamp
                    backlogs = feed_backlogs(server)
                    if trace:  # traced until the subscriber has seen the outcome
                        _, peak = tracemalloc.get_traced_memory()
                        tracemalloc.stop()
            elif "result" in message or "error" in message:
                ended_at = stamp
        rss_after = _rss_bytes()
    out = {
        # task frames after the gate opened (the current state before it is not counted)
        "frames": len(statuses),
        "frames_active": sum(1 for s in statuses if s not in TERMINAL),
        "frames_terminal": sum(1 for s in statuses if s in TERMINAL),
        "last_status": statuses[-1],
        "tool_s": (probe.done_ns[key] - opened) / 1e9,
        "observed_s": (terminal_at - opened) / 1e9,  # first terminal frame
        "stream_end_s": (max(ended_at, terminal_at) - opened) / 1e9,
        "rss_delta_kib": (rss_after - rss_before) / 1024,
        "feed_backlogs_at_terminal_frame": backlogs,
    }
    if trace:
        out["traced_peak_kib"] = peak / 1024
    return out


async def bench_flood(kind: str, cfg: Config) -> dict[str, Any]:
    """Metric 7: a task setting its status message `flood_updates` times, one subscriber.

    Runs alternate with and without a subscriber (`flood_runs` each, medians
    reported), then one more run of each under `tracemalloc`: with a subscriber,
    started once the stream has delivered the current state and stopped when
    the subscriber receives the terminal frame; without, from the gate opening
    until the task is completed. The peak is the traced growth of the whole
    process (server included). Timings come from runs without tracemalloc.
    """
    probe = Probe()
    server = make_server(probe=probe)
    n = cfg.flood_updates
    async with TRANSPORTS[kind](server, listen=True) as conn:
        await _flood_once(server, conn, probe, "warm-sub", min(n, 1000), True)
        await _flood_once(server, conn, probe, "warm-nosub", min(n, 1000), False)
        with_sub: list[dict[str, Any]] = []
        without: list[dict[str, Any]] = []
        for i in range(cfg.flood_runs):
            with_sub.append(await _flood_once(server, conn, probe, f"sub-{i}", n, True))
            without.append(await _flood_once(server, conn, probe, f"nosub-{i}", n, False))
        traced = await _flood_once(server, conn, probe, "traced", n, True, trace=True)
        traced_alone = await _flood_once(server, conn, probe, "traced-alone", n, False, trace=True)

    def median(values: list[float]) -> float:
        return sorted(values)[(len(values) - 1) // 2]

    worst = max([*with_sub, traced], key=lambda r: r["frames"])

    return {
        "updates": n,
        "runs": cfg.flood_runs,
        "frames_max": worst["frames"],
        "frames_median": median([r["frames"] for r in with_sub]),
        "frames_active_of_max": worst["frames_active"],
        "frames_terminal_of_max": worst["frames_terminal"],
        "last_statuses": sorted({str(r["last_status"]) for r in [*with_sub, traced]}),
        "subscribed_tool_s": median([r["tool_s"] for r in with_sub]),
        "subscribed_observed_s": median([r["observed_s"] for r in with_sub]),
        "subscribed_stream_end_s": median([r["stream_end_s"] for r in with_sub]),
        "unsubscribed_tool_s": median([r["tool_s"] for r in without]),
        "rss_delta_kib_max": max(r["rss_delta_kib"] for r in with_sub),
        "traced_peak_kib": traced["traced_peak_kib"],
        "traced_peak_kib_no_subscriber": traced_alone["traced_peak_kib"],
        "traced_run": traced,
        "traced_run_no_subscriber": traced_alone,
        "with_subscriber": with_sub,
        "without_subscriber": without,
    }


# --- Redis scale-out: a front end (concurrency=0) and worker processes ----------------------

REDIS_APP = Path(__file__).resolve().parent / "redis_app.py"
SLEEPER = "sleeper"  # the tool of bench/redis_app.py
#: Worker processes started and not yet seen to exit (killed at exit, if any is left).
_live_workers: set[subprocess.Popen[bytes]] = set()
_worker_logs = itertools.count(1)


@atexit.register
def _kill_leftover_workers() -> None:
    for proc in list(_live_workers):
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        _live_workers.discard(proc)


class Worker:
    """One `python -m fastmcp_tasks worker bench/redis_app.py:mcp` process (the worker
    command, as deployed), its output in `log`; `stop()` sends SIGTERM, then SIGKILL."""

    def __init__(self, url: str, concurrency: int, sleep_ms: float, log: Path) -> None:
        self.log = log
        self.signalled = False
        root = Path(__file__).resolve().parent.parent
        cmd = [
            sys.executable,
            "-m",
            "fastmcp_tasks",
            "worker",
            f"{REDIS_APP}:mcp",
            "--concurrency",
            str(concurrency),
            "--grace",
            "5",
        ]
        env = {**os.environ, "BENCH_REDIS_URL": url, "BENCH_SLEEP_MS": str(sleep_ms)}
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
        _live_workers.add(self.proc)

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
        _live_workers.discard(self.proc)
        return {
            "pid": self.proc.pid,
            "returncode": self.proc.returncode,
            "sigkill": killed,
            "stop_seconds": round(time.perf_counter() - start, 2),
        }


async def _scaleout_once(
    server: FastMCP,
    conn: Conn,
    url: str,
    workers: int,
    tasks: int,
    cfg: Config,
    logs: Path,
    warmup: int = 0,
) -> dict[str, Any]:
    """Start `workers` worker processes, run `tasks` tasks through the front end, stop them.

    The clock runs from the first `tools/call` to the arrival of the last `completed`
    frame. `concurrency` callers create the tasks (no polling); every `watch_batch`
    created ids get a `subscriptions/listen` stream of their own on the front end,
    read until each of its tasks has sent a terminal frame. `warmup` tasks run the
    same way first, untimed (the front end's first creations and listens).
    """
    procs: list[Worker] = []
    try:
        t0 = time.perf_counter()
        for i in range(workers):
            log = logs / f"worker-{next(_worker_logs)}-of-{workers}-{i}.log"
            procs.append(Worker(url, cfg.worker_concurrency, cfg.scaleout_sleep_ms, log))
        for proc in procs:
            await proc.ready()
        startup_s = time.perf_counter() - t0
        if warmup:
            await _scaleout_drive(conn, warmup, cfg)
        await _scaleout_idle(server)
        gc.collect()
        cpu = _cpu_seconds(procs)
        drive = await _scaleout_drive(conn, tasks, cfg)
        cpu = {k: round(v - cpu[k], 3) for k, v in _cpu_seconds(procs).items()}
        await _scaleout_idle(server)
    finally:
        for proc in procs:  # SIGTERM to all first, then wait for each
            proc.terminate()
        stops = [await proc.stop() for proc in procs]
    ids = drive.pop("ids")
    wall_start = drive.pop("wall_start")
    records = _completed_records(server, ids)
    pids = {proc.proc.pid: i for i, proc in enumerate(procs)}
    per_worker = [0] * workers
    for owner, _, _ in records:
        per_worker[pids[int(owner.split(":")[1])]] += 1
    created = [c for _, c, _ in records]
    ended = [t for _, _, t in records]
    turnaround = sorted(int((t - c) * 1e9) for _, c, t in records)
    return {
        "workers": workers,
        "tasks": tasks,
        **drive,
        # from the task hashes (wall clock, every process on this host): the store's own
        # span and how long the last completion took to reach the listening client
        "store_span_seconds": max(ended) - min(created),
        "first_create_to_first_completed_seconds": min(ended) - min(created),
        "last_completed_to_observed_seconds": wall_start + drive["seconds"] - max(ended),
        "turnaround_ms_p50_max": [pct(turnaround, 50) / 1000, turnaround[-1] / 1e6],
        "tasks_per_worker": per_worker,
        # CPU seconds spent while the clock ran (a little past it for the workers)
        "cpu_seconds": cpu,
        "worker_startup_seconds": round(startup_s, 2),
        **({"warmup_tasks": warmup} if warmup else {}),
        "worker_stops": stops,
    }


def _cpu_seconds(procs: list[Worker]) -> dict[str, float]:
    """CPU seconds (user + system) used so far by this process (the front end and the
    client), by each worker (`/proc/<pid>/stat`) and by the Redis server (`INFO cpu`)."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {"front_end": time.process_time()}
    for i, proc in enumerate(procs):
        with open(f"/proc/{proc.proc.pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
        out[f"worker_{i}"] = (int(fields[11]) + int(fields[12])) / tick
    info = redis_client().info("cpu")
    out["redis"] = float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
    return out


async def _scaleout_idle(server: FastMCP) -> None:
    """Untimed: wait until the store's indexes hold no active and no queued task."""
    with anyio.fail_after(30):
        while (counts := redis_counts(server))["active"] or counts["queued"]:  # noqa: ASYNC110
            await anyio.sleep(0.01)


def _print_worker_logs(logs: Path) -> None:
    """On a failure: the end of every worker's output."""
    for log in sorted(logs.iterdir()):
        print(f"--- {log.name}\n{log.read_text(errors='replace')[-3000:]}", file=sys.stderr)


def _completed_records(server: FastMCP, ids: list[str]) -> list[tuple[str, float, float]]:
    """Untimed: (lease owner `host:pid:token`, created_at, terminal_at) of each of `ids`,
    read from the task hashes; each must be `completed`."""
    keys = extension(server).store.keys  # type: ignore[attr-defined]
    client = redis_client()
    out: list[tuple[str, float, float]] = []
    for start in range(0, len(ids), 1000):
        pipe = client.pipeline(transaction=False)
        for task_id in ids[start : start + 1000]:
            pipe.hmget(keys.task(task_id), "status", "lease_owner", "created_at", "terminal_at")
        for status, owner, created, ended in pipe.execute():
            assert status == "completed", status
            out.append((owner, float(created), float(ended)))
    return out


async def _scaleout_drive(conn: Conn, tasks: int, cfg: Config) -> dict[str, Any]:
    """Create `tasks` tasks with `concurrency` callers (no polling) and observe each one
    completed, through the front end, by `scaleout_observe`:

    - `poll`: `scaleout_pollers` pollers walk the created ids in creation order (poller
      j takes every j-th), each asking `tasks/get` for its oldest unfinished task and,
      while that one is not finished, again every `scaleout_poll_ms`. The queue is oldest
      first, so a task is mostly polled once or twice; the last completion is seen at
      most one interval late.
    - `listen`: every `watch_batch` created ids get a `subscriptions/listen` stream of
      their own, read until each of its tasks has sent a terminal frame.
    """
    remaining = tasks
    ids: list[str] = []
    pending: list[str] = []
    done: dict[str, tuple[int, str]] = {}  # task id -> (when seen, terminal status)
    frames = gets = 0
    interval = cfg.scaleout_poll_ms / 1000

    async def watch(task_ids: list[str]) -> None:
        nonlocal frames
        assert conn.listen is not None
        left = set(task_ids)
        async with conn.listen(task_ids) as stream:
            while left:  # in memory the listen answer may overtake the last frames
                stamp, message = await stream.next(limit_s=300)
                if message.get("method") == "notifications/tasks":
                    frames += 1
                    task = message["params"]
                    if task["status"] in TERMINAL and task["taskId"] in left:
                        left.discard(task["taskId"])
                        done[task["taskId"]] = (stamp, task["status"])
                elif "error" in message:
                    raise RpcError(f"listen failed: {message['error']}")

    async def poller(send: Send, j: int) -> None:
        nonlocal gets
        i = j
        while i < tasks:
            if i >= len(ids):  # not created yet
                await anyio.sleep(interval)
                continue
            with anyio.fail_after(300):
                task = await get_task(send, ids[i])
            gets += 1
            if task["status"] in TERMINAL:
                done[ids[i]] = (time.perf_counter_ns(), task["status"])
                i += cfg.scaleout_pollers
            else:
                await anyio.sleep(interval)

    async def creator(send: Send, group: Any) -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            task_id = await call_probe(send, SLEEPER, {})
            ids.append(task_id)
            if cfg.scaleout_observe == "listen":
                pending.append(task_id)
                if len(pending) >= cfg.watch_batch:
                    group.start_soon(watch, pending[:])
                    pending.clear()

    async with contextlib.AsyncExitStack() as stack:  # a channel per caller and poller
        sends = [
            await stack.enter_async_context(conn.channel())
            for _ in range(cfg.concurrency + cfg.scaleout_pollers)
        ]
        wall_start = time.time()
        start = time.perf_counter_ns()
        async with anyio.create_task_group() as group:
            if cfg.scaleout_observe == "poll":
                for j in range(cfg.scaleout_pollers):
                    group.start_soon(poller, sends[cfg.concurrency + j], j)
            async with anyio.create_task_group() as creators:
                for send in sends[: cfg.concurrency]:
                    creators.start_soon(creator, send, group)
            created_ns = time.perf_counter_ns() - start
            if pending:
                group.start_soon(watch, pending[:])
    last = max(stamp for stamp, _ in done.values())
    statuses = {status for _, status in done.values()}
    assert len(done) == tasks and statuses == {"completed"}, (len(done), statuses)
    seconds = (last - start) / 1e9
    streams = math.ceil(tasks / cfg.watch_batch)
    observed = (
        {"gets_per_task": gets / tasks}
        if cfg.scaleout_observe == "poll"
        else {"listen_streams": streams, "frames_per_task": frames / tasks}
    )
    return {
        "ids": ids,
        "wall_start": wall_start,
        "seconds": seconds,
        "tps": tasks / seconds,
        "create_seconds": created_ns / 1e9,
        **observed,
    }


async def bench_scaleout(cfg: Config) -> dict[str, Any]:
    """Redis scale-out: `scaleout_tasks` tasks of `sleeper` (`await anyio.sleep(0.05)`)
    through an in-process front end (`concurrency=0`), run by 1 and by 2 worker processes.

    Runs in `scaleout_order` (full: the palindrome 1, 2, 2, 1 workers, half the tasks
    each, so a linear drift cancels as in the throughput metric; quick: 1, 2, all the
    tasks each). Each run starts its workers (untimed; the first run then also runs
    warm-up tasks, untimed), the clock runs from the first create to the last
    completion seen on the listen streams, and its workers then get SIGTERM
    (SIGKILL after 15 s).
    """
    kind = cfg.scaleout_transport
    n = cfg.scaleout_tasks
    order = cfg.scaleout_order
    k = order.count(1)
    if sorted(set(order)) != [1, 2] or order.count(2) != k:
        raise SystemExit(f"--scaleout-order: 1 and 2 the same number of times, got {order}")
    parts = [n // k + (1 if j < n % k else 0) for j in range(k)]
    logs = Path(tempfile.mkdtemp(prefix="fastmcp-tasks-bench-workers-"))
    from bench.redis_app import build

    runs: list[dict[str, Any]] = []
    try:
        async with store_url("redis") as url:
            server = build(url, concurrency=0, sleep_ms=cfg.scaleout_sleep_ms)
            async with TRANSPORTS[kind](server, listen=True) as conn:
                for part, workers in enumerate(order):
                    occurrence = order[:part].count(workers)
                    tasks = parts[occurrence]
                    warm = min(100, tasks // 2) if part == 0 else 0
                    runs.append(
                        await _scaleout_once(server, conn, url, workers, tasks, cfg, logs, warm)
                    )
                    print(
                        f"  scale-out {workers} worker(s): {runs[-1]['tps']:.0f} tasks/s",
                        file=sys.stderr,
                    )
    except BaseException:
        _print_worker_logs(logs)
        raise
    finally:
        shutil.rmtree(logs, ignore_errors=True)
    by: dict[int, dict[str, Any]] = {}
    for workers in (1, 2):
        mine = [r for r in runs if r["workers"] == workers]
        tasks, seconds = sum(r["tasks"] for r in mine), sum(r["seconds"] for r in mine)
        by[workers] = {"tasks": tasks, "seconds": round(seconds, 3), "tps": tasks / seconds}
    return {
        "transport": kind,
        "tasks": n,
        "sleep_ms": cfg.scaleout_sleep_ms,
        "worker_concurrency": cfg.worker_concurrency,
        "callers": cfg.concurrency,
        "ceiling_tps_per_worker": cfg.worker_concurrency * 1000 / cfg.scaleout_sleep_ms,
        "order": order,
        "observed_by": (
            f"{cfg.scaleout_pollers} tasks/get pollers (every {cfg.scaleout_poll_ms:g} ms)"
            if cfg.scaleout_observe == "poll"
            else f"subscriptions/listen, {cfg.watch_batch} tasks per stream"
        ),
        "one_worker": by[1],
        "two_workers": by[2],
        "runs": runs,
        "workers_left": sum(1 for proc in _live_workers if proc.poll() is None),
    }


# --- memory (in a fresh interpreter, memory transport only) -----------------------------------


def _rss_bytes() -> int:
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
        before = _rss_bytes()
        elapsed, _ = await fan_out(conn, count, concurrency, create)
        await settle()
        after = _rss_bytes()
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


# --- report -------------------------------------------------------------------------------------


def _git_head() -> str | None:
    root = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "fastmcp_tasks"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip() + ("+dirty" if dirty else "")


def machine() -> dict[str, Any]:
    from importlib.metadata import version

    import fastmcp

    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "fastmcp": fastmcp.__version__,
        "mcp": version("mcp"),
        "fastmcp_tasks": version("fastmcp-tasks"),
        "fastmcp_tasks_commit": _git_head(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
    }


def ratios_and_rows(results: dict[str, Any]) -> tuple[dict[str, Any], list[tuple[str, ...]]]:
    ratios: dict[str, Any] = {}
    rows: list[tuple[str, ...]] = []

    def check(value: float, op: str, target: float) -> str:
        ok = value <= target if op == "<=" else value >= target
        return "PASS" if ok else "MISS"

    def row(
        kind: str,
        metric: str,
        value: str,
        ratio: float | None = None,
        name: str = "",
        op: str = "",
        target: float | None = None,
    ) -> None:
        if ratio is None:
            rows.append((kind, metric, value, "", "", ""))
            return
        if target is None:  # informational: no target, no verdict
            ratios.setdefault(kind, {})[name] = {"value": ratio, "target": None, "pass": None}
            rows.append((kind, metric, value, _ratio(ratio), "", "info"))
            return
        ratios.setdefault(kind, {})[name] = {
            "value": ratio,
            "target": f"{op} {target}",
            "pass": check(ratio, op, target) == "PASS",
        }
        rows.append(
            (kind, metric, value, f"{ratio:.2f}", f"{op} {target}", check(ratio, op, target))
        )

    for kind, r in results["transports"].items():
        lat, get, thr = r.get("latency"), r.get("get"), r.get("throughput")
        # The memory store keeps the historical targets; another store's rows are
        # labelled with it and carry info ratios, plus the targets against memory.
        if lat:
            s = lat["sync"]
            row(kind, "sync tools/call p50 / p99", f"{s['p50_us']:.0f} / {s['p99_us']:.0f} us")
            for store, st in lat["stores"].items():
                c = st["create"]
                row(
                    kind,
                    f"{_on(store)}task-creating tools/call p50 / p99",
                    f"{c['p50_us']:.0f} / {c['p99_us']:.0f} us",
                    c["p50_us"] / s["p50_us"],
                    f"{_prefix(store)}creation_p50/sync_p50",
                    *CREATION_TARGETS.get(store, ()),
                )
        if get:
            ref = get["sync_reference"]
            base = ref["p50_us"]
            row(
                kind,
                "sync tools/call p50 / p99 (interleaved with gets)",
                f"{ref['p50_us']:.0f} / {ref['p99_us']:.0f} us",
            )
            memory = get["stores"].get("memory")
            for store, st in get["stores"].items():
                g1, g2, pre = st["small"], st["large"], _prefix(store)
                for size, g in (("small", g1), ("large", g2)):
                    label = f"{_on(store)}tasks/get p50 / p99 ({st[f'retained_{size}']:,} retained)"
                    value = f"{g['p50_us']:.0f} / {g['p99_us']:.0f} us"
                    if store in GET_TARGETS:  # the target: against the same rounds' sync
                        name = f"{pre}get_p50_{size}/sync_p50"
                        row(kind, label, value, g["p50_us"] / base, name, *GET_TARGETS[store])
                    elif memory is not None:  # the target: against the memory store
                        row(
                            kind,
                            f"{label} / memory store's",
                            value,
                            g["p50_us"] / memory[size]["p50_us"],
                            f"{pre}get_p50_{size}/memory_get_p50_{size}",
                            "<=",
                            2.0,
                        )
                    else:
                        row(kind, label, value, g["p50_us"] / base, f"{pre}get_p50_{size}/sync_p50")
                row(
                    kind,
                    f"{_on(store)}tasks/get p50 large/small",
                    "",
                    g2["p50_us"] / g1["p50_us"],
                    f"{pre}get_p50_large/get_p50_small",
                    *(("<=", 1.1) if store == "memory" else ()),
                )
        if thr:
            row(
                kind,
                f"sync throughput ({thr['calls']} calls, {thr['concurrency']} callers)",
                f"{thr['sync_tps']:.0f} calls/s",
            )
            memory = thr["stores"].get("memory")
            for store, st in thr["stores"].items():
                pre = _prefix(store)
                row(
                    kind,
                    f"{_on(store)}task throughput (create+poll, "
                    f"{st['gets_per_task_mean']:.1f} gets/task)",
                    f"{st['task_tps']:.0f} tasks/s",
                    st["task_tps"] / thr["sync_tps"],
                    f"{pre}task_tps/sync_tps",
                    *((">=", 0.5) if store == "memory" else ()),
                )
            for store, st in thr["stores"].items():
                pre, label = _prefix(store), f"{_on(store)}task creation throughput (no polling)"
                value = f"{st['create_tps']:.0f} creates/s"
                if store != "memory" and memory is not None:
                    row(
                        kind,
                        f"{label} / memory store's",
                        value,
                        st["create_tps"] / memory["create_tps"],
                        f"{pre}create_tps/memory_create_tps",
                        *((">=", 0.5) if store == "sqlite" else ()),
                    )
                else:
                    row(
                        kind,
                        label,
                        value,
                        st["create_tps"] / thr["sync_tps"],
                        f"{pre}create_tps/sync_tps",
                    )
        inp, push, flood = r.get("input"), r.get("push"), r.get("flood")
        if inp:
            ref, applied, resumed = inp["sync_reference"], inp["applied"], inp["next_key"]
            row(
                kind,
                "sync tools/call p50 / p99 (interleaved with updates)",
                f"{ref['p50_us']:.0f} / {ref['p99_us']:.0f} us",
            )
            row(
                kind,
                f"input: tasks/update -> resumed p50 / p99 ({inp['rounds']} rounds, "
                f"{inp['gets_per_round_mean']:.1f} gets)",
                f"{applied['p50_us']:.0f} / {applied['p99_us']:.0f} us",
                applied["p50_us"] / ref["p50_us"],
                "input_applied_p50/sync_p50",
            )
            if resumed != applied:  # the first get did not already show the next key
                row(
                    kind,
                    "input: tasks/update -> parked on next key p50 / p99",
                    f"{resumed['p50_us']:.0f} / {resumed['p99_us']:.0f} us",
                    resumed["p50_us"] / ref["p50_us"],
                    "input_next_key_p50/sync_p50",
                )
        if push:
            p = push["push"]
            row(
                kind,
                f"push: completion -> listen frame p50 / p99 ({p['n']} tasks)",
                f"{p['p50_us']:.0f} / {p['p99_us']:.0f} us",
            )
            poll = push.get("poll")
            if poll:
                row(
                    kind,
                    f"poll every {poll['poll_interval_ms']} ms: completion -> tasks/get "
                    f"p50 / p99 ({poll['tasks']} tasks)",
                    f"{poll['p50_us'] / 1000:.0f} / {poll['p99_us'] / 1000:.0f} ms",
                    p["p50_us"] / poll["p50_us"],
                    "push_p50/poll_p50",
                )
        if flood:
            frames, n = flood["frames_max"], flood["updates"]
            last_ok = flood["last_statuses"] == ["completed"]
            verdict = "PASS" if frames / n <= 0.1 and last_ok else "MISS"
            ratios.setdefault(kind, {})["flood_frames/updates"] = {
                "value": frames / n,
                "target": "<= 0.1 and last frame completed",
                "pass": verdict == "PASS",
            }
            rows.append(
                (
                    kind,
                    f"flood: frames to 1 subscriber for {n:,} messages (max run)",
                    f"{frames} = {flood['frames_active_of_max']} working + "
                    f"{flood['frames_terminal_of_max']} terminal"
                    + ("" if last_ok else f"; last: {'/'.join(flood['last_statuses'])}"),
                    _ratio(frames / n),
                    "<= 0.1",
                    verdict,
                )
            )
            row(
                kind,
                "flood, subscribed: tool done / 1st completed frame / stream end",
                f"{flood['subscribed_tool_s'] * 1000:.0f} / "
                f"{flood['subscribed_observed_s'] * 1000:.0f} / "
                f"{flood['subscribed_stream_end_s'] * 1000:.0f} ms",
            )
            row(
                kind,
                "flood, no subscriber: tool done (subscribed/unsubscribed)",
                f"{flood['unsubscribed_tool_s'] * 1000:.0f} ms",
                flood["subscribed_tool_s"] / flood["unsubscribed_tool_s"],
                "flood_tool_s_subscribed/unsubscribed",
            )
            row(
                kind,
                "flood: traced peak growth while subscriber reads (whole process)",
                f"{flood['traced_peak_kib']:.0f} KiB "
                f"(no subscriber: {flood['traced_peak_kib_no_subscriber']:.0f} KiB)",
            )
    so = results.get("scaleout")
    if so:
        kind, one, two = so["transport"], so["one_worker"], so["two_workers"]
        ceiling = so["ceiling_tps_per_worker"]
        row(
            kind,
            f"redis scale-out: ceiling per worker ({so['worker_concurrency']} slots x "
            f"1/{so['sleep_ms']:g} ms)",
            f"{ceiling:.0f} tasks/s",
        )
        row(
            kind,
            f"redis scale-out, 1 worker ({one['tasks']:,} tasks): first create -> last "
            "completed / ceiling",
            f"{one['tps']:.0f} tasks/s",
            one["tps"] / ceiling,
            "redis_scaleout_1w_tps/ceiling",
        )
        row(
            kind,
            f"redis scale-out, 2 workers ({two['tasks']:,} tasks) / 1 worker",
            f"{two['tps']:.0f} tasks/s",
            two["tps"] / one["tps"],
            "redis_scaleout_2w_tps/1w_tps",
            ">=",
            1.7,
        )
    mem = results.get("memory")
    if mem:
        value = mem["kib_per_task"]
        ratios.setdefault("memory", {})["kib_per_task"] = {
            "value": value,
            "target": "<= 2",
            "pass": value <= 2,
        }
        rows.append(
            (
                "memory",
                f"RSS growth per retained task ({mem['tasks']:,} tasks)",
                f"{value:.2f} KiB/task",
                f"{value:.2f}",
                "<= 2",
                check(value, "<=", 2),
            )
        )
    return ratios, rows


def _on(store: str) -> str:
    """Row label prefix of a store's rows (none for the memory store)."""
    return "" if store == "memory" else f"{store} store: "


def _prefix(store: str) -> str:
    """Ratio name prefix of a store's ratios (none for the memory store)."""
    return "" if store == "memory" else f"{store}_"


#: Per store, the target of `creation_p50/sync_p50` (none: info).
CREATION_TARGETS: dict[str, tuple[str, float]] = {"memory": ("<=", 1.3), "redis": ("<=", 2.0)}
#: Per store, the target of `get_p50/sync_p50`; a store without one (SQLite) is
#: compared with the memory store's get instead (`<= 2.0`).
GET_TARGETS: dict[str, tuple[str, float]] = {"memory": ("<=", 0.6), "redis": ("<=", 1.5)}


def _ratio(value: float) -> str:
    return f"{value:.2f}" if value >= 0.01 else f"{value:.1e}"


def print_table(rows: list[tuple[str, ...]]) -> None:
    header = ("transport", "metric", "value", "ratio", "target", "status")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    line = "  ".join("-" * w for w in widths)
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    print(line)
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


# --- main -------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="smoke run (~55 s): 300 samples, 20,000 retained, 300 calls, 5,000 memory tasks, "
        "50 input rounds, 20 pushed and 5 polled tasks (HTTP only), 1 flood run, "
        "SQLite and Redis beside memory on the in-memory transport only, 300 scale-out tasks",
    )
    p.add_argument("--transports", default="memory,http", help="comma list of memory,http")
    p.add_argument(
        "--stores",
        help="task stores of the latency, tasks/get and throughput phases, each on its own "
        "server, interleaved (memory,sqlite,redis; redis only if it answers, else SKIPPED); "
        "SQLite on a fresh temporary file, Redis under a fresh prefix, per server; "
        "the scale-out phase runs when redis is listed",
    )
    p.add_argument(
        "--redis-url",
        default=REDIS_URL,
        help=f"Redis for the redis store and the scale-out ({REDIS_URL}); each server uses a "
        "prefix of its own and deletes its keys afterwards",
    )
    p.add_argument(
        "--scaleout-tasks",
        type=int,
        help="tasks of the Redis scale-out per worker count, split over its runs "
        "(2000; quick 300); 0 skips",
    )
    p.add_argument(
        "--scaleout-order",
        help="worker counts of the scale-out runs, in order (1,2,2,1; quick 1,2)",
    )
    p.add_argument(
        "--worker-concurrency", type=int, default=10, help="--concurrency of each worker (10)"
    )
    p.add_argument(
        "--scaleout-sleep-ms", type=float, default=50.0, help="how long each task sleeps (50)"
    )
    p.add_argument(
        "--scaleout-transport",
        choices=("memory", "http"),
        default="memory",
        help="transport between the harness and the in-process front end (memory)",
    )
    p.add_argument(
        "--scaleout-observe",
        choices=("poll", "listen"),
        default="poll",
        help="how the scale-out sees completions: pollers walking the ids in creation order "
        "(poll, default) or subscriptions/listen streams (listen)",
    )
    p.add_argument("--scaleout-pollers", type=int, default=2, help="scale-out pollers (poll; 2)")
    p.add_argument(
        "--scaleout-poll-ms",
        type=float,
        default=20.0,
        help="a poller's interval while its task is unfinished (poll; 20)",
    )
    p.add_argument(
        "--watch-batch",
        type=int,
        default=100,
        help="created tasks per subscriptions/listen stream (listen; 100)",
    )
    p.add_argument(
        "--store-transports",
        help="transports whose latency, tasks/get and throughput run on every --stores store "
        "(memory,http; quick: memory); the others use the memory store only",
    )
    p.add_argument("--warmup", type=int, help="warm-up iterations before each measurement (200)")
    p.add_argument(
        "--latency-samples", type=int, help="sequential samples of each call kind (2000)"
    )
    p.add_argument("--get-samples", type=int, help="tasks/get samples per retained size (2000)")
    p.add_argument(
        "--get-ids", type=int, default=50, help="distinct random task ids the gets cycle through"
    )
    p.add_argument("--retained-small", type=int, default=100)
    p.add_argument(
        "--retained-large",
        type=int,
        help="retained tasks for the large get run (100000; quick 20000)",
    )
    p.add_argument("--throughput-calls", type=int, help="calls per throughput run (2000)")
    p.add_argument("--concurrency", type=int, default=50, help="concurrent callers (50)")
    p.add_argument(
        "--poll-sleep-ms",
        type=float,
        default=0.0,
        help="sleep between tasks/get polls in the task throughput run (0: tight loop)",
    )
    p.add_argument(
        "--memory-tasks", type=int, help="tasks created for the memory metric (50000); 0 skips"
    )
    p.add_argument("--input-rounds", type=int, help="tasks/update round trips per transport (200)")
    p.add_argument("--push-tasks", type=int, help="tasks observed through listen (100)")
    p.add_argument(
        "--poll-tasks",
        type=int,
        help="tasks polled at the default pollIntervalMs, concurrently (20); 0 skips",
    )
    p.add_argument(
        "--poll-transports",
        help="transports that run the ~5 s polling baseline (memory,http; quick: http)",
    )
    p.add_argument(
        "--flood-updates", type=int, default=10_000, help="status messages of the flood task"
    )
    p.add_argument(
        "--flood-runs", type=int, help="flood runs with and without a subscriber, each (3)"
    )
    p.add_argument(
        "--http-client",
        choices=("raw", "httpx"),
        default="raw",
        help="HTTP client: a minimal keep-alive HTTP/1.1 client (default) or httpx",
    )
    p.add_argument("--output", type=Path, default=RESULTS / "latest.json")
    p.add_argument("--_memory-child", type=int, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def config(args: argparse.Namespace) -> Config:
    quick = args.quick

    def pick(value: int | None, full: int, fast: int) -> int:
        return value if value is not None else (fast if quick else full)

    redis_skipped = None
    if args.stores is None:  # the default: Redis too, if it answers
        stores = ["memory", "sqlite"]
        why = redis_answers(REDIS_URL)
        if why is None:
            stores.append("redis")
        else:
            redis_skipped = f"{REDIS_URL} does not answer ({why})"
    else:
        stores = [s.strip() for s in args.stores.split(",") if s.strip()]
        why = redis_answers(REDIS_URL) if "redis" in stores else None
        if why is not None:
            raise SystemExit(f"--stores redis: {REDIS_URL} does not answer ({why})")
    return Config(
        warmup=pick(args.warmup, 200, 50),
        latency_samples=pick(args.latency_samples, 2000, 300),
        get_samples=pick(args.get_samples, 2000, 300),
        get_ids=args.get_ids,
        retained_small=args.retained_small,
        retained_large=pick(args.retained_large, 100_000, 20_000),
        throughput_calls=pick(args.throughput_calls, 2000, 300),
        concurrency=args.concurrency,
        poll_sleep_ms=args.poll_sleep_ms,
        memory_tasks=pick(args.memory_tasks, 50_000, 5_000),
        transports=[t.strip() for t in args.transports.split(",") if t.strip()],
        stores=stores,
        redis_skipped=redis_skipped,
        scaleout_tasks=pick(args.scaleout_tasks, 2000, 300),
        scaleout_sleep_ms=args.scaleout_sleep_ms,
        scaleout_transport=args.scaleout_transport,
        worker_concurrency=args.worker_concurrency,
        watch_batch=args.watch_batch,
        scaleout_observe=args.scaleout_observe,
        scaleout_pollers=args.scaleout_pollers,
        scaleout_poll_ms=args.scaleout_poll_ms,
        scaleout_order=tuple(
            int(w) for w in (args.scaleout_order or ("1,2" if quick else "1,2,2,1")).split(",")
        ),
        store_transports=tuple(
            t.strip()
            for t in (args.store_transports or ("memory" if quick else "memory,http")).split(",")
            if t.strip()
        ),
        input_rounds=pick(args.input_rounds, 200, 50),
        push_tasks=pick(args.push_tasks, 100, 20),
        poll_tasks=pick(args.poll_tasks, 20, 5),
        poll_transports=tuple(
            t.strip()
            for t in (args.poll_transports or ("http" if quick else "memory,http")).split(",")
            if t.strip()
        ),
        flood_updates=args.flood_updates,
        flood_runs=pick(args.flood_runs, 3, 1),
    )


async def run_all(cfg: Config) -> dict[str, Any]:
    results: dict[str, Any] = {"transports": {}}
    unknown = sorted(set(cfg.stores) - set(STORES))
    if unknown or not cfg.stores:
        raise SystemExit(f"--stores: unknown or none {unknown} (known: {', '.join(STORES)})")
    for kind in cfg.transports:
        if kind not in TRANSPORTS:
            raise SystemExit(f"unknown transport {kind!r}")
        r = results["transports"][kind] = {}
        for name, fn in (
            ("latency", bench_latency),
            ("get", bench_get),
            ("throughput", bench_throughput),
            ("input", bench_input),
            ("push", bench_push),
            ("flood", bench_flood),
        ):
            t0 = time.perf_counter()
            r[name] = await fn(kind, cfg)
            r[name]["phase_seconds"] = round(time.perf_counter() - t0, 2)
            print(f"  {kind:6} {name:10} done in {r[name]['phase_seconds']:.1f} s", file=sys.stderr)
    if "redis" in cfg.stores and cfg.scaleout_tasks > 0:
        t0 = time.perf_counter()
        results["scaleout"] = await bench_scaleout(cfg)
        results["scaleout"]["phase_seconds"] = round(time.perf_counter() - t0, 2)
        print(f"  scale-out done in {results['scaleout']['phase_seconds']:.1f} s", file=sys.stderr)
    return results


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args._memory_child is not None:
        print(json.dumps(asyncio.run(memory_child(args._memory_child, args.concurrency))))
        return
    global HTTP_CLIENT, REDIS_URL
    # SIGTERM unwinds like Ctrl-C, so worker processes are stopped and Redis keys deleted
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    HTTP_CLIENT = args.http_client
    REDIS_URL = args.redis_url
    cfg = config(args)
    started = time.perf_counter()
    load_before = os.getloadavg()
    print(f"fastmcp-tasks bench ({'quick' if args.quick else 'full'}): {cfg}", file=sys.stderr)
    if cfg.redis_skipped:
        print(f"\n{skipped_line(cfg)}\n", file=sys.stderr)
    left = 0
    try:
        results = asyncio.run(run_all(cfg))
    finally:
        if "redis" in cfg.stores:  # every store cleared its keys; this only makes sure
            left = redis_leftovers()
            if left:
                print(f"deleted {left} Redis keys left under {REDIS_RUN}-*", file=sys.stderr)
    if "redis" in cfg.stores:
        results["redis_keys_left"] = left
    if cfg.memory_tasks > 0:
        t0 = time.perf_counter()
        results["memory"] = bench_memory(cfg)
        results["memory"]["transport"] = "memory (fresh interpreter; RSS from /proc/self/statm)"
        print(f"  memory done in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    ratios, rows = ratios_and_rows(results)
    report = {
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "mode": "quick" if args.quick else "full",
        "machine": machine(),
        "config": {**cfg.__dict__, "http_client": HTTP_CLIENT, "redis_url": REDIS_URL},
        "loadavg_1_5_15": {"before": load_before, "after": os.getloadavg()},
        "results": results,
        "ratios": ratios,
        "all_pass": all(
            v["pass"] for group in ratios.values() for v in group.values() if v["pass"] is not None
        ),
        "total_seconds": round(time.perf_counter() - started, 1),
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print()
    print_table(rows)
    print()
    polling = f"every {cfg.poll_sleep_ms} ms" if cfg.poll_sleep_ms else "in a tight loop (no sleep)"
    print("Latency and tasks/get: one sequential caller, samples interleaved; the get ratios use")
    print("the sync p50 measured interleaved with the gets. Client and server share one process.")
    print(f"HTTP client: {HTTP_CLIENT}. Task throughput polls tasks/get {polling}.")
    print("Memory: in-memory transport only, measured in a fresh interpreter.")
    if cfg.stores != ["memory"]:
        on = ",".join(t for t in cfg.transports if t in cfg.store_transports) or "no transport"
        print(f"Stores {','.join(cfg.stores)} on {on}: latency, tasks/get and throughput (a server")
        print("per store, all up at once, samples interleaved; SQLite: a fresh temp file each;")
        print("Redis: a fresh key prefix each, its keys deleted afterwards).")
        print("Input, push, flood and memory: memory store only.")
    print("Input, push and flood: see bench/README.md; 'info' ratios have no target.")
    so = results.get("scaleout")
    if so:
        print(
            f"Scale-out: {so['tasks']:,} tasks of `await anyio.sleep({so['sleep_ms'] / 1000:g})` "
            f"through a concurrency=0 front end ({so['transport']} transport) on Redis, run by"
        )
        print(
            "worker processes (python -m fastmcp_tasks worker bench/redis_app.py:mcp "
            f"--concurrency {so['worker_concurrency']}); runs of "
            f"{','.join(map(str, so['order']))} workers;"
        )
        print(f"clock: first create -> last completion seen by {so['observed_by']}.")
    if cfg.redis_skipped:
        print(skipped_line(cfg))
    print(f"Total {report['total_seconds']} s; JSON written to {args.output}")


def skipped_line(cfg: Config) -> str:
    return (
        f"*** SKIPPED: the Redis store and the scale-out phase: {cfg.redis_skipped}; "
        "start Redis or pass --redis-url ***"
    )


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
