"""A plain `tasks/get` over HTTP is answered at the SDK's entry (`server.direct_polls`):
every kind of answer (each status, each error) has the same status, headers and bytes
as the SDK's own answer to the same request on the same server; a paced poll counts
once; everything unusual about a request (its envelope, its headers, what would watch
it) leaves it to the SDK, which answers it exactly as before.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest
from fastmcp import FastMCP
from fastmcp.server.dependencies import fastmcp_request_ctx
from fastmcp.server.middleware import Middleware
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.caching import CacheHint
from starlette.middleware import Middleware as StarletteMiddleware

from fastmcp_tasks import Limits, TasksExtension, _compat
from fastmcp_tasks.errors import StoreError
from fastmcp_tasks.server.json_replies import JsonReplies
from fastmcp_tasks.stores.memory import MemoryTaskStore
from fastmcp_tasks.wire.models import TaskIdParams
from tests.test_poll_lane import no_tracer_provider  # noqa: F401 - autouse: no tracer
from tests.test_poll_lane import server as lane_server
from tests.wire import MODERN, TASKS, http_server, serve_asgi

pytestmark = pytest.mark.anyio

ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientInfo": {"name": "tests", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS: {}}},
}
HEADERS = {
    "Accept": "application/json, text/event-stream",
    "Content-Type": "application/json",
    "MCP-Protocol-Version": MODERN,
    "Mcp-Method": "tasks/get",
}


def server(**options: Any) -> tuple[FastMCP, TasksExtension, anyio.Event]:
    """`echo` and `refused` (as for the poll lane), and `blocker`, which waits for `release`."""
    mcp, extension = lane_server("direct-polls", **options)
    release = anyio.Event()

    @mcp.tool(task=True)
    async def blocker() -> str:
        await release.wait()
        return "released"

    return mcp, extension, release


def body(task_id: Any, request_id: Any = 1, meta: dict[str, Any] | None = None) -> bytes:
    params = {"taskId": task_id, "_meta": {**ENVELOPE, **(meta or {})}}
    message = {"jsonrpc": "2.0", "id": request_id, "method": "tasks/get", "params": params}
    return json.dumps(message).encode()


#: What a working task's answer computes at each read (its time to live left).
TTL = re.compile(rb'"ttlMs":\d+')
#: Headers that differ between two answers of one request: the time, and the session a
#: 2025-11-25 request gets (the SDK's other path).
VOLATILE = ("date", "server", "mcp-session-id")


def seen(response: httpx.Response) -> tuple[int, list[tuple[str, str]], bytes]:
    """Status, headers and the exact body, but for what differs at each read (`TTL`,
    `VOLATILE`; `content-length` follows the body)."""
    headers = [(k, v) for k, v in response.headers.multi_items() if k not in VOLATILE]
    return response.status_code, headers, TTL.sub(b'"ttlMs":0', response.content)


def polls_of(extension: TasksExtension) -> Any:
    replies = extension.json_replies
    assert isinstance(replies, JsonReplies) and replies.polls is not None
    return replies.polls


async def both_ways(
    http: httpx.AsyncClient,
    url: str,
    extension: TasksExtension,
    content: bytes,
    headers: dict[str, str] | None = None,
    extra: list[tuple[str, str]] | None = None,
) -> tuple[Any, Any, int]:
    """The same request answered at the entry, then by the SDK (direct answers off): both
    answers and how many the entry answered. `extra`: header lines added as they are."""
    replies = extension.json_replies
    assert replies is not None
    polls = polls_of(extension)
    sent = [*{**HEADERS, **(headers or {})}.items(), *(extra or [])]
    before = polls.answered
    direct = seen(await http.post(url, content=content, headers=sent))
    answered = polls.answered - before
    replies.polls = None
    try:
        sdk = seen(await http.post(url, content=content, headers=sent))
    finally:
        replies.polls = polls
    return direct, sdk, answered


async def post_call(
    http: httpx.AsyncClient, url: str, tool: str, headers: dict[str, str], **arguments: Any
) -> httpx.Response:
    params = {"name": tool, "arguments": arguments, "_meta": ENVELOPE}
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    sent = {**HEADERS, "Mcp-Method": "tools/call", "Mcp-Name": tool, **headers}
    return await http.post(url, content=json.dumps(call), headers=sent)


async def created(http: httpx.AsyncClient, url: str, tool: str, **arguments: Any) -> str:
    reply = await post_call(http, url, tool, {}, **arguments)
    return str(reply.json()["result"]["taskId"])


async def ended(
    http: httpx.AsyncClient, url: str, task_id: str, headers: dict[str, str] | None = None
) -> None:
    with anyio.fail_after(10):
        while True:
            reply = await http.post(
                url, content=body(task_id), headers={**HEADERS, **(headers or {})}
            )
            if reply.json()["result"]["status"] != "working":
                return
            await anyio.sleep(0.01)


@asynccontextmanager
async def completed(
    mcp: FastMCP, json_mode: bool = False
) -> AsyncIterator[tuple[str, httpx.AsyncClient, str]]:
    """`mcp` served over HTTP (`json_mode`: `json_response=True`), a client, and the id of
    an `echo` task that completed."""
    async with serve_asgi(mcp.http_app(json_response=json_mode)) as base:
        async with httpx.AsyncClient(timeout=10) as http:
            url = f"{base}/mcp"
            done = await created(http, url, "echo", text="hi")
            await ended(http, url, done)
            yield url, http, done


async def test_every_kind_of_answer_is_the_sdks_byte_for_byte() -> None:
    mcp, extension, release = server()
    with anyio.fail_after(60):
        async with http_server(mcp) as url, httpx.AsyncClient(timeout=10) as http:
            done = await created(http, url, "echo", text="hi")
            failed = await created(http, url, "refused")
            working = await created(http, url, "blocker")
            await ended(http, url, done)
            await ended(http, url, failed)
            cases: list[tuple[bytes, dict[str, str]]] = [
                (body(done), {"Mcp-Name": done}),
                (body(failed, "req-7"), {}),
                (body(working, 2**40), {}),
                (body("no-such-task"), {}),  # -32602
                (body(done, meta={"io.modelcontextprotocol/clientCapabilities": {}}), {}),
                (body(done), {"Mcp-Name": failed}),  # names another task: -32020
                (body("x" * 5000), {}),  # too long to be an id: -32602
            ]
            outcomes = [await both_ways(http, url, extension, b, h) for b, h in cases]
            release.set()
    for direct, sdk, answered in outcomes:
        assert answered == 1
        assert direct == sdk
    answers = [json.loads(direct[2]) for direct, _, _ in outcomes]
    assert [a["result"]["status"] for a in answers[:3]] == ["completed", "failed", "working"]
    assert answers[1]["id"] == "req-7" and answers[2]["id"] == 2**40
    assert [a["error"]["code"] for a in answers[3:]] == [-32602, -32021, -32020, -32602]


async def test_a_server_in_json_mode_answers_the_same() -> None:
    mcp, extension, release = server()
    with anyio.fail_after(60):
        async with serve_asgi(mcp.http_app(json_response=True)) as base:
            async with httpx.AsyncClient(timeout=10) as http:
                url = f"{base}/mcp"
                done = await created(http, url, "echo", text="j")
                await ended(http, url, done)
                working = await created(http, url, "blocker")
                json_only = {"Accept": "application/json"}
                outcomes = [
                    await both_ways(http, url, extension, body(done), json_only),
                    await both_ways(http, url, extension, body(working)),
                    await both_ways(http, url, extension, body("nope"), json_only),
                    await both_ways(http, url, extension, body(done), {"Accept": "text/plain"}),
                ]
                call = await post_call(http, url, "echo", {"Accept": "application/json"}, text="j")
                release.set()
    assert [answered for _, _, answered in outcomes] == [1, 1, 1, 0]
    assert all(direct == sdk for direct, sdk, _ in outcomes)
    assert outcomes[3][0][0] == 406
    # other requests keep JSON mode (SSE mode would 406 a call that accepts JSON only)
    assert call.status_code == 200 and call.json()["result"]["resultType"] == "task"


async def test_a_paced_poll_counts_once_and_a_failing_store_answers_as_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Pacing: one poll allowed, the next refused, at the entry as by the SDK; then the
    store fails and both answer -32603."""
    mcp, extension, release = server(limits=Limits(min_poll_fraction=0.5, poll_burst=1))
    with anyio.fail_after(60):
        async with http_server(mcp) as url, httpx.AsyncClient(timeout=10) as http:
            first = await created(http, url, "blocker")
            second = await created(http, url, "blocker")
            paced = []
            for task_id in (first, second):  # the first at the entry, the second by the SDK
                direct = task_id == first
                replies = extension.json_replies
                assert replies is not None
                polls, replies.polls = replies.polls, (replies.polls if direct else None)
                try:
                    for _ in range(2):
                        reply = await http.post(url, content=body(task_id), headers=HEADERS)
                        paced.append((reply.status_code, reply.json().get("error", {}).get("code")))
                finally:
                    replies.polls = polls

            async def down(task_id: str) -> None:
                raise StoreError("injected: the store is down")

            monkeypatch.setattr(extension.store, "peek", down, raising=False)
            monkeypatch.setattr(extension.store, "get", down)
            direct, sdk, answered = await both_ways(http, url, extension, body(first))
            release.set()
    assert paced == [(200, None), (200, -32000)] * 2  # the burst of one, then refused
    assert answered == 1 and direct == sdk
    assert json.loads(direct[2])["error"]["code"] == -32603


