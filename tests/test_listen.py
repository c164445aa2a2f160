"""Push: `subscriptions/listen` with `taskIds` and `notifications/tasks` (C44-C49).

Frames are read off the real wire: the SSE response of a Streamable HTTP POST,
or, in memory, through the SDK client's notification binding (the seam a client
uses) plus its message handler for the ack. Every `notifications/tasks` frame is
validated against the official schema and compared with `tasks/get`.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import anyio
import anyio.lowlevel
import httpx
import pytest
from fastmcp import Client, Context, FastMCP
from fastmcp.utilities.tasks import TaskConfig
from mcp.client.extension import ClientExtension, NotificationBinding
from mcp.shared.subscriptions import ToolsListChanged
from mcp_types import NotificationParams
from pydantic import ConfigDict

from fastmcp_tasks import Progress, TasksExtension
from fastmcp_tasks.wire.names import METHOD_LISTEN
from tests.wire import MODERN, TASKS, WireError, connect, http_server, validate

pytestmark = pytest.mark.anyio

SUB = "io.modelcontextprotocol/subscriptionId"
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientInfo": {"name": "listen-tests", "version": "1"},
}


def listen_server() -> tuple[FastMCP, TasksExtension, dict[str, anyio.Event]]:
    mcp = FastMCP("listen")
    extension = TasksExtension()
    mcp.add_extension(extension)
    gates: dict[str, anyio.Event] = {}

    def gate(name: str) -> anyio.Event:
        return gates.setdefault(name, anyio.Event())

    @mcp.tool(task=True)
    async def stepper(ctx: Context) -> str:
        await ctx.report_progress(1, 3, "one")
        await gate("step").wait()
        answer = await ctx.elicit("continue?", bool)
        await ctx.report_progress(2, 3, "two")
        await gate("finish").wait()
        return f"done {answer.action}"

    @mcp.tool(task=TaskConfig(poll_interval=timedelta(seconds=5)))
    async def flood(n: int, progress: Progress = Progress()) -> str:
        await progress.set_total(n)
        for i in range(n):
            await progress.set_message(f"item {i}")
            if i % 100 == 0:
                await anyio.lowlevel.checkpoint()
        return "flooded"

    @mcp.tool(task=True)
    async def waits(key: str) -> str:
        await gate(key).wait()
        return key

    return mcp, extension, gates


class Frames:
    """The frames of one listen stream, as they arrive."""

    def __init__(self) -> None:
        self.send, self.receive = anyio.create_memory_object_stream[dict[str, Any]](math.inf)
        self.seen: list[dict[str, Any]] = []

    async def next(self) -> dict[str, Any]:
        with anyio.fail_after(10):
            frame = await self.receive.receive()
        self.seen.append(frame)
        return frame

    async def until(self, predicate: Any) -> dict[str, Any]:
        while True:
            frame = await self.next()
            if predicate(frame):
                return frame


def _listen_params(task_ids: list[str] | None, *, opt_in: bool = True, **core: Any) -> dict:
    notifications = dict(core)
    if task_ids is not None:
        notifications["taskIds"] = task_ids
    caps = {"extensions": {TASKS: {}}} if opt_in else {}
    return {
        "notifications": notifications,
        "_meta": {**ENVELOPE, "io.modelcontextprotocol/clientCapabilities": caps},
    }


@asynccontextmanager
async def http_listen(
    url: str, params: dict, request_id: str = "L1", headers: dict[str, str] | None = None
) -> AsyncIterator[Frames]:
    frames = Frames()
    body = {"jsonrpc": "2.0", "id": request_id, "method": METHOD_LISTEN, "params": params}
    request_headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": METHOD_LISTEN,
        **(headers or {}),
    }

    async def pump(http: httpx.AsyncClient) -> None:
        async with http.stream("POST", url, json=body, headers=request_headers) as response:
            if not response.headers.get("content-type", "").startswith("text/event-stream"):
                await response.aread()
                frames.send.send_nowait(response.json())
                return
            async for line in response.aiter_lines():
                if line.startswith("data:") and line[5:].strip():
                    frames.send.send_nowait(json.loads(line[5:]))

    async with httpx.AsyncClient(timeout=30) as http, anyio.create_task_group() as group:
        group.start_soon(pump, http)
        yield frames
        group.cancel_scope.cancel()


class _AnyParams(NotificationParams):
    model_config = ConfigDict(extra="allow")


class _Collect(ClientExtension):
    identifier = TASKS  # replaces the transparent client extension for this client

    def __init__(self, frames: Frames) -> None:
        self.frames = frames

    def notifications(self) -> list[NotificationBinding[Any]]:
        async def handle(params: _AnyParams) -> None:
            dumped = params.model_dump(by_alias=True, exclude_none=True)
            self.frames.send.send_nowait({"method": "notifications/tasks", "params": dumped})

        return [
            NotificationBinding(
                method="notifications/tasks", params_type=_AnyParams, handler=handle
            )
        ]


@asynccontextmanager
async def memory_listen(client: Client, params: dict, frames: Frames) -> AsyncIterator[Frames]:
    session = client.session

    async def drive() -> None:
        mine = {k: v for k, v in params.items() if k != "_meta"}
        data: dict[str, Any] = {"method": METHOD_LISTEN, "params": mine}
        opts: dict[str, Any] = {"request_id": "L1"}
        session._stamp(data, opts)
        data["params"]["_meta"].update(params["_meta"])
        try:
            result = await session._dispatcher.send_raw_request(METHOD_LISTEN, data["params"], opts)
            frames.send.send_nowait({"id": "L1", "result": result})
        except Exception as exc:
            error = getattr(exc, "error", None)
            frames.send.send_nowait(
                {"id": "L1", "error": {"code": error.code, "message": error.message}}
            )

    async with anyio.create_task_group() as group:
        group.start_soon(drive)
        yield frames
        group.cancel_scope.cancel()


@asynccontextmanager
async def listening(
    mcp: FastMCP, transport: str, task_ids: list[str] | None, **kw: Any
) -> AsyncIterator[tuple[Frames, Any]]:
    """Open a wire (for tools/call and tasks/get) and a listen stream factory on it."""
    if transport == "http":
        async with http_server(mcp) as url, connect_http_only(mcp, url) as wire:

            @asynccontextmanager
            async def open_stream(ids: list[str] | None, **options: Any) -> AsyncIterator[Frames]:
                async with http_listen(url, _listen_params(ids, **options)) as frames:
                    yield frames

            yield open_stream, wire
        return
    frames_holder: list[Frames] = []
    collector_frames = Frames()
    frames_holder.append(collector_frames)

    async def on_message(message: Any) -> None:
        method = getattr(message, "method", None)
        if method == "notifications/subscriptions/acknowledged":
            collector_frames.send.send_nowait(
                {
                    "method": method,
                    "params": message.params.model_dump(by_alias=True, exclude_none=True),
                }
            )

    async with Client(
        mcp, message_handler=on_message, extensions=[_Collect(collector_frames)]
    ) as client:
        from tests.wire import Wire, memory_wire_for

        wire: Wire = memory_wire_for(client)

        @asynccontextmanager
        async def open_stream(ids: list[str] | None, **options: Any) -> AsyncIterator[Frames]:
            async with memory_listen(client, _listen_params(ids, **options), collector_frames) as f:
                yield f

        yield open_stream, wire


@asynccontextmanager
async def connect_http_only(mcp: FastMCP, url: str) -> AsyncIterator[Any]:
    from tests.wire import http_wire_for

    async with http_wire_for(url) as wire:
        yield wire


def same_task(pushed: dict[str, Any], got: dict[str, Any]) -> bool:
    """Equal to what tasks/get returned; an active task's ttlMs grows with time."""
    drop = {"resultType", "_meta"} | ({"ttlMs"} if got["status"] in ACTIVE else set())
    return {k: v for k, v in pushed.items() if k not in drop} == {
        k: v for k, v in got.items() if k not in drop
    }


