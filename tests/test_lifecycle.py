"""Every status a task can reach, and the task methods' gates (C9-C28, C38-C43, C50, C52)."""

from __future__ import annotations

import base64
import re
import time
from datetime import UTC, datetime, timedelta

import anyio
import pytest

from tests.servers import make_server
from tests.wire import TASKS, WireError, connect

pytestmark = pytest.mark.anyio

RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def parse(ts: str) -> datetime:
    return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


async def wall_clock_moves(ms: float) -> None:
    """Until `time.time()`, which rendering reads, is `ms` past now (a deadline poll)."""
    until = time.time() + ms / 1000
    with anyio.fail_after(5):
        while time.time() < until:  # noqa: ASYNC110 - the wall clock has no event
            await anyio.sleep(0.001)


async def test_completed_task_fields(transport: str) -> None:
    mcp, _ = make_server()
    async with connect(mcp, transport) as wire:
        created = await wire.call_tool("echo", {"text": "hello"})
        first = await wire.get(created["taskId"])  # durable before the answer (C10)
        done = await wire.wait(created["taskId"])
    task_id = created["taskId"]
    assert len(task_id) >= 22 and re.fullmatch(r"[A-Za-z0-9_-]+", task_id)
    assert first["taskId"] == task_id
    for task in (created, done):
        assert RFC3339.match(task["createdAt"]) and RFC3339.match(task["lastUpdatedAt"])
        assert isinstance(task["ttlMs"], int) and task["ttlMs"] >= 3_600_000
        assert task["pollIntervalMs"] == 5000
    assert done["createdAt"] == created["createdAt"]
    assert parse(done["lastUpdatedAt"]) >= parse(done["createdAt"])
    assert done["result"]["content"] == [{"type": "text", "text": "hello"}]
    assert done["result"]["resultType"] == "complete"
    assert "related-task" not in str(done["result"].get("_meta"))


async def test_poll_interval_comes_from_the_tool_config(transport: str) -> None:
    mcp, _ = make_server()
    async with connect(mcp, transport) as wire:
        created = await wire.call_tool("required_job", {"n": 4})
        done = await wire.wait(created["taskId"])
    assert created["pollIntervalMs"] == 1500
    assert done["result"]["structuredContent"] == {"result": 8}


async def test_tool_error_completes_with_is_error(transport: str) -> None:
    mcp, _ = make_server()
    async with connect(mcp, transport) as wire:
        created = await wire.call_tool("tool_error")
        done = await wire.wait(created["taskId"])
        crashed = await wire.wait((await wire.call_tool("crash"))["taskId"])
    assert done["status"] == "completed"  # isError is never `failed` (C28)
    assert done["result"]["isError"] is True
    assert done["result"]["content"][0]["text"] == "the job could not finish"
    assert crashed["status"] == "completed" and crashed["result"]["isError"] is True
    assert (
        crashed["result"]["content"][0]["text"] == "Error calling tool 'crash': boom: secret detail"
    )


async def test_protocol_error_fails_with_the_json_rpc_error(transport: str) -> None:
    mcp, _ = make_server()
    async with connect(mcp, transport) as wire:
        created = await wire.call_tool("protocol_error")
        done = await wire.wait(created["taskId"])
    assert done["status"] == "failed"
    assert done["error"] == {
        "code": -32050,
        "message": "upstream refused",
        "data": {"retryAfter": 3},
    }
    assert done["statusMessage"] == "upstream refused"  # always on failed (C20)
    assert "result" not in done


async def test_cancel_reaches_the_running_tool(transport: str) -> None:
    mcp, probes = make_server()
    async with connect(mcp, transport) as wire:
        created = await wire.call_tool("blocker", {"key": "run"})
        await probes.event("started", "run").wait()
        ack = await wire.cancel(created["taskId"])
        assert ack == {"resultType": "complete"} or set(ack) <= {"resultType", "_meta"}
        await probes.event("cancelled", "run").wait()  # the tool saw the cancellation
        done = await wire.wait(created["taskId"])
    assert done["status"] == "cancelled"
    assert "result" not in done and "error" not in done


async def test_a_queued_task_cancelled_never_starts(transport: str) -> None:
    mcp, probes = make_server(concurrency=1)
    async with connect(mcp, transport) as wire:
        first = await wire.call_tool("blocker", {"key": "first"})
        await probes.event("started", "first").wait()
        second = await wire.call_tool("blocker", {"key": "second"})
        assert second["status"] == "working"
        assert second["statusMessage"].startswith("Queued")
        await wire.cancel(second["taskId"])
        cancelled = await wire.wait(second["taskId"])
        probes.event("release", "first").set()
        finished = await wire.wait(first["taskId"])
    assert cancelled["status"] == "cancelled"
    assert finished["status"] == "completed"
    assert probes.runs == ["first"]


