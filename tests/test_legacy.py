"""The 2025-11-25 ("V1") tasks, served from the same store as the 2026 extension.

Driven over a 2025-11-25 connection (FastMCP's `Client(..., mode="legacy")`, in
memory and over Streamable HTTP) with raw JSON-RPC, each result compared with
what the 2025-11-25 text asks and with the synchronous call of the same tool.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp_types
import pytest
from fastmcp import Client, Context, FastMCP
from fastmcp.utilities.tasks import TaskConfig
from mcp.client.extension import ClientExtension, NotificationBinding
from mcp.shared.exceptions import MCPError

from fastmcp_tasks import TasksExtension
from fastmcp_tasks.stores.memory import MemoryTaskStore
from fastmcp_tasks.wire.legacy import RELATED_TASK
from tests.wire import Wire, WireError, http_server, memory_wire_for

pytestmark = pytest.mark.anyio

V1_TASK_KEYS = {"taskId", "status", "createdAt", "lastUpdatedAt", "ttl"}


def v1_server(**extension: Any) -> tuple[FastMCP, dict[str, anyio.Event]]:
    mcp = FastMCP("v1", tasks=False)
    mcp.add_extension(TasksExtension(**extension))
    events = {"release": anyio.Event(), "started": anyio.Event(), "cancelled": anyio.Event()}

    @mcp.tool(task=True)
    async def double(x: int) -> int:
        return x * 2

    @mcp.tool(task=True)
    async def gated(x: int) -> int:
        events["started"].set()
        try:
            await events["release"].wait()
        except anyio.get_cancelled_exc_class():
            events["cancelled"].set()
            raise
        return x

    @mcp.tool(task=True)
    async def broken() -> str:
        raise ValueError("boom")

    @mcp.tool(task=True)
    async def rpc_error() -> str:
        raise MCPError(code=-32099, message="upstream refused", data={"why": "quota"})

    @mcp.tool(task=TaskConfig(mode="required"))
    async def must() -> str:
        return "tasked"

    @mcp.tool
    async def plain() -> str:
        return "plain"

    return mcp, events


@asynccontextmanager
async def legacy_wire(
    server: FastMCP, transport: str, **client: Any
) -> AsyncIterator[tuple[Wire, Client]]:
    """A raw wire over a 2025-11-25 `Client` (in memory or over HTTP); `client` options."""
    if transport == "memory":
        async with Client(server, mode="legacy", **client) as connected:
            yield memory_wire_for(connected, "memory-legacy"), connected
        return
    async with http_server(server) as url, Client(url, mode="legacy", **client) as connected:
        yield memory_wire_for(connected, "http-legacy"), connected


async def call(wire: Wire, name: str, arguments: dict[str, Any] | None = None, **task: Any) -> Any:
    params: dict[str, Any] = {"name": name, "arguments": arguments or {}}
    if task is not None:
        params["task"] = task
    return await wire.request("tools/call", params, opt_in=False)


async def v1(wire: Wire, method: str, **params: Any) -> dict[str, Any]:
    return await wire.request(method, params, opt_in=False)


async def test_the_capability_and_tool_support_are_advertised(transport: str) -> None:
    server, _ = v1_server()
    async with legacy_wire(server, transport) as (wire, client):
        capabilities = client.initialize_result.capabilities.model_dump(
            by_alias=True, exclude_none=True
        )
        tools = {t["name"]: t for t in (await v1(wire, "tools/list"))["tools"]}
    assert capabilities["tasks"] == {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
    assert tools["double"]["execution"] == {"taskSupport": "optional"}
    assert tools["must"]["execution"] == {"taskSupport": "required"}
    assert "execution" not in tools["plain"] or tools["plain"]["execution"] in (
        None,
        {"taskSupport": "forbidden"},
    )


async def test_a_task_s_result_is_the_synchronous_call_s(transport: str) -> None:
    server, _ = v1_server()
    async with legacy_wire(server, transport) as (wire, _):
        for name, arguments in (("double", {"x": 21}), ("broken", {})):
            sync = await wire.request(
                "tools/call", {"name": name, "arguments": arguments}, opt_in=False
            )
            created = await call(wire, name, arguments, ttl=60_000)
            assert set(created) == {"task"} and V1_TASK_KEYS <= set(created["task"])
            assert created["task"]["status"] == "working"
            task_id = created["task"]["taskId"]
            result = await v1(wire, "tasks/result", taskId=task_id)
            assert result.pop("_meta")[RELATED_TASK] == {"taskId": task_id}
            sync.pop("_meta", None)
            assert result == sync
            status = (await v1(wire, "tasks/get", taskId=task_id))["status"]
            assert status == ("failed" if sync.get("isError") else "completed")  # V1: isError fails


async def test_a_json_rpc_error_comes_back_from_tasks_result(transport: str) -> None:
    server, _ = v1_server()
    async with legacy_wire(server, transport) as (wire, _):
        created = await call(wire, "rpc_error")
        with pytest.raises(WireError) as failed:
            await v1(wire, "tasks/result", taskId=created["task"]["taskId"])
    assert (failed.value.code, failed.value.message, failed.value.data) == (
        -32099,
        "upstream refused",
        {"why": "quota"},
    )


async def test_tasks_result_waits_for_the_end(transport: str) -> None:
    server, events = v1_server()
    async with legacy_wire(server, transport) as (wire, _):
        task_id = (await call(wire, "gated", {"x": 7}))["task"]["taskId"]
        await events["started"].wait()
        answer: dict[str, Any] = {}

        async def wait_for_result() -> None:
            answer.update(await v1(wire, "tasks/result", taskId=task_id))

        async with anyio.create_task_group() as group:
            group.start_soon(wait_for_result)
            assert (await v1(wire, "tasks/get", taskId=task_id))["status"] == "working"
            assert not answer
            events["release"].set()
    assert answer["structuredContent"] == {"result": 7}


async def test_the_reply_reaches_the_client_before_the_tool_starts() -> None:
    """As on a 2026 connection (`test_lifecycle`): the `CreateTaskResult` is with an
    in-memory client before the tool's body runs."""
    server, _ = v1_server()
    order: list[str] = []

    @server.tool(task=True)
    async def mark_start() -> str:
        order.append("tool started")
        return "ok"

    with anyio.fail_after(10):
        async with legacy_wire(server, "memory") as (wire, _):
            task_id = (await call(wire, "mark_start"))["task"]["taskId"]
            order.append("reply received")
            result = await v1(wire, "tasks/result", taskId=task_id)
    assert order == ["reply received", "tool started"]
    assert result["content"] == [{"type": "text", "text": "ok"}]


