"""fastmcp-tasks benchmark: sync vs. task latency, tasks/get cost, throughput, memory.

Run from the repo root:

    .venv/bin/python -m bench.run            # full run (~2-3 min on 2 cores)
    .venv/bin/python -m bench.run --quick    # smoke run (~20 s)

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
import contextlib
import gc
import json
import math
import os
import platform
import random
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python bench/run.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import anyio
import httpx
import uvicorn
from fastmcp import Client, FastMCP
from mcp.shared.exceptions import MCPError

from fastmcp_tasks import TasksExtension
from fastmcp_tasks.stores.base import TaskRecord

TASKS = "io.modelcontextprotocol/tasks"
MODERN = "2026-07-28"
TERMINAL = frozenset({"completed", "failed", "cancelled"})
TOOL = "noop"
RESULTS = Path(__file__).resolve().parent / "results"

Send = Callable[[str, dict[str, Any], bool], Awaitable[dict[str, Any]]]


# --- server ---------------------------------------------------------------------------


def make_server(max_tasks: int = 200_000) -> FastMCP:
    mcp = FastMCP("bench")
    mcp.add_extension(TasksExtension(max_tasks=max_tasks))

    @mcp.tool(task=True)
    async def noop() -> str:
        return "ok"

    return mcp


def extension(server: FastMCP) -> TasksExtension:
    return server._extensions[TASKS]  # type: ignore[attr-defined,no-any-return]


# --- transports (copied from tests/wire.py, minus schema validation) -----------------------


class RpcError(Exception):
    pass


def _caps(opt_in: bool) -> dict[str, Any]:
    return {"extensions": {TASKS: {}}} if opt_in else {}


@dataclass
class Conn:
    """A connected transport: `send` for one sequential caller, `channel()` for concurrent ones."""

    send: Send
    channel: Callable[[], contextlib.AbstractAsyncContextManager[Send]]
    clock: ServerClock | None = None  # HTTP only: server-side time per request


@asynccontextmanager
async def memory_transport(server: FastMCP) -> AsyncIterator[Conn]:
    async with Client(server) as client:
        session = client.session

        async def send(method: str, params: dict[str, Any], opt_in: bool) -> dict[str, Any]:
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

        yield Conn(send, channel)


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
async def http_transport(server: FastMCP) -> AsyncIterator[Conn]:
    port = _free_port()
    clock = ServerClock(server.http_app())
    config = uvicorn.Config(clock, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    uv = uvicorn.Server(config)
    counter = 0

    def frame(method: str, params: dict[str, Any], opt_in: bool) -> tuple[bytes, dict[str, str]]:
        nonlocal counter
        counter += 1
        params = dict(params)
        params["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": _caps(opt_in),
        }
        headers = {
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": MODERN,
            "Mcp-Method": method,
        }
        name = params.get("taskId") if method.startswith("tasks/") else params.get("name")
        if isinstance(name, str):
            headers["Mcp-Name"] = name
        body = {"jsonrpc": "2.0", "id": counter, "method": method, "params": params}
        return json.dumps(body, separators=(",", ":")).encode(), headers

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

                async def send(method: str, params: dict[str, Any], opt_in: bool) -> dict[str, Any]:
                    body, headers = frame(method, params, opt_in)
                    headers["Content-Type"] = "application/json"
                    r = await http.post(url, content=body, headers=headers)
                    return answer(r.status_code, r.headers.get("content-type", ""), r.content)

                yield send
        else:
            raw = RawHttp("127.0.0.1", port)
            try:

                async def send(method: str, params: dict[str, Any], opt_in: bool) -> dict[str, Any]:
                    body, headers = frame(method, params, opt_in)
                    status, rheaders, payload = await raw.post("/mcp", body, headers)
                    return answer(status, rheaders.get("content-type", ""), payload)

                yield send
            finally:
                await raw.aclose()

    async with anyio.create_task_group() as group:
        group.start_soon(uv.serve)
        with anyio.fail_after(10):
            while not uv.started:  # noqa: ASYNC110 - uvicorn exposes a flag, not an event
                await anyio.sleep(0.01)
        try:
            async with channel() as send:
                yield Conn(send, channel, clock)
        finally:
            uv.should_exit = True


TRANSPORTS = {"memory": memory_transport, "http": http_transport}


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


async def bench_latency(kind: str, cfg: Config) -> dict[str, Any]:
    """Metric 1: sync vs. task-creating `tools/call`, one caller, interleaved sample by sample.

    After each creation the harness waits, untimed, until the task's run has
    finished, so every sample starts from an idle server.
    """
    server = make_server()
    async with TRANSPORTS[kind](server) as conn:
        send = conn.send
        for _ in range(cfg.warmup):
            await sync_call(send)
            await drain(server, await create_task(send))
        gc.collect()
        sync_ns: list[int] = []
        create_ns: list[int] = []
        for _ in range(cfg.latency_samples):
            sync_ns.append(await timed(lambda: sync_call(send), conn, "sync"))
            created: list[str] = []
            create_ns.append(
                await timed(lambda c=created: _append(c, create_task(send)), conn, "create")
            )
            await drain(server, created[0])
        server = server_side(conn)
    out = {"sync": summary(sync_ns), "create": summary(create_ns)}
    if server:
        out["server_side"] = server
    return out


async def _append(into: list[Any], value: Awaitable[Any]) -> None:
    into.append(await value)


async def fill_store(server: FastMCP, count: int, result: dict[str, Any]) -> float:
    """Insert `count` completed tasks directly into the store; seconds taken.

    Each record is what a completed run leaves behind (see the runner and the
    store's `transition`), with its own copy of a real task's result.
    """
    ext = extension(server)
    store = ext.store
    template = json.dumps(result)
    start = time.perf_counter()
    for _ in range(count):
        now = time.time()
        record = TaskRecord(
            task_id=secrets.token_urlsafe(24),
            tool=TOOL,
            status="working",
            created_at=now,
            updated_at=now,
            arguments={},
            poll_interval_ms=5000,
            retention_ms=ext.retention_ms,
        )
        await store.create(record)
        await store.transition(record.task_id, "completed", result=json.loads(template))
    return time.perf_counter() - start


async def make_completed(server: FastMCP, send: Send, count: int) -> list[str]:
    """Create `count` tasks through the wire, each run to completion."""
    ids = []
    for _ in range(count):
        task_id = await create_task(send)
        await drain(server, task_id)
        ids.append(task_id)
    return ids


async def bench_get(kind: str, cfg: Config) -> dict[str, Any]:
    """Metric 2: `tasks/get` of completed tasks on a server retaining few and one retaining many.

    Both servers are up at once and the samples are interleaved (sync call on
    the small server, get on the small server, get on the large server), so the
    ratios compare like with like even when the machine's load drifts.
    """
    rng = random.Random(2663)
    small_server = make_server()
    large_server = make_server(max_tasks=max(200_000, cfg.retained_large + 1000))
    async with TRANSPORTS[kind](small_server) as small, TRANSPORTS[kind](large_server) as large:
        small_ids = await make_completed(small_server, small.send, cfg.retained_small)
        large_ids = await make_completed(large_server, large.send, min(100, cfg.retained_large))
        record = await extension(large_server).store.get(large_ids[0])
        assert record is not None and record.result is not None
        large_store = extension(large_server).store
        fill_s = await fill_store(
            large_server, cfg.retained_large - len(large_store), record.result
        )  # type: ignore[arg-type]
        retained = {"small": len(extension(small_server).store), "large": len(large_store)}  # type: ignore[arg-type]
        all_large = list(large_store._tasks)  # type: ignore[attr-defined]
        pick = {
            "small": [rng.choice(small_ids) for _ in range(cfg.get_ids)],
            "large": [rng.choice(all_large) for _ in range(cfg.get_ids)],
        }
        del all_large
        for i in range(cfg.warmup):
            await sync_call(small.send)
            await get_task(small.send, pick["small"][i % cfg.get_ids])
            await get_task(large.send, pick["large"][i % cfg.get_ids])
        gc.collect()
        samples: dict[str, list[int]] = {"sync": [], "small": [], "large": []}
        for i in range(cfg.get_samples):
            small_id, large_id = pick["small"][i % cfg.get_ids], pick["large"][i % cfg.get_ids]
            samples["sync"].append(await timed(lambda: sync_call(small.send), small, "sync"))
            samples["small"].append(
                await timed(lambda i=small_id: get_task(small.send, i), small, "get_small")
            )
            samples["large"].append(
                await timed(lambda i=large_id: get_task(large.send, i), large, "get_large")
            )
        server = server_side(small, large)
    return {
        **({"server_side": server} if server else {}),
        "retained_small": retained["small"],
        "retained_large": retained["large"],
        "distinct_ids_sampled": cfg.get_ids,
        "fill_seconds": round(fill_s, 2),
        "sync_reference": summary(samples["sync"]),
        "small": summary(samples["small"]),
        "large": summary(samples["large"]),
    }


async def bench_throughput(kind: str, cfg: Config) -> dict[str, Any]:
    """Metric 3: calls/s of sync calls and of end-to-end tasks with `concurrency` callers.

    Each kind runs `throughput_calls` in two halves, ordered sync, task, task,
    sync (ABBA), so a linear drift of the machine's speed cancels out.
    """
    server = make_server()
    poll_sleep = cfg.poll_sleep_ms / 1000
    n, c = cfg.throughput_calls, cfg.concurrency
    half = (n // 2, n - n // 2)

    async def sync_job(send: Send) -> None:
        await sync_call(send)

    async def task_job(send: Send) -> int:
        return await run_task(send, poll_sleep)

    async with TRANSPORTS[kind](server) as conn:
        warm = max(c, cfg.warmup)
        await fan_out(conn, warm, c, sync_job)
        await fan_out(conn, warm, c, task_job)
        s1, _ = await fan_out(conn, half[0], c, sync_job)
        t1, p1 = await fan_out(conn, half[0], c, task_job)
        t2, p2 = await fan_out(conn, half[1], c, task_job)
        s2, _ = await fan_out(conn, half[1], c, sync_job)
    polls = p1 + p2
    return {
        "calls": n,
        "concurrency": c,
        "poll_sleep_ms": cfg.poll_sleep_ms,
        "sync_seconds": s1 + s2,
        "task_seconds": t1 + t2,
        "sync_tps": n / (s1 + s2),
        "task_tps": n / (t1 + t2),
        "gets_per_task_mean": sum(polls) / len(polls),
        "gets_per_task_max": max(polls),
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
        if lat:
            s, c = lat["sync"], lat["create"]
            row(kind, "sync tools/call p50 / p99", f"{s['p50_us']:.0f} / {s['p99_us']:.0f} us")
            row(
                kind,
                "task-creating tools/call p50 / p99",
                f"{c['p50_us']:.0f} / {c['p99_us']:.0f} us",
                c["p50_us"] / s["p50_us"],
                "creation_p50/sync_p50",
                "<=",
                1.3,
            )
        if get:
            g1, g2 = get["small"], get["large"]
            ref = get["sync_reference"]
            base = ref["p50_us"]
            row(
                kind,
                "sync tools/call p50 / p99 (interleaved with gets)",
                f"{ref['p50_us']:.0f} / {ref['p99_us']:.0f} us",
            )
            label1 = f"tasks/get p50 / p99 ({get['retained_small']:,} retained)"
            label2 = f"tasks/get p50 / p99 ({get['retained_large']:,} retained)"
            v1 = f"{g1['p50_us']:.0f} / {g1['p99_us']:.0f} us"
            v2 = f"{g2['p50_us']:.0f} / {g2['p99_us']:.0f} us"
            row(kind, label1, v1, g1["p50_us"] / base, "get_p50_small/sync_p50", "<=", 0.6)
            row(kind, label2, v2, g2["p50_us"] / base, "get_p50_large/sync_p50", "<=", 0.6)
            row(
                kind,
                "tasks/get p50 large/small",
                "",
                g2["p50_us"] / g1["p50_us"],
                "get_p50_large/get_p50_small",
                "<=",
                1.1,
            )
        if thr:
            row(
                kind,
                f"sync throughput ({thr['calls']} calls, {thr['concurrency']} callers)",
                f"{thr['sync_tps']:.0f} calls/s",
            )
            row(
                kind,
                f"task throughput (create+poll, {thr['gets_per_task_mean']:.1f} gets/task)",
                f"{thr['task_tps']:.0f} tasks/s",
                thr["task_tps"] / thr["sync_tps"],
                "task_tps/sync_tps",
                ">=",
                0.5,
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
        help="smoke run (~20 s): 300 samples, 20,000 retained, 300 calls, 5,000 memory tasks",
    )
    p.add_argument("--transports", default="memory,http", help="comma list of memory,http")
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
    )


async def run_all(cfg: Config) -> dict[str, Any]:
    results: dict[str, Any] = {"transports": {}}
    for kind in cfg.transports:
        if kind not in TRANSPORTS:
            raise SystemExit(f"unknown transport {kind!r}")
        r = results["transports"][kind] = {}
        for name, fn in (
            ("latency", bench_latency),
            ("get", bench_get),
            ("throughput", bench_throughput),
        ):
            t0 = time.perf_counter()
            r[name] = await fn(kind, cfg)
            r[name]["phase_seconds"] = round(time.perf_counter() - t0, 2)
            print(f"  {kind:6} {name:10} done in {r[name]['phase_seconds']:.1f} s", file=sys.stderr)
    return results


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args._memory_child is not None:
        print(json.dumps(asyncio.run(memory_child(args._memory_child, args.concurrency))))
        return
    global HTTP_CLIENT
    HTTP_CLIENT = args.http_client
    cfg = config(args)
    started = time.perf_counter()
    load_before = os.getloadavg()
    print(f"fastmcp-tasks bench ({'quick' if args.quick else 'full'}): {cfg}", file=sys.stderr)
    results = asyncio.run(run_all(cfg))
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
        "config": {**cfg.__dict__, "http_client": HTTP_CLIENT},
        "loadavg_1_5_15": {"before": load_before, "after": os.getloadavg()},
        "results": results,
        "ratios": ratios,
        "all_pass": all(v["pass"] for group in ratios.values() for v in group.values()),
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
    print(f"Total {report['total_seconds']} s; JSON written to {args.output}")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
