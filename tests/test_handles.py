"""Task handles (`call_tool_task`, `ToolTask`) and the client-side `TaskLog`, end to end."""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from fastmcp import Client, Context, FastMCP
from fastmcp.utilities.tasks import TaskConfig
from mcp.shared.exceptions import MCPError

from fastmcp_tasks import TasksExtension
from fastmcp_tasks.client.handles import ToolTask, call_tool_task
from fastmcp_tasks.client.tasklog import TaskLog
from tests.test_durability import release, servers, started_in
from tests.wire import http_server

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).parent.parent
FAST = timedelta(milliseconds=20)


class Counted:
    """A server whose `tasks/get` and `tasks/cancel` are counted, with a releasable tool."""

    def __init__(self, poll: timedelta = FAST) -> None:
        self.mcp = FastMCP("counted")
        extension = TasksExtension()
        self.gets: list[float] = []
        self.cancels: list[str] = []
        self.gate = anyio.Event()
        self.cancelled = anyio.Event()
        real_get, real_cancel = extension._methods.get, extension._methods.cancel

        async def get(ctx, params):  # type: ignore[no-untyped-def]
            self.gets.append(anyio.current_time())
            return await real_get(ctx, params)

        async def cancel(ctx, params):  # type: ignore[no-untyped-def]
            self.cancels.append(params.task_id)
            return await real_cancel(ctx, params)

        extension._methods.get = get  # type: ignore[method-assign]
        extension._methods.cancel = cancel  # type: ignore[method-assign]
        self.mcp.add_extension(extension)
        config = TaskConfig(poll_interval=poll)

        @self.mcp.tool(task=config)
        async def gated(text: str) -> str:
            try:
                await self.gate.wait()
            except anyio.get_cancelled_exc_class():
                self.cancelled.set()
                raise
            return f"gated {text}"

        @self.mcp.tool(task=config)
        async def fails() -> str:
            raise MCPError(code=-32050, message="upstream refused", data={"retryAfter": 3})

        @self.mcp.tool(task=TaskConfig(mode="forbidden"))
        async def sync() -> str:
            return "answered at once"


@asynccontextmanager
async def connected(mcp: FastMCP, transport: str, **options: Any) -> AsyncIterator[Client[Any]]:
    if transport == "http":
        async with http_server(mcp) as url, Client(url, **options) as client:
            yield client
    else:
        async with Client(mcp, **options) as client:
            yield client


async def never_asked(*args: Any) -> Any:
    """An elicitation handler, so the client declares elicitation; handles answer instead."""
    raise AssertionError("the handle's on_input answers in-task elicitations")


def text_of(result: Any) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


async def test_every_method_of_a_handle(transport: str) -> None:
    server = Counted()
    seen: list[str] = []
    async with connected(server.mcp, transport) as client:
        task = await call_tool_task(
            client, "gated", {"text": "a"}, on_status_change=lambda s: seen.append(s["status"])
        )
        assert task.task_id and not task.done and "working" in repr(task)
        state = await task.status()
        assert state["taskId"] == task.task_id and state["status"] == "working"
        server.gate.set()
        states = [s["status"] async for s in task.updates()]
        assert states[0] == "working" and states[-1] == "completed"
        snapshot = await task.wait()
        assert snapshot.status == "completed" and snapshot["status"] == "completed"
        result = await task.result()
        assert text_of(result) == "gated a" and result.data == "gated a"
        assert await task is result  # the same object every time
        await task.cancel()  # terminal: nothing to send
    assert server.cancels == []
    assert seen == ["working", "completed"]


async def test_a_synchronous_answer_is_an_already_complete_handle(transport: str) -> None:
    server = Counted()
    async with connected(server.mcp, transport) as client:
        task = await call_tool_task(client, "sync", allow_synchronous=True)
        assert task.task_id is None and task.done
        assert (await task.status())["status"] == "completed"
        assert (await task.wait()).status == "completed"
        assert text_of(await task) == "answered at once"


async def test_a_failed_task_raises_its_code_and_data(transport: str) -> None:
    server = Counted()
    async with connected(server.mcp, transport) as client:
        task = await call_tool_task(client, "fails")
        assert (await task.wait()).error == {
            "code": -32050,
            "message": "upstream refused",
            "data": {"retryAfter": 3},
        }
        with pytest.raises(MCPError) as info:
            await task.result()
    assert info.value.error.code == -32050
    assert info.value.error.data == {"retryAfter": 3}


async def test_cancel_is_sent_once_and_wait_raises(transport: str) -> None:
    server = Counted()
    async with connected(server.mcp, transport) as client:
        task = await call_tool_task(client, "gated", {"text": "c"})
        await task.cancel()
        await task.cancel()
        with pytest.raises(MCPError, match="cancelled"):
            await task.result()
        await server.cancelled.wait()
    assert server.cancels == [task.task_id]


