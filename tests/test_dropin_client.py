"""Code written for the official package's documented client API runs unchanged on ours.

The examples of the official `docs/clients/tasks.mdx` (transparent `call_tool`,
`call_tool_task` with `status()` / `wait()` / `result()` / `await task` /
`cancel()`, elicitation mid-task, `raise_on_error`, `version=`, `meta=`) run here
as written where they can, each over the in-memory transport and a real HTTP
server. The tools are gated with `anyio.Event`s; nothing sleeps and hopes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import anyio
import pytest
from fastmcp import Client, Context, FastMCP
from fastmcp.exceptions import ToolError
from fastmcp.server.middleware import Middleware, MiddlewareContext
from fastmcp.utilities.tasks import TaskConfig
from mcp.shared.exceptions import MCPError

import fastmcp_tasks  # enables client task support, as the docs say
from fastmcp_tasks import NotATask, TaskCancelled, TaskFailed, TasksExtension, TaskSnapshot
from fastmcp_tasks.client import TasksClientExtension, ToolTask, call_tool_task
from fastmcp_tasks.client.answers import InputAnswerer
from fastmcp_tasks.client_models import ClientCreateTaskResult, ClientGetTaskResult
from tests.wire import http_server

pytestmark = pytest.mark.anyio

FAST = TaskConfig(poll_interval=timedelta(milliseconds=20))
#: What a timed-out call may take in all, the shielded `tasks/cancel` included.
PROMPT = 2.5


@dataclass
class Dinner:
    cuisine: str
    vegetarian: bool


@dataclass
class Probe:
    """The server under test and what its tools and task methods report to the test."""

    mcp: FastMCP
    gate: anyio.Event = field(default_factory=anyio.Event)
    started: anyio.Event = field(default_factory=anyio.Event)
    cancelled: anyio.Event = field(default_factory=anyio.Event)
    cancels: list[str] = field(default_factory=list)
    metas: list[dict[str, Any]] = field(default_factory=list)
    sync_runs: list[str] = field(default_factory=list)


class RecordMeta(Middleware):
    """Records the `_meta` of every `tools/call` the server receives."""

    def __init__(self, probe: Probe) -> None:
        self.probe = probe

    async def on_call_tool(self, context: MiddlewareContext, call_next: Any) -> Any:
        request = context.fastmcp_context.request_context if context.fastmcp_context else None
        self.probe.metas.append(dict(request.meta or {}) if request is not None else {})
        return await call_next(context)


def dropin_server() -> Probe:
    mcp = FastMCP("dropin")
    extension = TasksExtension()
    probe = Probe(mcp)
    real_cancel = extension._methods.cancel

    async def cancel(ctx, params):  # type: ignore[no-untyped-def]
        probe.cancels.append(params.task_id)
        return await real_cancel(ctx, params)

    extension._methods.cancel = cancel  # type: ignore[method-assign]
    mcp.add_extension(extension)
    mcp.add_middleware(RecordMeta(probe))

    @mcp.tool(task=FAST)
    async def slow_computation(duration: int) -> int:
        return duration * 2

    @mcp.tool(task=FAST)
    async def gated(ctx: Context) -> str:
        await ctx.report_progress(1, 2, "halfway there")
        probe.started.set()
        try:
            await probe.gate.wait()
        except anyio.get_cancelled_exc_class():
            probe.cancelled.set()
            raise
        return "released"

    @mcp.tool(task=FAST)
    async def fails() -> str:
        raise MCPError(code=-32050, message="upstream refused", data={"retryAfter": 3})

    @mcp.tool(task=FAST)
    async def reports_error() -> str:
        raise ToolError("the job could not finish")

    @mcp.tool(name="which", version="1.0", task=FAST)
    async def which_one() -> str:
        return "1.0"

    @mcp.tool(name="which", version="2.0", task=FAST)
    async def which_two() -> str:
        return "2.0"

    @mcp.tool(task=FAST)
    async def plan_dinner(ctx: Context) -> str:
        answer = await ctx.elicit("What should we cook?", Dinner)
        if answer.action != "accept":
            return answer.action
        return f"{answer.data.cuisine}, vegetarian={answer.data.vegetarian}"

    @mcp.tool(task=FAST)
    async def when() -> datetime:
        return datetime(2026, 7, 28, 12, 0)

    @mcp.tool
    async def plain(text: str) -> str:
        probe.sync_runs.append(text)
        return f"plain {text}"

    @mcp.tool
    async def stall() -> str:
        await probe.gate.wait()
        return "released"

    return probe


@asynccontextmanager
async def serving(mcp: FastMCP, transport: str) -> AsyncIterator[Any]:
    """What a `Client` connects to: the server itself, or the URL of it served over HTTP."""
    if transport == "http":
        async with http_server(mcp) as url:
            yield url
    else:
        yield mcp


@asynccontextmanager
async def connected(mcp: FastMCP, transport: str, **options: Any) -> AsyncIterator[Client[Any]]:
    async with serving(mcp, transport) as target, Client(target, **options) as client:
        yield client


async def handle_elicitation(message, response_type, params, context):  # type: ignore[no-untyped-def]
    return {"cuisine": "Thai", "vegetarian": True}


def text_of(result: Any) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


# --- transparent calls ---------------------------------------------------------------


async def test_transparent_call_tool_returns_data(transport: str) -> None:
    probe = dropin_server()
    async with connected(probe.mcp, transport, mode="auto") as client:
        result = await client.call_tool("slow_computation", {"duration": 10})
        assert result.data == 20
        assert (await client.call_tool("which", {}, version="1.0")).data == "1.0"
        assert (await client.call_tool("which", {})).data == "2.0"
    assert fastmcp_tasks.TaskSnapshot is TaskSnapshot


async def test_transparent_failures_are_tool_errors_and_mcp_errors(transport: str) -> None:
    probe = dropin_server()
    ids: list[str] = []
    tasks = TasksClientExtension(on_status=lambda state: ids.append(state["taskId"]))
    async with connected(probe.mcp, transport, extensions=[tasks]) as client:
        with pytest.raises(ToolError) as failed:
            await client.call_tool("fails", {})
        assert isinstance(failed.value, TaskFailed) and isinstance(failed.value, MCPError)
        assert failed.value.error.code == -32050 and failed.value.error.data == {"retryAfter": 3}
        with pytest.raises(ToolError, match="could not finish") as reported:
            await client.call_tool("reports_error", {})
        assert not isinstance(reported.value, TaskFailed)  # a completed isError result
        outcome: list[BaseException] = []
        before = set(ids)

        async def call() -> None:
            try:
                await client.call_tool("gated", {})
            except Exception as exc:
                outcome.append(exc)

        async with anyio.create_task_group() as group:
            group.start_soon(call)
            with anyio.fail_after(5):
                while not set(ids) - before:  # noqa: ASYNC110 - the resolver reports the id
                    await anyio.sleep(0.01)
            [task_id] = set(ids) - before
            await probe.started.wait()
            await ToolTask(client, task_id).cancel()
    [error] = outcome
    assert isinstance(error, TaskCancelled) and isinstance(error, ToolError)
    assert "was cancelled" in str(error)


# --- call_tool_task: the handle ------------------------------------------------------


async def test_the_documented_handle_walkthrough(transport: str) -> None:
    probe = dropin_server()
    async with connected(probe.mcp, transport, mode="auto") as client:
        seen: list[Any] = []
        task = await call_tool_task(client, "gated", {}, on_status_change=seen.append)
        assert isinstance(task.create_result, ClientCreateTaskResult)
        assert task.create_result.task_id == task.task_id and task.tool_name == "gated"
        await probe.started.wait()

        status = await task.status()
        assert isinstance(status, ClientGetTaskResult)
        assert f"{status.status}: {status.status_message}" == "working: halfway there"
        assert status.task_id == task.task_id and status.result is None
        assert status["statusMessage"] == status.get("statusMessage") == "halfway there"
        assert "result" not in status and isinstance(status.created_at, str)
        assert status.as_dict()["taskId"] == task.task_id == status.model_dump()["taskId"]
        assert (await task.wait(state="working", timeout=30.0)).status == "working"
        with pytest.raises(TimeoutError):
            await task.wait(timeout=0.2)  # observes only: the task keeps running
        assert probe.cancels == []

        probe.gate.set()
        status = await task.wait(timeout=30.0)
        assert status.status == "completed" and status.result is not None
        result = await task.result()
        assert result.data == "released" and not result.is_error
        assert await task is result and await task.result() is result
        await task.cancel()  # already completed: nothing is sent
        assert [snap.status async for snap in task.updates()] == ["completed"]
    assert probe.cancels == []
    assert all(isinstance(snap, TaskSnapshot) for snap in seen)
    assert seen[0].status == "working" and seen[-1].status == "completed"


async def test_the_documented_full_example(transport: str) -> None:
    probe = dropin_server()
    lines: list[str] = []
    async with connected(probe.mcp, transport, mode="auto") as client:
        task = await call_tool_task(client, "slow_computation", {"duration": 10})
        lines.append(f"Task started: {task.task_id}")
        while True:
            status = await task.status()
            if status.status in ("completed", "failed", "cancelled"):
                break
            lines.append(f"Still working... ({status.status})")
            await asyncio.sleep(0.05)
        result = await task.result()
        lines.append(f"Result: {result.data}")
    assert lines[0] == f"Task started: {task.task_id}" and lines[-1] == "Result: 20"


async def test_cancel_and_raise_on_error(transport: str) -> None:
    probe = dropin_server()
    async with connected(probe.mcp, transport) as client:
        task = await call_tool_task(client, "gated", {})
        await probe.started.wait()
        await task.cancel()
        await task.cancel()  # at most one tasks/cancel per handle
        with pytest.raises(ToolError) as cancelled:
            await task.result()
        assert isinstance(cancelled.value, TaskCancelled)
        assert (await task.wait()).status == "cancelled"
        await probe.cancelled.wait()
        assert probe.cancels == [task.task_id]

        quiet = await call_tool_task(client, "gated", {}, raise_on_error=False)
        await quiet.cancel()
        result = await quiet.result()
        assert result.is_error and text_of(result) == f"Task {quiet.task_id} was cancelled"

        failing = await call_tool_task(client, "fails")
        with pytest.raises(ToolError, match="upstream refused") as failed:
            await failing
        assert isinstance(failed.value, MCPError) and failed.value.error.code == -32050
        quiet = await call_tool_task(client, "fails", raise_on_error=False)
        result = await quiet.result()
        assert result.is_error and text_of(result) == "upstream refused"
        assert await quiet.result() is result

        reported = await call_tool_task(client, "reports_error")
        with pytest.raises(ToolError, match="could not finish"):
            await reported.result()
        quiet = await call_tool_task(client, "reports_error", raise_on_error=False)
        assert (await quiet.result()).is_error


async def test_the_result_is_parsed_as_call_tool_parses_it(transport: str) -> None:
    probe = dropin_server()
    async with connected(probe.mcp, transport) as client:
        transparent = await client.call_tool("when", {})
        task = await call_tool_task(client, "when")
        result = await task.result()
        assert result.data == transparent.data == datetime(2026, 7, 28, 12, 0)  # the schema's
        assert result.structured_content == transparent.structured_content
        assert task.task_id is not None
        resumed = await ToolTask.resume(client, task.task_id)  # no tool name: no schema
        assert (await resumed.result()).data == "2026-07-28T12:00:00"


async def test_version_and_meta_reach_the_server(transport: str) -> None:
    probe = dropin_server()
    async with connected(probe.mcp, transport) as client:
        one = await call_tool_task(client, "which", version="1.0", meta={"user": "ada"})
        assert (await one.result()).data == "1.0"
        assert (await (await call_tool_task(client, "which")).result()).data == "2.0"
        await client.call_tool("which", {}, version="1.0", meta={"user": "ada"})
    tasked, default, synchronous = probe.metas
    assert tasked["user"] == "ada" and tasked["fastmcp"]["version"] == "1.0"
    assert "user" not in default and "version" not in (default.get("fastmcp") or {})
    for key in ("user", "fastmcp"):  # the same request _meta as client.call_tool() sends
        assert tasked[key] == synchronous[key]


async def test_a_synchronous_answer_raises_not_a_task(transport: str) -> None:
    probe = dropin_server()
    async with connected(probe.mcp, transport) as client:
        with pytest.raises(ToolError, match=r"task=True") as info:
            await call_tool_task(client, "plain", {"text": "ran"})
        assert isinstance(info.value, NotATask) and info.value.result.data == "plain ran"
        assert probe.sync_runs == ["ran"]  # the tool did run
        task = await call_tool_task(client, "plain", {"text": "again"}, allow_synchronous=True)
        assert task.task_id is None and (await task).data == "plain again"
    async with connected(probe.mcp, transport, mode="legacy") as client:
        with pytest.raises(NotATask, match="legacy"):
            await call_tool_task(client, "slow_computation", {"duration": 1})
    bare = FastMCP("no-tasks")

    @bare.tool
    async def hello() -> str:
        return "hello"

    async with connected(bare, transport) as client:
        with pytest.raises(NotATask, match=r"add_extension\(TasksExtension\(\)\)"):
            await call_tool_task(client, "hello")


# --- elicitation mid-task ----------------------------------------------------------


async def test_an_elicitation_handler_answers_in_both_modes(transport: str) -> None:
    probe = dropin_server()
    options = {"mode": "auto", "elicitation_handler": handle_elicitation}
    async with connected(probe.mcp, transport, **options) as client:
        result = await client.call_tool("plan_dinner", {})
        assert result.data == "Thai, vegetarian=True"
        task = await call_tool_task(client, "plan_dinner")
        status = await task.wait(state="input_required", timeout=30.0)
        assert status.status == "input_required" and status.input_requests
        [request] = status.input_requests.values()
        assert request["params"]["message"] == "What should we cook?"
        assert (await task.wait(state="input_required")).status == "input_required"  # still
        assert (await task.result()).data == "Thai, vegetarian=True"
    assert probe.cancels == []


async def test_without_a_handler_input_is_a_clear_tool_error(transport: str) -> None:
    probe = dropin_server()
    answers = {"elicitation_handler": handle_elicitation}
    async with serving(probe.mcp, transport) as target:
        # the client declares elicitation, but the extension it was given has no handler
        lone = Client(target, extensions=[TasksClientExtension()], **answers)
        async with lone:
            started = anyio.current_time()
            with pytest.raises(ToolError, match=r"elicitation_handler=") as info:
                await lone.call_tool("plan_dinner", {})
            assert anyio.current_time() - started < PROMPT  # at once, not at an input timeout
            assert "What should we cook?" in str(info.value)
        assert len(probe.cancels) == 1  # transparent: nobody else can reach the task

        async with Client(target, **answers) as client:
            task = await call_tool_task(client, "plan_dinner")
            await task.wait(state="input_required", timeout=30.0)
            assert task.task_id is not None
            async with Client(target) as other:  # no elicitation_handler at all
                resumed = await ToolTask.resume(other, task.task_id, tool_name="plan_dinner")
                with pytest.raises(ToolError, match=r"on_input= to call_tool_task"):
                    await resumed.result()
            assert len(probe.cancels) == 1  # not cancelled: the handle's owner may answer
            assert (await task.result()).data == "Thai, vegetarian=True"


async def test_without_an_elicitation_handler_the_official_match_holds(transport: str) -> None:
    """`pytest.raises(ToolError, match="no elicitation handler")`, as code written for the
    official package checks it, holds for every way a client can lack the handler."""
    probe = dropin_server()
    async with serving(probe.mcp, transport) as target:
        async with Client(target) as plain:  # declares no elicitation at all
            with pytest.raises(ToolError, match="no elicitation handler"):
                await plain.call_tool("plan_dinner", {})
            task = await call_tool_task(plain, "plan_dinner")
            with pytest.raises(ToolError, match="no elicitation handler"):
                await task.result()
        answers = {"elicitation_handler": handle_elicitation}
        async with Client(target, extensions=[TasksClientExtension()], **answers) as lone:
            with pytest.raises(ToolError, match="no elicitation handler"):
                await lone.call_tool("plan_dinner", {})  # declared, but nothing answers
        async with Client(target, **answers) as owner, Client(target) as other:
            task = await call_tool_task(owner, "plan_dinner")
            await task.wait(state="input_required", timeout=30.0)
            assert task.task_id is not None
            resumed = await ToolTask.resume(other, task.task_id, tool_name="plan_dinner")
            with pytest.raises(ToolError, match="no elicitation handler"):
                await resumed.result()
            assert (await task.result()).data == "Thai, vegetarian=True"
    requests = {
        "a": {"method": "elicitation/create", "params": {"message": "Which?"}},
        "b": {"method": "sampling/createMessage", "params": {"messages": []}},
    }
    with pytest.raises(ToolError, match="no elicitation handler"):  # asked with more
        InputAnswerer().check("t1", requests, set())


# --- timeouts ------------------------------------------------------------------------


async def timed_out(client: Client[Any], tool: str) -> tuple[BaseException, float]:
    started = anyio.current_time()
    with pytest.raises(Exception) as info:
        await client.call_tool(tool, {}, timeout=0.5)
    return info.value, anyio.current_time() - started


async def test_a_call_timeout_bounds_the_whole_task(transport: str) -> None:
    probe = dropin_server()
    async with connected(probe.mcp, transport) as client:
        synchronous, _ = await timed_out(client, "stall")
        tasked, elapsed = await timed_out(client, "gated")
        assert type(tasked) is type(synchronous)
        assert isinstance(tasked, MCPError) and isinstance(synchronous, MCPError)
        assert tasked.error.code == synchronous.error.code and str(tasked) == str(synchronous)
        assert 0.5 <= elapsed < PROMPT
        assert len(probe.cancels) == 1
        await probe.cancelled.wait()
        probe.gate.set()


async def test_a_stalled_elicitation_handler_is_bounded_too(transport: str) -> None:
    probe = dropin_server()
    never = anyio.Event()

    async def stalls(message, response_type, params, context):  # type: ignore[no-untyped-def]
        await never.wait()

    async with connected(probe.mcp, transport, elicitation_handler=stalls) as client:
        synchronous, _ = await timed_out(client, "stall")
        tasked, elapsed = await timed_out(client, "plan_dinner")
        assert type(tasked) is type(synchronous)
        assert isinstance(tasked, MCPError) and tasked.error.code == synchronous.error.code
        assert 0.5 <= elapsed < PROMPT
        assert len(probe.cancels) == 1
        probe.gate.set()