async def test_modes_and_their_errors(transport: str) -> None:
    server, _ = v1_server()
    async with legacy_wire(server, transport) as (wire, _):
        with pytest.raises(WireError) as required:
            await wire.request("tools/call", {"name": "must", "arguments": {}}, opt_in=False)
        with pytest.raises(WireError) as forbidden:
            await call(wire, "plain")
        plain = await wire.request("tools/call", {"name": "plain", "arguments": {}}, opt_in=False)
        params = {"name": "double", "arguments": {"x": 1}}
        sync = await wire.request("tools/call", params, opt_in=False)
    assert required.value.code == forbidden.value.code == -32601
    assert plain["content"][0]["text"] == "plain"
    assert sync["structuredContent"] == {"result": 2}  # optional without params.task: synchronous


async def test_cancel_ends_the_task_before_it_answers(transport: str) -> None:
    server, events = v1_server()
    async with legacy_wire(server, transport) as (wire, _):
        task_id = (await call(wire, "gated", {"x": 1}))["task"]["taskId"]
        await events["started"].wait()
        cancelled = await v1(wire, "tasks/cancel", taskId=task_id)
        assert cancelled["status"] == "cancelled" and cancelled["taskId"] == task_id
        assert (await v1(wire, "tasks/get", taskId=task_id))["status"] == "cancelled"
        with anyio.fail_after(5):
            await events["cancelled"].wait()  # the tool itself was stopped
        with pytest.raises(WireError) as again:
            await v1(wire, "tasks/cancel", taskId=task_id)
        assert again.value.code == -32602
        for method in ("tasks/get", "tasks/result", "tasks/cancel"):
            with pytest.raises(WireError) as unknown:
                await v1(wire, method, taskId="x" * 32)
            assert unknown.value.code == -32602