async def test_queued_tasks_start_in_order_and_clear_the_queued_message(transport: str) -> None:
    mcp, probes = make_server(concurrency=1)
    async with connect(mcp, transport) as wire:
        ids = [(await wire.call_tool("blocker", {"key": str(i)}))["taskId"] for i in range(3)]
        for i in range(3):
            await probes.event("started", str(i)).wait()
            running = await wire.get(ids[i])
            assert "statusMessage" not in running
            probes.event("release", str(i)).set()
            await wire.wait(ids[i])
    assert probes.runs == ["0", "1", "2"]


async def test_cancel_of_a_terminal_task_is_an_ack_without_change(transport: str) -> None:
    mcp, _ = make_server()
    async with connect(mcp, transport) as wire:
        created = await wire.call_tool("echo", {"text": "x"})
        done = await wire.wait(created["taskId"])
        ack = await wire.cancel(created["taskId"])
        after = await wire.get(created["taskId"])
    assert ack["resultType"] == "complete"
    assert after == done


async def test_terminal_state_survives_a_cancel_complete_race(transport: str) -> None:
    mcp, probes = make_server()
    async with connect(mcp, transport) as wire:
        for round_ in range(10):
            key = f"race{round_}"
            created = await wire.call_tool("blocker", {"key": key})
            await probes.event("started", key).wait()
            async with anyio.create_task_group() as group:
                group.start_soon(wire.cancel, created["taskId"])
                probes.event("release", key).set()
            final = await wire.wait(created["taskId"])
            assert final["status"] in ("completed", "cancelled")
            for _ in range(3):  # and it never changes again (C21)
                await wire.cancel(created["taskId"])
                assert await wire.get(created["taskId"]) == final


async def test_last_updated_moves_only_on_change(transport: str) -> None:
    mcp, probes = make_server()
    async with connect(mcp, transport) as wire:
        created = await wire.call_tool("blocker", {"key": "still"})
        await probes.event("started", "still").wait()
        a = await wire.get(created["taskId"])
        await wall_clock_moves(10)
        b = await wire.get(created["taskId"])
        probes.event("release", "still").set()
        c = await wire.wait(created["taskId"])
    assert a["lastUpdatedAt"] == b["lastUpdatedAt"]
    assert b["ttlMs"] >= a["ttlMs"] + 9  # time passed between: ttl grows with the task
    assert parse(c["lastUpdatedAt"]) >= parse(b["lastUpdatedAt"])


async def test_ttl_is_fixed_once_terminal_and_null_without_retention(transport: str) -> None:
    mcp, _ = make_server(retention=None)
    async with connect(mcp, transport) as wire:
        created = await wire.call_tool("echo", {"text": "forever"})
        done = await wire.wait(created["taskId"])
    assert created["ttlMs"] is None and done["ttlMs"] is None
    mcp, _ = make_server(retention=timedelta(seconds=30))
    async with connect(mcp, transport) as wire:
        created = await wire.call_tool("echo", {"text": "kept"})
        done = await wire.wait(created["taskId"])
        await wall_clock_moves(20)
        again = await wire.get(created["taskId"])
    lived = int((parse(done["lastUpdatedAt"]) - parse(done["createdAt"])).total_seconds() * 1000)
    assert done["ttlMs"] == again["ttlMs"]
    assert 30_000 + lived - 1 <= done["ttlMs"] <= 30_000 + lived + 1


async def test_expired_task_is_not_found(transport: str) -> None:
    mcp, _ = make_server(retention=timedelta(milliseconds=50))
    async with connect(mcp, transport) as wire:
        created = await wire.call_tool("echo", {"text": "brief"})
        await wire.wait(created["taskId"])
        with anyio.fail_after(5):
            while True:
                try:
                    await wire.get(created["taskId"])
                except WireError as error:
                    assert error.code == -32602
                    break
                await anyio.sleep(0.01)


@pytest.mark.parametrize("method", ["tasks/get", "tasks/update", "tasks/cancel"])
async def test_unknown_task_is_invalid_params(transport: str, method: str) -> None:
    mcp, _ = make_server()
    params: dict = {"taskId": "no-such-task"}
    if method == "tasks/update":
        params["inputResponses"] = {}
    async with connect(mcp, transport) as wire:
        with pytest.raises(WireError) as info:
            await wire.request(method, params)
    assert info.value.code == -32602
    assert "Task not found" in info.value.message


