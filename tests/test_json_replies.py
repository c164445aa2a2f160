"""A task's own requests (`tasks/get`, a task-creating `tools/call`) skip the SDK's SSE
deferral (`server.json_replies`): over real HTTP each answers with the same status,
content type and body as in SSE mode; a call that runs in the foreground still streams
what its tool emits; anything that could watch or emit keeps SSE mode; the SDK's entry
is its own again when the servers stop.
"""

from __future__ import annotations

import functools
import json
import re
from datetime import timedelta
from typing import Any

import anyio
import httpx
import pytest
from fastmcp import Context, FastMCP
from fastmcp.server.auth.providers.jwt import StaticTokenVerifier
from fastmcp.server.extensions import ServerExtension
from fastmcp.tools.base import TaskConfig
from mcp.server import streamable_http_manager

from fastmcp_tasks import TasksExtension, _compat, task_options
from fastmcp_tasks._compat import modern_entry
from fastmcp_tasks.server import json_replies
from fastmcp_tasks.server.json_replies import JsonReplies
from tests.test_poll_lane import TOKENS, ToolsOnly, Watcher, no_tracer_provider  # noqa: F401
from tests.test_poll_lane import server as lane_server
from tests.wire import MODERN, http_server, memory_wire, serve_asgi

pytestmark = pytest.mark.anyio

SDK_ENTRY = streamable_http_manager.handle_modern_request
TASKS = "io.modelcontextprotocol/tasks"
BOTH = "application/json, text/event-stream"
BOB = {"Authorization": "Bearer bob-token"}
#: What differs between two runs of one request: ids and times.
VOLATILE = re.compile(r'"(taskId|createdAt|lastUpdatedAt|ttlMs)":("[^"]*"|\d+)')


def server(**options: Any) -> tuple[FastMCP, TasksExtension]:
    """`echo` and `refused` (as for the poll lane), and tools for each way a call goes."""
    mcp, extension = lane_server("json-replies", **options)

    @mcp.tool(task=TaskConfig(mode="required"))
    async def only_task(text: str) -> str:
        return text

    @mcp.tool
    async def plain(ctx: Context) -> str:
        await ctx.report_progress(1, 2, "half way")
        return "plain done"

    async def ask_nothing(ctx: Context, arguments: dict[str, Any]) -> Any:
        await ctx.report_progress(1, 1, "checked")
        return None

    @mcp.tool(task=True)
    @task_options(foreground_input=ask_nothing)
    async def guarded(text: str) -> str:
        return text

    return mcp, extension


class Reply:
    """One HTTP answer as the client receives it."""

    def __init__(self, response: httpx.Response) -> None:
        self.status = response.status_code
        self.kind = response.headers.get("content-type", "").split(";")[0]
        self.text = response.text

    def message(self) -> dict[str, Any]:
        if self.kind == "text/event-stream":
            frames = [line[5:] for line in self.text.splitlines() if line.startswith("data:")]
            return dict(json.loads(frames[-1]))
        return dict(json.loads(self.text))

    def seen(self) -> tuple[int, str, str]:
        """Status, content type, body with ids and times blanked."""
        return self.status, self.kind, VOLATILE.sub(r'"\1":"-"', self.text)


async def post(
    http: httpx.AsyncClient,
    url: str,
    method: str,
    params: dict[str, Any],
    *,
    opt_in: bool = True,
    accept: str = BOTH,
    progress: bool = False,
    headers: dict[str, str] | None = None,
) -> Reply:
    meta: dict[str, Any] = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientInfo": {"name": "tests", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS: {}}} if opt_in else {},
    }
    if progress:
        meta["progressToken"] = "p1"
    sent = {"Accept": accept, "MCP-Protocol-Version": MODERN, "Mcp-Method": method}
    name = params.get("taskId") if method.startswith("tasks/") else params.get("name")
    if isinstance(name, str):
        sent["Mcp-Name"] = name
    meta.update(params.get("_meta", {}))
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": meta}}
    return Reply(await http.post(url, json=body, headers={**sent, **(headers or {})}))


