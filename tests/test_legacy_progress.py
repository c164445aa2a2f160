"""2025-11-25: a task's progress reaches the original `progressToken` for the task's life.

Raw Streamable HTTP, as a 2025-11-25 client speaks it: `initialize`, then a
task-augmented `tools/call` carrying a `progressToken`. The tool reports progress
after the call has answered, and each report is one `notifications/progress` for
that token, tagged with the related task, on exactly one stream the creating
session reads:

- while that session waits in `tasks/result` on the task, on that response's
  stream (before the result; nothing on the session's GET stream): a client
  waiting there reads it even without a GET stream;
- otherwise on the session's own (GET) stream, beside `notifications/tasks/status`;
- never on another session's stream (the token is the creating session's).

`ctx.report_progress`, core's `Progress` dependency and ours all report this way.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import httpx
import pytest
from fastmcp import Context, FastMCP
from fastmcp.dependencies import Progress as CoreProgress

from fastmcp_tasks import Progress, TasksExtension
from fastmcp_tasks.wire.legacy import RELATED_TASK
from tests.wire import http_server, parse_http_response

pytestmark = pytest.mark.anyio

HEADERS = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}
STEPS = 3
REPORTED = [(n, STEPS, f"step {n} of {STEPS}") for n in range(1, STEPS + 1)]


async def events(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """The JSON-RPC messages of an SSE response, as they arrive."""
    async for line in response.aiter_lines():
        if line.startswith("data:") and line[5:].strip():
            yield json.loads(line[5:])


async def initialized(http: httpx.AsyncClient, url: str, name: str = "raw-v1") -> dict[str, str]:
    """A 2025-11-25 session (`initialize`, `notifications/initialized`): its headers."""
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": name, "version": "1"},
        },
    }
    answer = await http.post(url, json=init, headers=HEADERS)
    session = {**HEADERS, "Mcp-Session-Id": answer.headers["mcp-session-id"]}
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    await http.post(url, json=initialized, headers=session)
    return session


async def create(http: httpx.AsyncClient, url: str, session: dict[str, str], tool: str) -> str:
    """A task-augmented `tools/call` of `tool` with progressToken `tok-7`: the task id."""
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {
            "name": tool,
            "arguments": {},
            "task": {"ttl": 60_000},
            "_meta": {"progressToken": "tok-7"},
        },
    }
    created = parse_http_response(await http.post(url, json=call, headers=session))
    return str(created["result"]["task"]["taskId"])


async def posted(
    http: httpx.AsyncClient, url: str, session: dict[str, str], request: dict[str, Any]
) -> list[dict[str, Any]]:
    """POST `request`: every message of its response stream, the response itself last."""
    heard: list[dict[str, Any]] = []
    async with http.stream("POST", url, json=request, headers=session) as response:
        if not response.headers.get("content-type", "").startswith("text/event-stream"):
            return [json.loads(await response.aread())]
        async for message in events(response):
            heard.append(message)
            if message.get("id") == request["id"]:
                break
    return heard


def result_request(task_id: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 9, "method": "tasks/result", "params": {"taskId": task_id}}


def progress_of(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m["params"] for m in messages if m.get("method") == "notifications/progress"]


def reported(progress: list[dict[str, Any]], task_id: str) -> list[tuple[Any, ...]]:
    """(progress, total, message) of each notification, checked for the token and task."""
    for params in progress:
        assert params["progressToken"] == "tok-7", params
        assert params["_meta"][RELATED_TASK] == {"taskId": task_id}, params
    return [(p["progress"], p["total"], p.get("message")) for p in progress]


async def waited_on(extension: TasksExtension, task_id: str) -> None:
    """Until a `tasks/result` of this process waits on the task (bounded)."""
    assert extension.legacy is not None
    with anyio.fail_after(5):
        while task_id not in extension.legacy.waiting:  # noqa: ASYNC110 - no event to wait on
            await anyio.sleep(0.01)


def stepping_server(go: anyio.Event, reporter: str) -> tuple[FastMCP, TasksExtension]:
    """A server whose tool `steps` reports `REPORTED` through `reporter` once `go` is set."""
    mcp = FastMCP("progress")
    extension = TasksExtension()
    mcp.add_extension(extension)

    if reporter == "context":

        @mcp.tool(task=True)
        async def steps(ctx: Context) -> str:
            await go.wait()
            for n, total, message in REPORTED:
                await ctx.report_progress(n, total, message)
            return "stepped"

    else:
        kind: Callable[[], Any] = CoreProgress if reporter == "core" else Progress

        @mcp.tool(task=True)
        async def steps(progress: CoreProgress = kind()) -> str:
            await go.wait()
            await progress.set_total(STEPS)
            for _, _, message in REPORTED:
                await progress.set_message(message)
                await progress.increment()
            return "stepped"

    return mcp, extension


async def test_progress_goes_to_the_original_token_after_the_call_answered() -> None:
    go = anyio.Event()
    mcp = FastMCP("progress")
    mcp.add_extension(TasksExtension())

    @mcp.tool(task=True)
    async def render(ctx: Context) -> str:
        await go.wait()  # only once the CreateTaskResult has been answered
        await ctx.report_progress(2, 5, "page 2 of 5")
        return "rendered"

    async with http_server(mcp) as url, httpx.AsyncClient(timeout=10) as http:
        session = await initialized(http, url)
        async with http.stream("GET", url, headers=session) as stream:
            task_id = await create(http, url, session, "render")
            get = {"jsonrpc": "2.0", "id": 3, "method": "tasks/get", "params": {"taskId": task_id}}
            await http.post(url, json=get, headers=session)  # status pushes start from here
            go.set()
            seen: dict[str, dict[str, Any]] = {}
            with anyio.fail_after(10):
                async for message in events(stream):
                    params = message.get("params", {})
                    if message.get("method") == "notifications/progress":
                        seen["progress"] = params
                    elif params.get("status") == "completed":  # notifications/tasks/status
                        seen["completed"] = params
                    if len(seen) == 2:
                        break
    progress = seen["progress"]
    assert (progress["progressToken"], progress["progress"], progress["total"]) == ("tok-7", 2, 5)
    assert progress["message"] == "page 2 of 5"
    assert progress["_meta"][RELATED_TASK] == {"taskId": task_id}
    assert seen["completed"]["taskId"] == task_id


@pytest.mark.parametrize("reporter", ["context", "core", "ours"])
async def test_progress_rides_the_stream_of_the_tasks_result_that_waits(reporter: str) -> None:
    """No GET stream at all: a client waiting in `tasks/result` hears every report there,
    in order, before the result. `Progress` reports when it counts (`increment`)."""
    go = anyio.Event()
    mcp, extension = stepping_server(go, reporter)
    async with http_server(mcp) as url, httpx.AsyncClient(timeout=10) as http:
        session = await initialized(http, url)
        task_id = await create(http, url, session, "steps")
        heard: list[dict[str, Any]] = []

        async def wait_for_result() -> None:
            heard.extend(await posted(http, url, session, result_request(task_id)))

        async with anyio.create_task_group() as group:
            group.start_soon(wait_for_result)
            await waited_on(extension, task_id)
            go.set()
    assert reported(progress_of(heard), task_id) == REPORTED
    assert heard[-1]["result"]["structuredContent"] == {"result": "stepped"}, heard[-1]


async def test_progress_is_not_doubled_on_the_get_stream_while_a_tasks_result_waits() -> None:
    go = anyio.Event()
    mcp, extension = stepping_server(go, "context")
    async with http_server(mcp) as url, httpx.AsyncClient(timeout=10) as http:
        session = await initialized(http, url)
        async with http.stream("GET", url, headers=session) as stream:
            task_id = await create(http, url, session, "steps")
            heard: list[dict[str, Any]] = []

            async def wait_for_result() -> None:
                heard.extend(await posted(http, url, session, result_request(task_id)))

            async with anyio.create_task_group() as group:
                group.start_soon(wait_for_result)
                await waited_on(extension, task_id)
                go.set()
            on_get: list[dict[str, Any]] = []
            with anyio.fail_after(10):  # up to the completed status push, sent after the tool
                async for message in events(stream):
                    on_get.append(message)
                    if message.get("params", {}).get("status") == "completed":
                        break
    assert reported(progress_of(heard), task_id) == REPORTED
    assert progress_of(on_get) == [], on_get


async def test_another_sessions_tasks_result_does_not_get_the_tokens_progress() -> None:
    """The token is the creating session's: a `tasks/result` of another session (another
    client) waiting on the task hears none of it; the creating session's GET stream does."""
    go = anyio.Event()
    mcp, extension = stepping_server(go, "context")
    async with http_server(mcp) as url, httpx.AsyncClient(timeout=10) as http:
        creator = await initialized(http, url)
        other = await initialized(http, url, "other-v1")
        async with http.stream("GET", url, headers=creator) as stream:
            task_id = await create(http, url, creator, "steps")
            heard: list[dict[str, Any]] = []

            async def wait_for_result() -> None:
                heard.extend(await posted(http, url, other, result_request(task_id)))

            async with anyio.create_task_group() as group:
                group.start_soon(wait_for_result)
                await waited_on(extension, task_id)
                go.set()
                on_get: list[dict[str, Any]] = []
                with anyio.fail_after(10):
                    async for message in events(stream):
                        on_get.append(message)
                        if len(progress_of(on_get)) == STEPS:
                            break
    assert progress_of(heard) == [], heard
    assert heard[-1]["result"]["structuredContent"] == {"result": "stepped"}, heard[-1]
    assert reported(progress_of(on_get), task_id) == REPORTED