@pytest.mark.parametrize("method", ["tasks/get", "tasks/update", "tasks/cancel"])
async def test_task_methods_require_the_per_request_opt_in(transport: str, method: str) -> None:
    mcp, _ = make_server()
    async with connect(mcp, transport) as wire:
        created = await wire.call_tool("echo", {"text": "x"})
        for task_id in (created["taskId"], "gate-test"):
            params: dict = {"taskId": task_id}
            if method == "tasks/update":
                params["inputResponses"] = {}
            with pytest.raises(WireError) as info:
                await wire.request(method, params, opt_in=False)
            assert info.value.code == -32021
            assert info.value.data == {"requiredCapabilities": {"extensions": {TASKS: {}}}}
            assert info.value.message == (
                f"Missing required client capability: {method} needs the tasks extension; "
                "the client must declare the io.modelcontextprotocol/tasks extension in the "
                'request\'s _meta["io.modelcontextprotocol/clientCapabilities"]'
            )


@pytest.mark.parametrize("method", ["tasks/result", "tasks/list"])
async def test_removed_methods_are_not_found(transport: str, method: str) -> None:
    mcp, _ = make_server()
    async with connect(mcp, transport) as wire:
        with pytest.raises(WireError) as info:
            await wire.request(method, {"taskId": "x"})
    assert info.value.code == -32601


async def test_mcp_name_header_must_match_the_task_id() -> None:
    mcp, _ = make_server()
    async with connect(mcp, "http") as wire:
        created = await wire.call_tool("echo", {"text": "x"})
        task_id = created["taskId"]
        with pytest.raises(WireError) as info:
            await wire.get(task_id, headers={"Mcp-Name": "another-task"})
        assert info.value.code == -32020 and info.value.http_status == 400
        encoded = "=?base64?" + base64.b64encode(task_id.encode()).decode() + "?="
        assert (await wire.get(task_id, headers={"Mcp-Name": encoded}))["taskId"] == task_id
        assert (await wire.cancel(task_id, headers={"Mcp-Name": task_id}))[
            "resultType"
        ] == "complete"


async def test_update_acks_and_ignores_unknown_keys(transport: str) -> None:
    mcp, probes = make_server()
    async with connect(mcp, transport) as wire:
        created = await wire.call_tool("blocker", {"key": "u"})
        await probes.event("started", "u").wait()
        before = await wire.get(created["taskId"])
        ack = await wire.update(
            created["taskId"], {"unknown-key": {"ignored": True}}, malformed=True
        )
        after = await wire.get(created["taskId"])
        probes.event("release", "u").set()
        done = await wire.wait(created["taskId"])
        late = await wire.update(created["taskId"], {"k": {"action": "accept"}})
    assert ack["resultType"] == "complete" and late["resultType"] == "complete"

    def unchanged(task: dict) -> dict:
        return {k: v for k, v in task.items() if k != "ttlMs"}  # ttl grows while running

    assert unchanged(before) == unchanged(after)
    assert done["status"] == "completed"


async def test_a_task_running_at_shutdown_ends_failed() -> None:
    mcp, probes = make_server()
    store = mcp._extensions[TASKS].store  # type: ignore[attr-defined]
    async with connect(mcp, "memory") as wire:
        created = await wire.call_tool("blocker", {"key": "orphan"})
        await probes.event("started", "orphan").wait()
    record = await store.get(created["taskId"])
    assert record is not None and record.status == "failed"
    assert record.error["code"] == -32603
    assert "shut down" in record.error["message"]


async def test_the_reply_reaches_the_client_before_the_tool_starts() -> None:
    """A task's tool starts only after the creating request's reply is with an in-memory
    client (`jobs.REPLY_TURNS`): the client is not kept waiting by the work it handed off
    (over HTTP the reply is on the socket by then; `bench.run` measures both)."""
    mcp, _ = make_server()
    order: list[str] = []

    @mcp.tool(task=True)
    async def mark_start() -> str:
        order.append("tool started")
        return "ok"

    with anyio.fail_after(10):
        async with connect(mcp, "memory") as wire:
            created = await wire.call_tool("mark_start")
            order.append("reply received")
            done = await wire.wait(created["taskId"])
    assert order == ["reply received", "tool started"]
    assert done["status"] == "completed"