async def test_a_result_timeout_sends_exactly_one_cancel(transport: str) -> None:
    server = Counted()
    async with connected(server.mcp, transport) as client:
        task = await call_tool_task(client, "gated", {"text": "t"})
        with pytest.raises(TimeoutError):
            await task.result(timeout=0.2)
        await server.cancelled.wait()
        with pytest.raises(MCPError, match="cancelled"):
            await task.result()
    assert server.cancels == [task.task_id]


async def test_a_wait_timeout_only_observes(transport: str) -> None:
    server = Counted()
    async with connected(server.mcp, transport) as client:
        task = await call_tool_task(client, "gated", {"text": "w"})
        with pytest.raises(TimeoutError):
            await task.wait(timeout=0.2)
        assert (await task.status()).status == "working"
        server.gate.set()
        assert (await task.wait(timeout=5)).status == "completed"
    assert server.cancels == [] and not server.cancelled.is_set()


async def test_caller_cancellation_sends_one_cancel() -> None:
    server = Counted()
    async with connected(server.mcp, "memory") as client:
        task = await call_tool_task(client, "gated", {"text": "x"})
        with anyio.move_on_after(0.2) as waiting:
            await task
        assert waiting.cancelled_caught  # the caller was cancelled, the task never ended
        await server.cancelled.wait()
    assert server.cancels == [task.task_id]


async def test_polls_no_faster_than_poll_interval() -> None:
    server = Counted(poll=timedelta(milliseconds=300))
    async with connected(server.mcp, "memory") as client:
        task = await call_tool_task(client, "gated", {"text": "p"}, push=False)
        async with anyio.create_task_group() as group:
            group.start_soon(task.wait)
            with anyio.fail_after(5):
                while len(server.gets) < 3:  # noqa: ASYNC110 - counting the server's polls
                    await anyio.sleep(0.01)
            server.gate.set()
    assert all(b - a >= 0.29 for a, b in itertools.pairwise(server.gets))


async def test_resume_from_a_second_client() -> None:
    server = Counted()
    async with http_server(server.mcp) as url:
        async with Client(url) as first:
            task_id = (await call_tool_task(first, "gated", {"text": "r"})).task_id
        assert task_id is not None
        async with Client(url) as second:
            task = await ToolTask.resume(second, task_id)
            assert task.state["status"] == "working"
            server.gate.set()
            assert text_of(await task) == "gated r"
        async with Client(url) as third:
            with pytest.raises(MCPError):
                await ToolTask.resume(third, "no-such-task")


RESUME_SCRIPT = """
import sys, anyio
from fastmcp import Client
from fastmcp_tasks.client.handles import ToolTask

async def main() -> None:
    async with Client(sys.argv[1]) as client:
        task = await ToolTask.resume(client, sys.argv[2])
        result = await task
        print("RESULT", result.content[0].text, flush=True)

anyio.run(main)
"""


