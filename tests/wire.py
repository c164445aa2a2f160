"""A raw SEP-2663 test client: every message it sends or receives is schema-checked.

`connect(server, transport)` yields a `Wire` speaking JSON-RPC to a FastMCP server
either in memory (through `fastmcp.Client`'s dispatcher, so the real SDK runner
serves it) or over a real Streamable HTTP server (uvicorn on 127.0.0.1, a free
port, httpx). The per-request tasks opt-in is explicit on every call, as the
spec makes it, so tests can send requests with and without it.

Every request to a `tasks/*` method, every result and every error object is
validated against the official schema (`tests/fixtures/ext-tasks-schema.json`).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import jsonschema
import uvicorn
from fastmcp import Client, FastMCP
from mcp.shared.exceptions import MCPError

from tests.ports import free_port

TASKS = "io.modelcontextprotocol/tasks"
MODERN = "2026-07-28"
TERMINAL = frozenset({"completed", "failed", "cancelled"})

_SCHEMA = json.loads((Path(__file__).parent / "fixtures" / "ext-tasks-schema.json").read_text())
_VALIDATOR_CLS = jsonschema.validators.validator_for(_SCHEMA)
_VALIDATORS: dict[str, Any] = {}

REQUEST_DEFS = {
    "tasks/get": "GetTaskRequest",
    "tasks/update": "UpdateTaskRequest",
    "tasks/cancel": "CancelTaskRequest",
}
RESULT_DEFS = {
    "tasks/get": "GetTaskResult",
    "tasks/update": "UpdateTaskResult",
    "tasks/cancel": "CancelTaskResult",
}


def validate(definition: str, instance: Any) -> None:
    """Validate `instance` against `$defs[definition]` of the official schema."""
    validator = _VALIDATORS.get(definition)
    if validator is None:
        schema = {"$ref": f"#/$defs/{definition}", "$defs": _SCHEMA["$defs"]}
        validator = _VALIDATORS[definition] = _VALIDATOR_CLS(schema)
    errors = sorted(validator.iter_errors(instance), key=lambda e: list(e.path))
    if errors:
        raise AssertionError(f"not a valid {definition}: {errors[0].message}\n{instance!r}")


def validate_result(method: str, result: dict[str, Any]) -> None:
    """Check a result the server sent for `method` against the schema."""
    validate("Result", result)
    if method == "tools/call":
        kind = result.get("resultType")
        if kind == "task":
            validate("CreateTaskResult", result)
            for forbidden in ("result", "error", "inputRequests", "task", "requestState"):
                assert forbidden not in result, f"CreateTaskResult carries {forbidden!r}"
        elif kind == "complete":
            for block in result.get("content", []):
                validate("ContentBlock", block)
        return
    definition = RESULT_DEFS.get(method)
    if definition is not None:
        validate(definition, result)
    if method == "tasks/get":
        assert result["resultType"] == "complete"
        validate(
            "DetailedTask", {k: v for k, v in result.items() if k not in ("resultType", "_meta")}
        )
        if result["status"] == "completed":
            validate_result("tools/call", result["result"])


class WireError(Exception):
    """A JSON-RPC error answer."""

    def __init__(self, code: int, message: str, data: Any = None, http_status: int | None = None):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.data = data
        self.http_status = http_status


@dataclass
class Wire:
    """Send JSON-RPC requests to one server; see module docstring."""

    kind: str
    _send: Any
    sent: list[dict[str, Any]] = field(default_factory=list)

    async def request(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        opt_in: bool = True,
        headers: dict[str, str] | None = None,
        malformed: bool = False,
        capabilities: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Send one request (`malformed=True`: skip the schema check of a deliberately bad one)."""
        params = dict(params or {})
        caps: dict[str, Any] = dict({"elicitation": {}} if capabilities is None else capabilities)
        if opt_in:
            caps["extensions"] = {TASKS: {}}
        message = {"jsonrpc": "2.0", "id": len(self.sent) + 1, "method": method, "params": params}
        if method in REQUEST_DEFS and not malformed:
            validate(REQUEST_DEFS[method], message)
        self.sent.append(message)
        result = await self._send(method, params, caps, headers or {})
        if not self.kind.endswith("legacy"):  # the 2026-07-28 schema describes modern wires
            validate_result(method, result)
        return result

    async def call_tool(
        self, name: str, arguments: dict[str, Any] | None = None, **kw: Any
    ) -> dict[str, Any]:
        return await self.request("tools/call", {"name": name, "arguments": arguments or {}}, **kw)

    async def get(self, task_id: str, **kw: Any) -> dict[str, Any]:
        return await self.request("tasks/get", {"taskId": task_id}, **kw)

    async def update(self, task_id: str, responses: dict[str, Any], **kw: Any) -> dict[str, Any]:
        return await self.request(
            "tasks/update", {"taskId": task_id, "inputResponses": responses}, **kw
        )

    async def cancel(self, task_id: str, **kw: Any) -> dict[str, Any]:
        return await self.request("tasks/cancel", {"taskId": task_id}, **kw)

    async def wait(
        self,
        task_id: str,
        statuses: Iterable[str] = TERMINAL,
        *,
        within: float = 10.0,
        **kw: Any,
    ) -> dict[str, Any]:
        """Poll `tasks/get` until the status is one of `statuses` (bounded by `within` seconds)."""
        wanted = frozenset(statuses)
        with anyio.fail_after(within):
            while True:
                task = await self.get(task_id, **kw)
                if task["status"] in wanted:
                    return task
                await anyio.sleep(0.005)

    async def wait_for(
        self, task_id: str, predicate: Any, *, within: float = 10.0, **kw: Any
    ) -> dict[str, Any]:
        """Poll `tasks/get` until `predicate(task)` holds (bounded by `within` seconds)."""
        with anyio.fail_after(within):
            while True:
                task = await self.get(task_id, **kw)
                if predicate(task):
                    return task
                await anyio.sleep(0.005)