async def settle(http: httpx.AsyncClient, url: str, task_id: str) -> None:
    """Poll until the task is terminal (polling is what a client of tasks does)."""
    with anyio.fail_after(10):
        while True:
            reply = await post(http, url, "tasks/get", {"taskId": task_id})
            if reply.message()["result"]["status"] != "working":
                return
            await anyio.sleep(0.01)


async def task_requests(http: httpx.AsyncClient, url: str) -> list[tuple[int, str, str]]:
    """Every kind of answer a task's own requests get."""
    call = functools.partial(post, http, url, "tools/call", progress=True)
    done = await call({"name": "echo", "arguments": {"text": "hi"}})
    failed = await call({"name": "refused", "arguments": {}})
    only = await call({"name": "only_task", "arguments": {"text": "x"}})
    bad = await call({"name": "echo", "arguments": {"text": 5}})
    ids = [reply.message()["result"]["taskId"] for reply in (done, failed, only)]
    for task_id in ids:
        await settle(http, url, task_id)
    replies = [done, failed, only, bad]
    for params, opt_in in [
        ({"taskId": ids[0]}, True),
        ({"taskId": ids[1]}, True),
        ({"taskId": "no-such-task"}, True),
        ({"taskId": ids[0]}, False),
        ({"taskId": 7}, True),
    ]:
        replies.append(await post(http, url, "tasks/get", params, opt_in=opt_in, progress=True))
    return [reply.seen() for reply in replies]


async def test_a_tasks_requests_answer_as_in_sse_mode() -> None:
    mcp, extension = server()
    with anyio.fail_after(60):
        async with http_server(mcp) as url, httpx.AsyncClient(timeout=10) as http:
            replies = extension.json_replies
            assert isinstance(replies, JsonReplies)
            mcp.add_middleware(ToolsOnly())  # a calls-only middleware keeps polls plain
            polls = replies.taken["tasks/get"]
            past = await task_requests(http, url)
            assert replies.taken["tools/call"] == 0  # ToolsOnly sees calls: SSE mode
            assert replies.taken["tasks/get"] > polls
            mcp.middleware.clear()
            calls = replies.taken["tools/call"]
            plain = await task_requests(http, url)
            assert (
                replies.taken["tools/call"] - calls == 4
            )  # three tasks, one call with bad arguments
            mcp.add_middleware(Watcher())  # sees everything: SSE mode throughout
            taken = dict(replies.taken)
            through = await task_requests(http, url)
            assert replies.taken == taken
    assert past == plain == through
    statuses = [status for status, *_ in plain]
    assert statuses[:4] == [200, 200, 200, 200] and {kind for _, kind, _ in plain} == {
        "application/json"
    }
    assert '"status":"completed"' in plain[4][2] and '"status":"failed"' in plain[5][2]


async def test_a_call_in_the_foreground_still_streams_what_its_tool_emits() -> None:
    mcp, extension = server()
    with anyio.fail_after(60):
        async with http_server(mcp) as url, httpx.AsyncClient(timeout=10) as http:
            replies = extension.json_replies
            assert replies is not None
            sync = await post(http, url, "tools/call", {"name": "plain"}, progress=True)
            foreground = await post(
                http, url, "tools/call", {"name": "plain"}, opt_in=False, progress=True
            )
            guarded = await post(
                http,
                url,
                "tools/call",
                {"name": "guarded", "arguments": {"text": "g"}},
                progress=True,
            )
            assert replies.taken["tools/call"] == 0
    for reply in (sync, foreground):
        assert reply.kind == "text/event-stream" and "half way" in reply.text
        assert reply.message()["result"]["content"][0]["text"] == "plain done"
    assert guarded.kind == "text/event-stream" and "checked" in guarded.text
    assert guarded.message()["result"]["resultType"] == "task"


class Intercepting(ServerExtension):
    """Another extension around every tool call: it might emit, so calls keep SSE mode."""

    identifier = "example.com/intercepting"

    async def intercept_tool_call(self, params: Any, context: Any, call_next: Any) -> Any:
        return await call_next()