async def test_resume_in_a_new_process() -> None:
    server = Counted()
    async with http_server(server.mcp) as url:
        async with Client(url) as client:
            task = await call_tool_task(client, "gated", {"text": "elsewhere"})
        server.gate.set()
        done = await anyio.run_process(
            [sys.executable, "-c", RESUME_SCRIPT, url, str(task.task_id)],
            cwd=ROOT,
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode()
    assert "RESULT gated elsewhere" in done.stdout.decode()


async def test_task_log_records_lists_and_finishes(tmp_path: Path) -> None:
    log = TaskLog(tmp_path / "log.sqlite3")
    assert await log.unfinished() == []
    await log.record("http://a/mcp", "render", "t1", {"pages": 3})
    await log.record("http://b/mcp", "other", "t2")
    entries = await log.unfinished()
    assert [(e.server, e.tool, e.task_id, e.arguments) for e in entries] == [
        ("http://a/mcp", "render", "t1", {"pages": 3}),
        ("http://b/mcp", "other", "t2", None),
    ]
    await log.finish("t1")
    await log.finish("unknown")
    assert [e.task_id for e in await TaskLog(log.path).unfinished()] == ["t2"]


async def test_call_tool_task_logs_until_terminal(tmp_path: Path) -> None:
    server = Counted()
    log = TaskLog(tmp_path / "log.sqlite3")
    async with http_server(server.mcp) as url, Client(url) as client:
        task = await call_tool_task(client, "gated", {"text": "l"}, log=log)
        [entry] = await log.unfinished()
        assert (entry.server, entry.tool, entry.task_id) == (url, "gated", task.task_id)
        assert entry.arguments == {"text": "l"}
        server.gate.set()
        await task
        assert await log.unfinished() == []


CRASH_SCRIPT = """
import os, sys, anyio
from fastmcp import Client
from fastmcp_tasks.client.handles import call_tool_task
from fastmcp_tasks.client.tasklog import TaskLog

async def main() -> None:
    async with Client(sys.argv[1]) as client:
        task = await call_tool_task(client, "plain_job", {"key": "k"}, log=TaskLog(sys.argv[2]))
        print("TASK", task.task_id, flush=True)
        os._exit(1)

anyio.run(main)
"""

RECOVER_SCRIPT = """
import sys, anyio
from fastmcp import Client
from fastmcp_tasks.client.handles import ToolTask
from fastmcp_tasks.client.tasklog import TaskLog

async def main() -> None:
    log = TaskLog(sys.argv[1])
    for entry in await log.unfinished():
        print("UNFINISHED", entry.task_id, entry.tool, flush=True)
        async with Client(entry.server) as client:
            result = await ToolTask.resume(client, entry.task_id, log=log)
            print("RESULT", (await result).content[0].text, flush=True)
    print("LEFT", len(await log.unfinished()), flush=True)

anyio.run(main)
"""


async def test_a_crashed_client_resumes_from_its_log(tmp_path: Path) -> None:
    log_path = tmp_path / "client.sqlite3"
    with servers(tmp_path, 1) as [server]:
        await server.ready()
        crashed = await anyio.run_process(
            [sys.executable, "-c", CRASH_SCRIPT, server.url, str(log_path)],
            cwd=ROOT,
            check=False,
        )
        assert crashed.returncode == 1, crashed.stderr.decode()
        task_id = crashed.stdout.decode().split("TASK ", 1)[1].split()[0]
        await started_in(tmp_path / "markers", "k")
        release(tmp_path / "markers", "k")
        recovered = await anyio.run_process(
            [sys.executable, "-c", RECOVER_SCRIPT, str(log_path)],
            cwd=ROOT,
            check=False,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
    out = recovered.stdout.decode()
    assert recovered.returncode == 0, recovered.stderr.decode()
    assert f"UNFINISHED {task_id} plain_job" in out
    assert "RESULT plain k" in out and "LEFT 0" in out


async def test_a_handle_follows_pushed_states_without_polling(transport: str) -> None:
    server = Counted(poll=timedelta(seconds=600))  # a poll would stall the test
    async with connected(server.mcp, transport) as client:
        task = await call_tool_task(client, "gated", {"text": "pushed"})
        states: list[str] = []
        async with anyio.create_task_group() as group:

            async def follow() -> None:
                async for state in task.updates():
                    states.append(state["status"])

            group.start_soon(follow)
            server.gate.set()
        assert text_of(await task.result(timeout=5)) == "gated pushed"
    assert states == ["working", "completed"]
    assert server.gets == []  # every state after the first arrived as a notification


def asking_server() -> FastMCP:
    mcp = FastMCP("asking")
    mcp.add_extension(TasksExtension())

    @mcp.tool(task=TaskConfig(poll_interval=FAST))
    async def how_many(ctx: Context) -> str:
        answer = await ctx.elicit("How many?", int)
        return f"{answer.action}:{getattr(answer, 'data', None)}"

    return mcp


async def test_a_refused_answer_is_asked_again_after_on_input_rejected(transport: str) -> None:
    asked: list[str] = []
    refusals: list[MCPError] = []
    answers = iter([{"action": "accept", "content": {"value": "many"}}])

    async def on_input(key: str, request: dict[str, Any]) -> dict[str, Any]:
        asked.append(key)
        return next(answers, {"action": "accept", "content": {"value": 3}})

    async with connected(asking_server(), transport, elicitation_handler=never_asked) as client:
        task = await call_tool_task(
            client, "how_many", on_input=on_input, on_input_rejected=refusals.append
        )
        result = await task.result(timeout=10)
    assert result.content[0].text == "accept:3"  # type: ignore[union-attr]
    assert len(asked) == 2 and asked[0] == asked[1]  # the same key, asked again
    assert refusals[0].error.code == -32602 and asked[0] in refusals[0].error.message


async def test_without_on_input_rejected_a_refused_answer_raises(transport: str) -> None:
    async def on_input(key: str, request: dict[str, Any]) -> dict[str, Any]:
        return {"action": "accept", "content": {"value": "many"}}

    async with connected(asking_server(), transport, elicitation_handler=never_asked) as client:
        task = await call_tool_task(client, "how_many", on_input=on_input)
        with pytest.raises(MCPError) as info:
            await task.result(timeout=10)
        assert info.value.error.code == -32602
        state = await task.status()  # nothing was consumed: the key is still outstanding
        assert state["status"] == "input_required"
        with pytest.raises(MCPError):  # the key was sent again, not skipped as answered
            await task.answer_input(state["inputRequests"])