ACTIVE = ("working", "input_required")


def task_frames(frames: Frames) -> list[dict[str, Any]]:
    return [f["params"] for f in frames.seen if f.get("method") == "notifications/tasks"]


def check_task_frame(frame: dict[str, Any]) -> dict[str, Any]:
    """Schema-valid, stamped, no resultType; returns the DetailedTask part."""
    validate(
        "TaskStatusNotification",
        {"jsonrpc": "2.0", "method": "notifications/tasks", "params": frame},
    )
    assert frame["_meta"][SUB] == "L1"
    assert "resultType" not in frame
    return {k: v for k, v in frame.items() if k != "_meta"}


async def test_ack_first_then_current_state_then_every_change(transport: str) -> None:
    mcp, _, gates = listen_server()
    async with listening(mcp, transport, None) as (open_stream, wire):
        created = await wire.call_tool("stepper")
        task_id = created["taskId"]
        await wire.wait_for(task_id, lambda t: t.get("statusMessage") == "one")
        async with open_stream([task_id, "no-such-task"]) as frames:
            ack = await frames.next()
            assert ack.get("method") == "notifications/subscriptions/acknowledged", ack
            assert ack["params"]["_meta"][SUB] == "L1"
            assert ack["params"]["notifications"] == {"taskIds": [task_id]}  # unknown id left out
            current = check_task_frame((await frames.next())["params"])
            assert current["status"] == "working" and current["statusMessage"] == "one"
            gates.setdefault("step", anyio.Event()).set()
            parked = await frames.until(
                lambda f: f.get("params", {}).get("status") == "input_required"
            )
            parked_task = check_task_frame(parked["params"])
            got = await wire.get(task_id)
            assert same_task(parked_task, got)
            (key,) = parked_task["inputRequests"]
            await wire.update(task_id, {key: {"action": "accept", "content": {"value": True}}})
            await frames.until(lambda f: f.get("params", {}).get("statusMessage") == "two")
            gates.setdefault("finish", anyio.Event()).set()
            final = await frames.until(lambda f: f.get("params", {}).get("status") == "completed")
            final_task = check_task_frame(final["params"])
            assert final_task["result"]["content"][0]["text"] == "done accept"
            got = await wire.get(task_id)
            assert same_task(final_task, got) and final_task["ttlMs"] == got["ttlMs"]
            end = await frames.next()  # every acked task is terminal: graceful end
            assert end["result"]["resultType"] == "complete"
            assert end["result"]["_meta"][SUB] == "L1"
    statuses = [f["status"] for f in task_frames(frames)]
    assert statuses[0] == "working" and statuses[-1] == "completed"
    assert "input_required" in statuses
    for frame in frames.seen:
        method = frame.get("method")
        assert method in (None, "notifications/tasks", "notifications/subscriptions/acknowledged")
        if method == "notifications/tasks":
            assert frame["params"]["taskId"] == task_id  # never an id that was not acked