@pytest.mark.parametrize(
    ("options", "accept", "other", "get", "call"),
    [
        ({}, "application/json, text/event-stream", False, 1, 1),
        ({}, "application/json", False, 0, 0),  # 406 in SSE mode, as before
        ({}, "application/json, text/event-stream", True, 1, 0),
        ({"store_timeout": None}, "application/json, text/event-stream", False, 0, 0),
        (
            {"store_timeout": timedelta(seconds=20)},
            "application/json, text/event-stream",
            False,
            0,
            0,
        ),
    ],
)
async def test_when_a_tasks_requests_keep_sse_mode(
    options: dict[str, Any], accept: str, other: bool, get: int, call: int
) -> None:
    mcp, extension = server(**options)
    if other:
        mcp.add_extension(Intercepting())
    with anyio.fail_after(60):
        async with http_server(mcp) as url, httpx.AsyncClient(timeout=10) as http:
            replies = extension.json_replies
            assert replies is not None
            created = await post(
                http, url, "tools/call", {"name": "echo", "arguments": {"text": "a"}}, accept=accept
            )
            polled = await post(http, url, "tasks/get", {"taskId": "nope"}, accept=accept)
            assert replies.taken == {"tasks/get": get, "tools/call": call}
    if accept == "application/json":
        assert created.status == polled.status == 406
    else:
        assert created.message()["result"]["resultType"] == "task"
        assert polled.message()["error"]["code"] == -32602


async def test_a_server_in_json_mode_is_asked_only_for_plain_polls() -> None:
    """Nothing is taken out of a mode it is not in; its plain polls are answered at the
    entry (`test_direct_polls` compares those answers with the SDK's)."""
    mcp, extension = server()
    with anyio.fail_after(60):
        async with serve_asgi(mcp.http_app(json_response=True)) as base:
            async with httpx.AsyncClient(timeout=10) as http:
                url = f"{base}/mcp"
                made = await post(
                    http, url, "tools/call", {"name": "echo", "arguments": {"text": "j"}}
                )
                await settle(http, url, made.message()["result"]["taskId"])
                replies = extension.json_replies
                assert replies is not None and replies.polls is not None
                assert replies.taken == {"tasks/get": 0, "tools/call": 0}
                assert replies.polls.answered >= 1
    assert made.kind == "application/json"


async def test_the_entry_is_bound_once_and_a_stopped_server_is_not_asked() -> None:
    """Another library that wraps the manager's entry while a server runs keeps its wrapper
    working after that server stops and another starts (the entry is never captured
    again, so it never calls a wrapper of itself)."""
    first, _ = server()
    second, extension = server()
    wrapped: list[str] = []
    with anyio.fail_after(60):
        async with memory_wire(first):
            entry = streamable_http_manager.handle_modern_request
            assert entry is not SDK_ENTRY and modern_entry._choosers.get(
                _compat.low_level_server(first)
            )

            async def instrumented(*args: Any) -> None:  # an instrumentation library's
                wrapped.append("seen")
                await entry(*args)

            streamable_http_manager.handle_modern_request = instrumented
        try:
            assert _compat.low_level_server(first) not in modern_entry._choosers
            async with http_server(second) as url, httpx.AsyncClient(timeout=10) as http:
                polled = await post(http, url, "tasks/get", {"taskId": "nope"})
                replies = extension.json_replies
                assert replies is not None and replies.taken["tasks/get"] == 1
        finally:
            streamable_http_manager.handle_modern_request = entry
    assert polled.message()["error"]["code"] == -32602 and wrapped == ["seen"]


class Emitting:
    """A middleware in the SDK server's own list: it reports progress on every request."""

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        await ctx.session.report_progress(1, 2, f"saw {ctx.method}")
        return await call_next(ctx)


async def test_a_request_the_sdks_own_middleware_sees_keeps_sse_mode() -> None:
    mcp, extension = server()
    with anyio.fail_after(60):
        async with http_server(mcp) as url, httpx.AsyncClient(timeout=10) as http:
            _compat.low_level_server(mcp).middleware.insert(0, Emitting())
            made = await post(
                http, url, "tools/call", {"name": "echo", "arguments": {"text": "a"}}, progress=True
            )
            polled = await post(http, url, "tasks/get", {"taskId": "nope"}, progress=True)
            assert extension.json_replies is not None
            assert extension.json_replies.taken == {"tasks/get": 0, "tools/call": 0}
    for reply in (made, polled):
        assert reply.kind == "text/event-stream" and "saw " in reply.text
    assert made.message()["result"]["resultType"] == "task"