async def test_list_shows_the_session_s_tasks_paginated(
    transport: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, _ = v1_server()
    async with legacy_wire(server, transport) as (wire, _):
        made = [(await call(wire, "double", {"x": i}))["task"]["taskId"] for i in range(53)]
        reads = {"get": 0, "get_many": 0}
        for name in reads:
            original = getattr(MemoryTaskStore, name)

            async def counted(self: Any, *args: Any, _o: Any = original, _n: str = name) -> Any:
                reads[_n] += 1
                return await _o(self, *args)

            monkeypatch.setattr(MemoryTaskStore, name, counted)
        first = await v1(wire, "tasks/list")
        second = await v1(wire, "tasks/list", cursor=first["nextCursor"])
        assert reads == {"get": 0, "get_many": 2}  # one read of the session's tasks a page
        with pytest.raises(WireError) as bad:
            await v1(wire, "tasks/list", cursor="not-a-cursor")
    listed = [t["taskId"] for t in first["tasks"] + second["tasks"]]
    assert sorted(listed) == sorted(made) and len(set(listed)) == 53
    assert "nextCursor" not in second and bad.value.code == -32602
    assert all(V1_TASK_KEYS <= set(t) for t in first["tasks"])


async def test_one_store_both_generations(transport: str) -> None:
    """A task made on one generation is read and cancelled from the other."""
    server, events = v1_server()
    async with legacy_wire(server, transport) as (old, _), Client(server) as new_client:
        new = memory_wire_for(new_client)
        legacy_id = (await call(old, "double", {"x": 4}))["task"]["taskId"]
        await v1(old, "tasks/result", taskId=legacy_id)
        seen = await new.get(legacy_id)
        assert seen["status"] == "completed"
        assert seen["result"]["structuredContent"] == {"result": 8}
        modern_id = (await new.call_tool("gated", {"x": 3}))["taskId"]
        await events["started"].wait()
        assert (await v1(old, "tasks/get", taskId=modern_id))["status"] == "working"
        assert (await v1(old, "tasks/cancel", taskId=modern_id))["status"] == "cancelled"
        assert (await new.get(modern_id))["status"] == "cancelled"


async def test_the_surfaces_never_mix(transport: str) -> None:
    server, _ = v1_server()
    async with legacy_wire(server, transport), Client(server) as new_client:
        new = memory_wire_for(new_client)
        created = await new.call_tool("double", {"x": 1})
        assert created["resultType"] == "task" and "task" not in created and "ttl" not in created
        for method, params in (("tasks/result", {"taskId": created["taskId"]}), ("tasks/list", {})):
            with pytest.raises(WireError) as absent:
                await new.request(method, params)
            assert absent.value.code == -32601
        discovered = (await new.request("server/discover", {}))["capabilities"]
        assert "tasks" not in discovered
        assert "io.modelcontextprotocol/tasks" in discovered["extensions"]


async def test_the_off_switch(transport: str) -> None:
    server, _ = v1_server(legacy_tasks=False)
    async with legacy_wire(server, transport) as (wire, client):
        capabilities = client.initialize_result.capabilities.model_dump(exclude_none=True)
        answer = await call(wire, "double", {"x": 5})
        with pytest.raises(WireError) as absent:
            await v1(wire, "tasks/list")
    assert "tasks" not in capabilities
    assert answer["structuredContent"] == {"result": 10}  # run synchronously, as before
    assert absent.value.code == -32601


async def test_input_travels_on_the_tasks_result_stream(transport: str) -> None:
    """The tool's `ctx.elicit` reaches the client's handler through `tasks/result`, tagged
    with the related task, and the task gets what the synchronous call gets."""
    mcp = FastMCP("asks")
    mcp.add_extension(TasksExtension())

    @mcp.tool(task=True)
    async def greet(ctx: Context) -> str:
        answer = await ctx.elicit("Your name?", str)
        return f"hello {answer.data}" if answer.action == "accept" else answer.action

    seen: list[Any] = []

    async def handler(message: str, response_type: Any, params: Any, context: Any) -> Any:
        seen.append((message, (params.meta or {}).get(RELATED_TASK)))
        return "Ada"

    async with legacy_wire(mcp, transport, elicitation_handler=handler) as (wire, _):
        params = {"name": "greet", "arguments": {}}
        sync = await wire.request("tools/call", params, opt_in=False)
        task_id = (await call(wire, "greet"))["task"]["taskId"]
        result = await v1(wire, "tasks/result", taskId=task_id)
    assert sync["content"] == result["content"] == [{"type": "text", "text": "hello Ada"}]
    assert seen == [("Your name?", None), ("Your name?", {"taskId": task_id})]


async def test_status_notifications_and_input_without_tasks_result(transport: str) -> None:
    """A client that only polls `tasks/get` (as FastMCP 3's does) hears each status change
    from its first poll on, and gets the input request on its session's own stream."""
    gate = anyio.Event()
    mcp = FastMCP("pushes")
    mcp.add_extension(TasksExtension())

    @mcp.tool(task=True)
    async def confirm(ctx: Context) -> str:
        await ctx.report_progress(1, 2, "preparing")
        await gate.wait()
        answer = await ctx.elicit("Proceed?", bool)
        return f"answered {answer.data}" if answer.action == "accept" else answer.action

    statuses: list[tuple[str, str | None, Any]] = []
    heard = {"preparing": anyio.Event(), "completed": anyio.Event()}

    async def on_status(params: mcp_types.TaskStatusNotificationParams) -> None:
        meta = params.meta or {}
        statuses.append((params.status, params.status_message, meta.get(RELATED_TASK)))
        for key in (params.status, params.status_message):
            if key in heard:
                heard[key].set()

    class StatusObserver(ClientExtension):
        """Hears `notifications/tasks/status` (FastMCP 4's client has no V1 handler)."""

        identifier = "test/v1-status"

        def notifications(self) -> list[NotificationBinding[Any]]:
            return [
                NotificationBinding(
                    method="notifications/tasks/status",
                    params_type=mcp_types.TaskStatusNotificationParams,
                    handler=on_status,
                )
            ]

    async def handler(message: str, response_type: Any, params: Any, context: Any) -> Any:
        return True

    options = {"elicitation_handler": handler, "extensions": [StatusObserver()]}
    async with legacy_wire(mcp, transport, **options) as (wire, _):
        task_id = (await call(wire, "confirm"))["task"]["taskId"]
        await v1(wire, "tasks/get", taskId=task_id)  # pushes start once the client knows it
        with anyio.fail_after(10):
            await heard["preparing"].wait()
            gate.set()
            await heard["completed"].wait()  # answered on the session's stream: no tasks/result
        assert (await v1(wire, "tasks/get", taskId=task_id))["status"] == "completed"
        result = await v1(wire, "tasks/result", taskId=task_id)
    assert result["content"][0]["text"] == "answered True"
    shown = [(status, message) for status, message, _ in statuses]
    assert shown[0] == ("working", "preparing") and shown[-1][0] == "completed"
    assert ("input_required", "Proceed?") in shown
    assert all(related == {"taskId": task_id} for _, _, related in statuses)


async def test_tasks_result_of_a_cancelled_task_has_no_payload(transport: str) -> None:
    server, events = v1_server()
    async with legacy_wire(server, transport) as (wire, _):
        task_id = (await call(wire, "gated", {"x": 1}))["task"]["taskId"]
        await events["started"].wait()
        await v1(wire, "tasks/cancel", taskId=task_id)
        result = await v1(wire, "tasks/result", taskId=task_id)
    assert result == {"_meta": {RELATED_TASK: {"taskId": task_id}}}


async def test_a_client_that_refuses_an_elicitation_does_not_leave_the_task_parked(
    transport: str,
) -> None:
    mcp = FastMCP("refused")
    mcp.add_extension(TasksExtension())

    @mcp.tool(task=True)
    async def ask(ctx: Context) -> str:
        answer = await ctx.elicit("Name?", str)
        return answer.action

    async def handler(message: str, response_type: Any, params: Any, context: Any) -> Any:
        raise RuntimeError("this client cannot ask its user")

    async with legacy_wire(mcp, transport, elicitation_handler=handler) as (wire, _):
        task_id = (await call(wire, "ask"))["task"]["taskId"]
        result = await v1(wire, "tasks/result", taskId=task_id)
    assert result["content"][0]["text"] == "cancel"