async def test_listen_with_task_ids_needs_the_opt_in(transport: str) -> None:
    mcp, _, _ = listen_server()
    async with listening(mcp, transport, None) as (open_stream, wire):
        created = await wire.call_tool("waits", {"key": "x"})
        async with open_stream([created["taskId"]], opt_in=False) as frames:
            answer = await frames.next()
    assert answer["error"]["code"] == -32021
    assert answer["error"]["message"] == (
        "Missing required client capability: subscriptions/listen with taskIds needs the "
        "tasks extension; the client must declare the io.modelcontextprotocol/tasks "
        'extension in the request\'s _meta["io.modelcontextprotocol/clientCapabilities"]'
    )


async def test_terminal_state_is_sent_even_if_it_happened_before_listening(transport: str) -> None:
    mcp, _, gates = listen_server()
    async with listening(mcp, transport, None) as (open_stream, wire):
        created = await wire.call_tool("waits", {"key": "k"})
        gates.setdefault("k", anyio.Event()).set()
        await wire.wait(created["taskId"])
        async with open_stream([created["taskId"]]) as frames:
            await frames.next()  # ack
            final = check_task_frame((await frames.next())["params"])
            end = await frames.next()
    assert final["status"] == "completed"
    assert "result" in end


async def test_a_flood_of_progress_is_coalesced(transport: str) -> None:
    mcp, _, _ = listen_server()
    async with listening(mcp, transport, None) as (open_stream, wire):
        created = await wire.call_tool("flood", {"n": 10_000})
        async with open_stream([created["taskId"]]) as frames:
            await frames.until(lambda f: "result" in f)
    tasks = task_frames(frames)
    assert tasks[-1]["status"] == "completed"
    assert [t["status"] for t in tasks].count("completed") == 1  # sent once, last
    assert len(tasks) <= 1_000  # at most one pending state per task: far below 10,000
    messages = [t.get("statusMessage") for t in tasks]
    indexes = [int(m.split()[1]) for m in messages if m and m.startswith("item")]
    assert indexes == sorted(indexes)  # never an older state after a newer one