def _error_from(error: dict[str, Any], http_status: int | None) -> WireError:
    validate("Error", error)
    return WireError(error["code"], error["message"], error.get("data"), http_status)


def memory_wire_for(client: Client, kind: str = "memory") -> Wire:
    """A `Wire` over an entered in-memory `fastmcp.Client`."""
    session = client.session

    async def send(
        method: str, params: dict[str, Any], caps: dict[str, Any], headers: dict[str, str]
    ) -> dict[str, Any]:
        data: dict[str, Any] = {"method": method, "params": params}
        opts: dict[str, Any] = {}
        session._stamp(data, opts)
        meta = data["params"].setdefault("_meta", {})
        meta["io.modelcontextprotocol/clientCapabilities"] = caps
        opts.setdefault("headers", {}).update(headers)
        try:
            return await session._dispatcher.send_raw_request(method, data["params"], opts)
        except MCPError as exc:
            error = {"code": exc.error.code, "message": exc.error.message}
            if exc.error.data is not None:
                error["data"] = exc.error.data
            raise _error_from(error, None) from None

    return Wire(kind, send)


@asynccontextmanager
async def memory_wire(server: FastMCP, *, mode: str = "auto") -> AsyncIterator[Wire]:
    async with Client(server, mode=mode) as client:
        yield memory_wire_for(client, "memory" if mode == "auto" else f"memory-{mode}")


@asynccontextmanager
async def serve_asgi(app: Any, **uvicorn_options: Any) -> AsyncIterator[str]:
    """Serve the ASGI `app` with uvicorn on 127.0.0.1 (a free port); yield its base URL."""
    port = free_port()
    options = {"log_level": "warning", "lifespan": "on", **uvicorn_options}
    uv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, **options))
    async with anyio.create_task_group() as group:
        group.start_soon(uv.serve)
        with anyio.fail_after(10):
            while not uv.started:  # noqa: ASYNC110 - uvicorn offers no started event
                await anyio.sleep(0.01)
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            uv.should_exit = True


@asynccontextmanager
async def http_server(server: FastMCP, **uvicorn_options: Any) -> AsyncIterator[str]:
    """Serve `server` over Streamable HTTP on 127.0.0.1; yield the endpoint URL."""
    async with serve_asgi(server.http_app(), **uvicorn_options) as base:
        yield f"{base}/mcp"


def parse_http_response(response: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC message of a response, JSON or a single-message SSE stream."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        for line in response.text.splitlines():
            if line.startswith("data:") and line[5:].strip():
                message = json.loads(line[5:])
                if "result" in message or "error" in message:
                    return message
        raise AssertionError(f"no JSON-RPC response in SSE body: {response.text[:300]}")
    return response.json()


@asynccontextmanager
async def http_wire_for(url: str) -> AsyncIterator[Wire]:
    """A `Wire` speaking raw JSON-RPC over Streamable HTTP to `url`."""
    async with httpx.AsyncClient(timeout=10) as http:
        counter = 0

        async def send(
            method: str, params: dict[str, Any], caps: dict[str, Any], headers: dict[str, str]
        ) -> dict[str, Any]:
            nonlocal counter
            counter += 1
            params = dict(params)
            params["_meta"] = {
                **params.get("_meta", {}),
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientInfo": {"name": "tests", "version": "1"},
                "io.modelcontextprotocol/clientCapabilities": caps,
            }
            request_headers = {
                "Accept": "application/json, text/event-stream",
                "MCP-Protocol-Version": MODERN,
                "Mcp-Method": method,
            }
            name = params.get("taskId") if method.startswith("tasks/") else params.get("name")
            if isinstance(name, str):
                request_headers["Mcp-Name"] = name
            request_headers.update(headers)
            body = {"jsonrpc": "2.0", "id": counter, "method": method, "params": params}
            response = await http.post(url, json=body, headers=request_headers)
            message = parse_http_response(response)
            if "error" in message:
                raise _error_from(message["error"], response.status_code)
            assert response.status_code == 200, response.text
            return message["result"]

        yield Wire("http", send)


@asynccontextmanager
async def http_wire(server: FastMCP) -> AsyncIterator[Wire]:
    async with http_server(server) as url, http_wire_for(url) as wire:
        yield wire


@asynccontextmanager
async def connect(server: FastMCP, transport: str) -> AsyncIterator[Wire]:
    """A `Wire` to `server` over `transport` ("memory", "http" or "legacy")."""
    if transport == "memory":
        async with memory_wire(server) as wire:
            yield wire
    elif transport == "legacy":
        async with memory_wire(server, mode="legacy") as wire:
            yield wire
    elif transport == "http":
        async with http_wire(server) as wire:
            yield wire
    else:  # pragma: no cover
        raise ValueError(transport)
