"""What our client puts on the wire, recorded by the server (a real uvicorn on 127.0.0.1).

Every `tasks/*` request carries `Mcp-Name: <taskId>` and `Mcp-Method` (C73), and
a server without the tasks extension, or a connection negotiated at 2025-11-25,
never sees `params.task` (C61), a `tasks/*` request or `subscriptions/listen`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import anyio
import pytest
from fastmcp import Client, Context, FastMCP
from fastmcp.utilities.tasks import TaskConfig
from mcp_types import CallToolResult

from fastmcp_tasks import TasksExtension
from fastmcp_tasks.client import TasksClientExtension
from fastmcp_tasks.client.handles import call_tool_task
from tests.wire import serve_asgi

pytestmark = pytest.mark.anyio

FAST = timedelta(milliseconds=20)
Seen = list[tuple[dict[str, str], dict[str, Any]]]


class Recorder:
    """ASGI middleware: the headers and JSON-RPC body of every POST the app receives."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.seen: Seen = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        chunks: list[bytes] = []

        async def recording_receive() -> dict[str, Any]:
            message = await receive()
            if message["type"] == "http.request":
                chunks.append(message.get("body", b""))
                if not message.get("more_body"):
                    body = json.loads(b"".join(chunks) or b"{}")
                    self.seen.append((headers, body))
            return message

        await self.app(scope, recording_receive, send)

    def requests(self) -> list[tuple[dict[str, str], dict[str, Any]]]:
        return [(h, b) for h, b in self.seen if isinstance(b, dict) and "method" in b]


@asynccontextmanager
async def recorded(mcp: FastMCP) -> AsyncIterator[tuple[str, Recorder]]:
    """Serve `mcp` behind a `Recorder` with uvicorn's default settings; yield the URL."""
    recorder = Recorder(mcp.http_app())
    async with serve_asgi(recorder, lifespan="auto") as base:
        yield f"{base}/mcp", recorder


def tasks_server() -> tuple[FastMCP, anyio.Event]:
    mcp = FastMCP("wire")
    mcp.add_extension(TasksExtension())
    gate = anyio.Event()

    @mcp.tool(task=TaskConfig(poll_interval=FAST))
    async def echo(text: str) -> str:
        return text

    @mcp.tool(task=TaskConfig(poll_interval=FAST))
    async def gated() -> str:
        await gate.wait()
        return "opened"

    @mcp.tool(task=TaskConfig(poll_interval=FAST))
    async def confirm(ctx: Context) -> str:
        answer = await ctx.elicit("sure?", bool)
        return f"{answer.action}:{answer.data}"

    return mcp, gate


async def approve(message, response_type, params, context):  # type: ignore[no-untyped-def]
    return True


@pytest.mark.parametrize("push", [True, False])
async def test_every_tasks_request_names_its_task_and_method(push: bool) -> None:
    mcp, gate = tasks_server()
    tasks = TasksClientExtension(push=push, elicitation_handler=approve)
    async with recorded(mcp) as (url, recorder):
        async with Client(url, elicitation_handler=approve, extensions=[tasks]) as client:
            assert (await client.call_tool("echo", {"text": "hi"})).data == "hi"
            assert (await client.call_tool("confirm", {})).data == "accept:True"
            task = await call_tool_task(client, "gated", push=push)
            await task.status()
            with pytest.raises(TimeoutError):
                await task.result(timeout=0.2)  # sends tasks/cancel
            handle = await call_tool_task(client, "gated", push=push)
            gate.set()
            assert (await handle).content[0].text == "opened"  # type: ignore[union-attr]
    methods = [body["method"] for _, body in recorder.requests()]
    for wanted in ("tasks/get", "tasks/update", "tasks/cancel"):
        assert wanted in methods, methods
    for headers, body in recorder.requests():
        if body["method"].startswith("tasks/"):
            assert headers.get("mcp-method") == body["method"]
            assert headers.get("mcp-name") == body["params"]["taskId"]


def plain_server() -> FastMCP:
    mcp = FastMCP("no-tasks")

    @mcp.tool
    async def echo(text: str) -> str:
        return text

    return mcp


@pytest.mark.parametrize(
    ("server", "mode"),
    [("plain", "auto"), ("plain", "legacy"), ("tasks", "legacy")],
)
async def test_a_legacy_era_server_never_sees_the_opt_in_misused(server: str, mode: str) -> None:
    mcp = plain_server() if server == "plain" else tasks_server()[0]
    async with recorded(mcp) as (url, recorder):
        async with Client(url, mode=mode, extensions=[TasksClientExtension()]) as client:
            result = await client.call_tool("echo", {"text": "plain"})
            assert isinstance(result.data, str) and result.data == "plain"
            raw = await client.call_tool_mcp("echo", {"text": "raw"})
            assert isinstance(raw, CallToolResult) and raw.content[0].text == "raw"  # type: ignore[union-attr]
    requests = [body for _, body in recorder.requests()]
    methods = [body["method"] for body in requests]
    assert "tools/call" in methods
    assert not [m for m in methods if m.startswith("tasks/") or m == "subscriptions/listen"]
    for body in requests:
        assert "task" not in (body.get("params") or {}), body  # C61: no V1 per-request opt-in
    if mode == "legacy":
        initialize = next(body for body in requests if body["method"] == "initialize")
        assert initialize["params"]["protocolVersion"] == "2025-11-25"