async def test_two_subscribers_and_one_that_stops_reading(transport: str) -> None:
    if transport != "http":
        pytest.skip("a stalled reader needs a real transport stream")
    mcp, _, gates = listen_server()
    async with http_server(mcp) as url:
        from tests.wire import http_wire_for

        async with http_wire_for(url) as wire:
            created = await wire.call_tool("waits", {"key": "both"})
            task_id = created["taskId"]
            stalled = httpx.AsyncClient(timeout=30)
            body = {
                "jsonrpc": "2.0",
                "id": "S",
                "method": METHOD_LISTEN,
                "params": _listen_params([task_id]),
            }
            headers = {
                "Accept": "text/event-stream, application/json",
                "MCP-Protocol-Version": MODERN,
            }
            request = stalled.build_request("POST", url, json=body, headers=headers)
            response = await stalled.send(request, stream=True)  # never read
            try:
                async with http_listen(url, _listen_params([task_id])) as frames:
                    await frames.next()
                    gates.setdefault("both", anyio.Event()).set()
                    final = await frames.until(
                        lambda f: f.get("params", {}).get("status") == "completed"
                    )
                done = await wire.get(task_id)
            finally:
                await response.aclose()
                await stalled.aclose()
    assert final["params"]["status"] == done["status"] == "completed"


async def test_core_kinds_keep_working_alongside(transport: str) -> None:
    mcp, extension, gates = listen_server()
    async with listening(mcp, transport, None) as (open_stream, wire):
        created = await wire.call_tool("waits", {"key": "core"})
        async with open_stream([created["taskId"]], toolsListChanged=True) as frames:
            ack = await frames.next()
            assert ack["params"]["notifications"] == {
                "toolsListChanged": True,
                "taskIds": [created["taskId"]],
            }
            await frames.next()  # current state
            await extension.listen.bus.publish(ToolsListChanged())
            if transport == "http":
                changed = await frames.next()
                assert changed["method"] == "notifications/tools/list_changed"
                assert changed["params"]["_meta"][SUB] == "L1"
            gates.setdefault("core", anyio.Event()).set()
            await frames.until(lambda f: f.get("params", {}).get("status") == "completed")


async def test_plain_core_listen_is_served_by_the_sdk_handler() -> None:
    mcp, extension, _ = listen_server()
    async with (
        http_server(mcp) as url,
        http_listen(url, _listen_params(None, toolsListChanged=True)) as frames,
    ):
        ack = await frames.next()
        assert ack["params"]["notifications"] == {"toolsListChanged": True}
        await extension.listen.bus.publish(ToolsListChanged())
        changed = await frames.next()
    assert changed["method"] == "notifications/tools/list_changed"


async def test_the_listen_seam_still_exists() -> None:
    """If FastMCP moves or starts serving subscriptions/listen itself, this fails loudly."""
    mcp = FastMCP("seam")
    low_level = mcp._mcp_server
    assert hasattr(low_level, "add_request_handler")
    assert METHOD_LISTEN not in low_level._request_handlers, "FastMCP now serves listen itself"
    mcp.add_extension(TasksExtension())
    async with connect(mcp, "memory") as wire:
        assert METHOD_LISTEN in low_level._request_handlers
        with pytest.raises(WireError) as info:
            await wire.request(METHOD_LISTEN, {"notifications": {"taskIds": "nope"}})
        assert info.value.code == -32602