class Watching(Middleware):
    """Sees every request."""

    async def on_request(self, context: Any, call_next: Any) -> Any:
        return await call_next(context)


def raw(message: Any) -> bytes:
    return json.dumps(message).encode()


#: A plain poll; "TASK" becomes the id of a completed task (so only what a case changes
#: can make the entry hand it on).
GET = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "tasks/get",
    "params": {"taskId": "TASK", "_meta": ENVELOPE},
}


TRACEPARENT = "00-" + "1" * 32 + "-" + "2" * 16 + "-01"


@pytest.mark.parametrize(
    ("content", "headers", "extra"),
    [
        (b"{not json", {}, []),
        (raw([GET]), {}, []),  # a batch
        (raw({**GET, "extra": 1}), {}, []),
        (raw({**GET, "id": True}), {}, []),
        (raw({**GET, "id": 1.0}), {}, []),
        (raw({**GET, "id": None}), {}, []),
        (raw({**GET, "jsonrpc": "1.0"}), {}, []),
        (raw({**GET, "method": "tasks/cancel"}), {}, []),  # the Mcp-Method header says get
        (raw({**GET, "params": {"taskId": "TASK"}}), {}, []),  # no envelope in `_meta`
        (raw({**GET, "params": {**GET["params"], "taskId": 7}}), {}, []),
        (b"TASK", {"Content-Type": "text/plain"}, []),
        (b"TASK", {"MCP-Protocol-Version": "2025-11-25"}, []),
        (b"TASK", {}, [("Mcp-Method", "tasks/get")]),  # a routing header given twice
        (b"TRACE", {}, []),
    ],
)
@pytest.mark.parametrize("json_mode", [False, True])
async def test_an_unusual_poll_is_left_to_the_sdk(
    content: bytes, headers: dict[str, str], extra: list[tuple[str, str]], json_mode: bool
) -> None:
    mcp, extension, _ = server()
    with anyio.fail_after(60):
        async with completed(mcp, json_mode) as (url, http, done):
            if content == b"TASK":
                content = body(done)
            elif content == b"TRACE":
                content = body(done, meta={"traceparent": TRACEPARENT})
            content = content.replace(b'"TASK"', json.dumps(done).encode())
            plain = raw(GET).replace(b'"TASK"', json.dumps(done).encode())
            template = await both_ways(http, url, extension, plain)
            direct, sdk, answered = await both_ways(http, url, extension, content, headers, extra)
    assert template[2] == 1  # the case's own change is what hands it on
    assert answered == 0
    assert direct == sdk


