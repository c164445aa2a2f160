"""The mode decision per `tools/call` (C1-C5, C12, C54), in memory and over HTTP."""

from __future__ import annotations

import pytest
from fastmcp import FastMCP

from fastmcp_tasks import MemoryTaskStore, TasksExtension
from fastmcp_tasks.errors import StoreError
from tests.servers import make_server
from tests.wire import TASKS, WireError, connect

pytestmark = pytest.mark.anyio


async def test_discover_advertises_the_extension(transport: str) -> None:
    mcp, _ = make_server()
    async with connect(mcp, transport) as wire:
        result = await wire.request("server/discover", {})
    assert result["capabilities"]["extensions"][TASKS] == {}
    assert "tasks" not in result["capabilities"]  # no legacy capability (C53)


@pytest.mark.parametrize(
    ("tool", "arguments", "opt_in", "expect"),
    [
        ("never_task", {}, True, "sync"),  # forbidden + opted in
        ("never_task", {}, False, "sync"),  # forbidden, no opt-in
        ("plain", {"x": 1}, True, "sync"),  # task not configured = forbidden
        ("echo", {"text": "hi"}, False, "sync"),  # optional, no opt-in
        ("echo", {"text": "hi"}, True, "task"),  # optional + opt-in
        ("required_job", {}, True, "task"),  # required + opt-in
        ("required_job", {}, False, "error"),  # required, no opt-in
    ],
)
async def test_mode_table(
    transport: str, tool: str, arguments: dict, opt_in: bool, expect: str
) -> None:
    mcp, _ = make_server()
    async with connect(mcp, transport) as wire:
        if expect == "error":
            with pytest.raises(WireError) as info:
                await wire.call_tool(tool, arguments, opt_in=opt_in)
            assert info.value.code == -32021
            # the spec fixes the code and data; the message also says what to do
            assert info.value.message == (
                "Missing required client capability: tool 'required_job' runs only as a task; "
                "the client must declare the io.modelcontextprotocol/tasks extension in the "
                'request\'s _meta["io.modelcontextprotocol/clientCapabilities"]'
            )
            assert info.value.data == {"requiredCapabilities": {"extensions": {TASKS: {}}}}
            if transport == "http":
                assert info.value.http_status == 400
            return
        result = await wire.call_tool(tool, arguments, opt_in=opt_in)
        if expect == "sync":
            assert result["resultType"] == "complete"
            assert "taskId" not in result
        else:
            assert result["resultType"] == "task"
            assert result["status"] == "working"
            done = await wire.wait(result["taskId"])
            assert done["status"] == "completed"


async def test_required_tool_on_a_legacy_connection_without_params_task_is_refused() -> None:
    """2025-11-25: a required tool called without `params.task` MUST get -32601."""
    mcp, _ = make_server()
    async with connect(mcp, "legacy") as wire:
        with pytest.raises(WireError) as info:
            await wire.call_tool("required_job", {}, opt_in=True)
    assert info.value.code == -32601


async def test_legacy_connection_without_params_task_never_receives_a_task() -> None:
    mcp, _ = make_server()
    async with connect(mcp, "legacy") as wire:
        result = await wire.call_tool("echo", {"text": "old"}, opt_in=True)
    assert "taskId" not in result
    assert result["content"][0]["text"] == "old"


async def test_legacy_task_param_is_ignored(transport: str) -> None:
    mcp, _ = make_server()
    async with connect(mcp, transport) as wire:
        params = {"name": "echo", "arguments": {"text": "x"}, "task": {"ttl": 1000}}
        result = await wire.request("tools/call", params, opt_in=False)
    assert result["resultType"] == "complete"  # a V1 `task` field is no opt-in (C12)


async def test_server_wide_tasks_default(transport: str) -> None:
    mcp = FastMCP("all-tasks", tasks=True)
    mcp.add_extension(TasksExtension())

    @mcp.tool
    async def anything() -> str:
        return "yes"

    async with connect(mcp, transport) as wire:
        created = await wire.call_tool("anything")
        assert created["resultType"] == "task"
        done = await wire.wait(created["taskId"])
    assert done["result"]["content"][0]["text"] == "yes"


async def test_tool_registered_after_start(transport: str) -> None:
    mcp, _ = make_server()
    async with connect(mcp, transport) as wire:

        @mcp.tool(task=True)
        async def late(n: int) -> int:
            return n + 100

        created = await wire.call_tool("late", {"n": 1})
        done = await wire.wait(created["taskId"])
    assert done["status"] == "completed"
    assert done["result"]["structuredContent"] == {"result": 101}


@pytest.mark.parametrize(
    "arguments", [{}, {"text": 5}, {"text": {"deep": [1]}}, {"text": "ok", "extra": 1}]
)
async def test_invalid_arguments_answer_like_the_sync_path(transport: str, arguments: dict) -> None:
    mcp, _ = make_server()
    async with connect(mcp, transport) as wire:
        as_task = await wire.call_tool("echo", arguments, opt_in=True)
        sync = await wire.call_tool("echo", arguments, opt_in=False)
    assert as_task["resultType"] == "complete"
    assert as_task["isError"] is True
    assert as_task["content"] == sync["content"]
    assert "taskId" not in as_task
    store = mcp._extensions[TASKS].store  # type: ignore[attr-defined]
    assert len(store) == 0  # no task was created


async def test_unknown_tool_answers_like_the_sync_path(transport: str) -> None:
    mcp, _ = make_server()
    async with connect(mcp, transport) as wire:
        result = await wire.call_tool("nope", {}, opt_in=True)
    assert result["isError"] is True
    assert "Unknown tool" in result["content"][0]["text"]


async def test_task_creation_is_refused_at_the_cap(transport: str) -> None:
    mcp, probes = make_server(max_tasks=2)
    async with connect(mcp, transport) as wire:
        first = await wire.call_tool("blocker", {"key": "a"})
        await wire.call_tool("blocker", {"key": "b"})
        with pytest.raises(WireError) as info:
            await wire.call_tool("blocker", {"key": "c"})
        assert info.value.code == -32000
        assert "max_tasks=2" in info.value.message
        assert info.value.data == {"limit": "max_tasks", "value": 2}
        assert (await wire.get(first["taskId"]))["status"] == "working"  # still serving
        probes.event("release", "a").set()
        probes.event("release", "b").set()
        await wire.wait(first["taskId"])


class _FailingStore(MemoryTaskStore):
    """A store whose backend has gone away (as Redis does when it is unreachable)."""

    async def create(self, record, *, caps=None):  # type: ignore[no-untyped-def]
        raise StoreError("redis://127.0.0.1:1/0 is unreachable: connection refused")

    async def get(self, task_id):  # type: ignore[no-untyped-def]
        raise StoreError("redis://127.0.0.1:1/0 is unreachable: connection refused")


async def test_an_unavailable_store_is_a_clear_error_and_nothing_is_created(
    transport: str,
) -> None:
    mcp = FastMCP("broken-store")
    mcp.add_extension(TasksExtension(store=_FailingStore()))

    @mcp.tool(task=True)
    async def job() -> str:
        return "never"

    async with connect(mcp, transport) as wire:
        for attempt in (
            lambda: wire.call_tool("job"),
            lambda: wire.get("some-task"),
        ):
            with pytest.raises(WireError) as info:
                await attempt()
            assert info.value.code == -32603
            assert info.value.message.startswith("Task store unavailable")
            assert "redis" not in info.value.message and "127.0.0.1" not in info.value.message
        assert (await wire.call_tool("job", opt_in=False))["content"][0]["text"] == "never"
