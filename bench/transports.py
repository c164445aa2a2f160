"""The two transports between the harness and a bench server, in one process: in memory
(`memory_transport`, `fastmcp.Client`'s session dispatcher, raw JSON-RPC) and Streamable
HTTP to uvicorn on a free port (`http_transport`, `RawHttp` or httpx per `HTTP_CLIENT`),
each giving a `Conn`; `servers` brings up one server per store behind one.

Copied from tests/wire.py, minus schema validation. `HTTP_CLIENT` is set from
`--http-client`: read it as `transports.HTTP_CLIENT`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import uvicorn
from fastmcp import Client, FastMCP
from mcp.client.extension import ClientExtension, NotificationBinding
from mcp.shared.exceptions import MCPError
from mcp_types import NotificationParams
from pydantic import ConfigDict

from bench.proto import (
    Conn,
    OptIn,
    RawHttp,
    RpcError,
    Send,
    ServerClock,
    Stream,
    caps,
    free_port,
    parse_http,
    raw_sse,
    request_frame,
)
from bench.server import make_server, store_url
from fastmcp_tasks.wire import METHOD_LISTEN

SUB = "io.modelcontextprotocol/subscriptionId"


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
            meta["io.modelcontextprotocol/clientCapabilities"] = caps(opt_in)
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
                meta["io.modelcontextprotocol/clientCapabilities"] = caps(True)
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


HTTP_CLIENT = "raw"  # or "httpx"; set from --http-client


@asynccontextmanager
async def http_transport(server: FastMCP, listen: bool = False) -> AsyncIterator[Conn]:
    port = free_port()
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
        nonlocal counter
        counter += 1
        return request_frame(method, params, caps(opt_in), counter, "bench")

    def answer(status: int, content_type: str, payload: bytes) -> dict[str, Any]:
        message = parse_http(content_type, payload)
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