async def test_what_would_watch_or_change_a_poll_leaves_it_to_the_sdk() -> None:
    mcp, extension, _ = server()
    with anyio.fail_after(60):
        async with completed(mcp) as (url, http, done):
            polls = polls_of(extension)
            low = _compat.low_level_server(mcp)
            mcp.add_middleware(Watching())
            watched = await both_ways(http, url, extension, body(done))
            mcp.middleware.clear()
            low.cache_hints["tasks/get"] = CacheHint(ttl_ms=5, scope="private")
            hinted = await both_ways(http, url, extension, body(done))
            del low.cache_hints["tasks/get"]
            plain = await both_ways(http, url, extension, body(done))
            answered = polls.answered
    assert [watched[2], hinted[2], plain[2]] == [0, 0, 1] and answered >= 1
    assert watched[0] == watched[1] and hinted[0] == hinted[1] and plain[0] == plain[1]
    assert b'"cacheScope":"private"' in hinted[0][2]  # the SDK applied the hint


class ScopeCopyingAuth:
    """An ASGI middleware of the author's that authenticates on a copy of the scope, as
    a gateway in front of the server might: only the scope the SDK's entry receives says
    who calls (header `x-user`)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        user = dict(scope.get("headers", [])).get(b"x-user")
        if scope["type"] == "http" and user:
            token = AccessToken(token="t", client_id="gw", scopes=[], claims={"sub": user.decode()})
            scope = {**scope, "user": AuthenticatedUser(token)}
        await self.app(scope, receive, send)


async def test_the_caller_is_who_the_sdk_would_see() -> None:
    mcp, extension, _ = server()
    app = mcp.http_app(middleware=[StarletteMiddleware(ScopeCopyingAuth)])
    with anyio.fail_after(60):
        async with serve_asgi(app) as base, httpx.AsyncClient(timeout=10) as http:
            url = f"{base}/mcp"
            params = {"name": "echo", "arguments": {"text": "a"}, "_meta": ENVELOPE}
            call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
            headers = {**HEADERS, "Mcp-Method": "tools/call", "Mcp-Name": "echo", "x-user": "alice"}
            reply = await http.post(url, content=json.dumps(call), headers=headers)
            task_id = reply.json()["result"]["taskId"]
            await ended(http, url, task_id, {"x-user": "alice"})  # the same answer twice
            outcomes = [
                await both_ways(http, url, extension, body(task_id), {"x-user": who})
                for who in ("alice", "alice", "bob")
            ]
    assert [answered for _, _, answered in outcomes] == [1, 1, 1]
    assert all(direct == sdk for direct, sdk, _ in outcomes)
    assert outcomes[0][0][0] == 200 and outcomes[2][0][0] != 200  # bob: not his task


@pytest.mark.parametrize("started", [False, True])
async def test_another_tasks_get_handler_is_left_to_the_sdk(started: bool) -> None:
    """Registered in the extension's place before the server starts, or after."""
    mcp, extension, _ = server()
    low = _compat.low_level_server(mcp)
    entry = low.get_request_handler("tasks/get")
    assert entry is not None

    async def audited(ctx: Any, params: Any) -> Any:
        result = await entry.handler(ctx, params)
        return {**result, "_meta": {"audited": True}}

    if not started:
        low.add_request_handler("tasks/get", TaskIdParams, audited)
    with anyio.fail_after(60):
        async with completed(mcp) as (url, http, done):
            if started:
                low.add_request_handler("tasks/get", TaskIdParams, audited)
            direct, sdk, answered = await both_ways(http, url, extension, body(done))
    assert answered == 0 and direct == sdk and b'"audited":true' in direct[2]


class RequestReadingStore(MemoryTaskStore):
    """A store of the author's that reads the request's FastMCP context on a read."""

    async def get(self, task_id: str) -> Any:
        request = fastmcp_request_ctx.get()
        if request is None:
            raise RuntimeError("no request context")
        return await super().get(task_id)


async def test_a_store_of_the_authors_leaves_a_poll_to_the_sdk() -> None:
    mcp, extension, _ = server(store=RequestReadingStore())
    with anyio.fail_after(60):
        async with serve_asgi(mcp.http_app()) as base, httpx.AsyncClient(timeout=10) as http:
            url = f"{base}/mcp"
            done = await created(http, url, "echo", text="s")
            direct, sdk, answered = await both_ways(http, url, extension, body(done))
    assert answered == 0 and direct == sdk
    assert json.loads(direct[2])["result"]["taskId"] == done