async def test_a_chosen_call_resolves_its_tool_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The interceptor takes the tool the chooser resolved; a call through SSE mode
    resolves it in the interceptor only."""
    mcp, _ = server()
    looked_up: list[str] = []
    resolve = json_replies.resolve_tool

    async def counted(server: Any, name: str, version: Any) -> Any:
        looked_up.append(name)
        return await resolve(server, name, version)

    monkeypatch.setattr(json_replies, "resolve_tool", counted)
    with anyio.fail_after(60):
        async with http_server(mcp) as url, httpx.AsyncClient(timeout=10) as http:
            params = {"name": "echo", "arguments": {"text": "a"}}
            await post(http, url, "tools/call", params)
            chosen = list(looked_up)
            mcp.add_middleware(Watcher())
            await post(http, url, "tools/call", params)
    assert chosen == ["echo"] and looked_up == ["echo", "echo"]


async def test_an_authenticated_call_keeps_sse_mode_and_its_polls_do_not() -> None:
    """Per-principal visibility rules could make the name another tool inside the request."""
    mcp, extension = server()
    mcp.auth = StaticTokenVerifier(tokens=TOKENS)
    alice = {"Authorization": "Bearer alice-token"}
    with anyio.fail_after(60):
        async with http_server(mcp) as url, httpx.AsyncClient(timeout=10, headers=alice) as http:
            made = await post(http, url, "tools/call", {"name": "echo", "arguments": {"text": "a"}})
            task_id = made.message()["result"]["taskId"]
            await settle(http, url, task_id)
            replies = extension.json_replies
            assert replies is not None
            assert replies.taken["tools/call"] == 0 and replies.taken["tasks/get"] >= 1
            bob = await post(http, url, "tasks/get", {"taskId": task_id}, headers=BOB)
    assert bob.message()["error"]["code"] == -32602  # the other principal's poll


async def test_a_mounted_or_versioned_or_hidden_tool_answers_as_in_sse_mode() -> None:
    """Calls the chooser must not (mounted: the child resolves it) or may (a version asked
    for, a tool hidden by FastMCP's visibility rules) take: the same answers either way."""
    mcp, extension = server()
    child = FastMCP("child")

    @child.tool(task=True)
    async def inner(text: str) -> str:
        return f"inner {text}"

    @mcp.tool(task=True, version="1")
    async def versioned(text: str) -> str:
        return f"v1 {text}"

    @mcp.tool(name="versioned", task=True, version="2")
    async def versioned_two(text: str) -> str:
        return f"v2 {text}"

    mcp.disable(names={"refused"})

    async def calls(http: httpx.AsyncClient, url: str) -> list[tuple[int, str, str]]:
        out = []
        for name, meta in [("versioned", {"fastmcp": {"version": "1"}}), ("versioned", {})]:
            params = {"name": name, "arguments": {"text": "t"}, "_meta": meta}
            made = await post(http, url, "tools/call", params)
            task_id = made.message()["result"]["taskId"]
            await settle(http, url, task_id)
            out += [made.seen(), (await post(http, url, "tasks/get", {"taskId": task_id})).seen()]
        out.append((await post(http, url, "tools/call", {"name": "refused"})).seen())
        return out

    with anyio.fail_after(60):
        async with http_server(mcp) as url, httpx.AsyncClient(timeout=10) as http:
            replies = extension.json_replies
            assert replies is not None
            plain = await calls(http, url)
            assert replies.taken["tools/call"] == 2  # the two versions; hidden: SSE mode
            mcp.mount(child, namespace="child")
            mounted = await post(
                http, url, "tools/call", {"name": "child_inner", "arguments": {"text": "m"}}
            )
            assert replies.taken["tools/call"] == 2  # a mounted server: SSE mode
            mcp.add_middleware(Watcher())
            through = await calls(http, url)
    assert plain == through
    assert '"v1 t"' in plain[1][2] and '"v2 t"' in plain[3][2]
    assert mounted.message()["result"]["resultType"] == "task"
