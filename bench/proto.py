"""The harness's wire, below any server: JSON-RPC framing of 2026-07-28 requests over
Streamable HTTP (`request_frame`, `parse_http`), the minimal keep-alive HTTP/1.1 client
(`RawHttp`) and SSE reader (`raw_sse`), listen streams (`Stream`), the server-side clock
(`ServerClock`) and what a connected transport is (`Conn`, `Send`).

Shared by `bench.run`'s phases and the load test (`bench/load_wire.py`,
`bench/load_drive.py`); it imports no other bench module.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio

TASKS = "io.modelcontextprotocol/tasks"
MODERN = "2026-07-28"
TERMINAL = frozenset({"completed", "failed", "cancelled"})

# `opt_in`: False (no tasks opt-in), True (the opt-in), or a dict of client
# capabilities to declare along with the opt-in (e.g. `phases_probe.ELICITATION`).
OptIn = bool | dict[str, Any]
Send = Callable[[str, dict[str, Any], OptIn], Awaitable[dict[str, Any]]]


class RpcError(Exception):
    """A JSON-RPC error answer, an HTTP error status or a malformed answer."""


def caps(opt_in: OptIn) -> dict[str, Any]:
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


def free_port() -> int:
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


def parse_http(content_type: str, payload: bytes) -> dict[str, Any]:
    """The JSON-RPC message of a response, JSON or a single-message SSE stream."""
    if content_type.startswith("text/event-stream"):
        for line in payload.decode().splitlines():
            if line.startswith("data:") and line[5:].strip():
                message = json.loads(line[5:])
                if "result" in message or "error" in message:
                    return message  # type: ignore[no-any-return]
        raise RpcError(f"no JSON-RPC response in SSE body: {payload[:300]!r}")
    return json.loads(payload)  # type: ignore[no-any-return]


def request_frame(
    method: str,
    params: dict[str, Any],
    capabilities: dict[str, Any],
    request_id: int,
    client: str,
) -> tuple[bytes, dict[str, str]]:
    """Body and headers of one modern-era request over Streamable HTTP (`bench.run`'s
    HTTP transport and the load test's `Caller`)."""
    params = dict(params)
    params["_meta"] = {
        **(params.get("_meta") or {}),
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientInfo": {"name": client, "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    }
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": method,
    }
    name = params.get("taskId") if method.startswith("tasks/") else params.get("name")
    if isinstance(name, str):
        headers["Mcp-Name"] = name
    body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    return json.dumps(body, separators=(",", ":")).encode(), headers
