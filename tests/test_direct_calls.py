"""A plain task-creating `tools/call` over HTTP is answered at the SDK's entry
(`server.direct_calls`): every kind of answer (a task, an idempotent resend, each error)
has the same status, headers and bytes as the SDK's own answer to the same request on
the same server (but for the new task's id and times), the task's record and what its
tool sees are the same, and everything unusual about a call leaves it to the SDK.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, fields
from typing import Annotated, Any

import anyio
import httpx
import pytest
from fastmcp import FastMCP
from fastmcp.dependencies import CurrentContext
from fastmcp.exceptions import NotFoundError, ToolError
from fastmcp.server.context import Context
from fastmcp.server.dependencies import get_context, get_http_headers
from mcp.server.caching import CacheHint
from mcp_types import CallToolRequestParams
from pydantic import AfterValidator, Field

from fastmcp_tasks import Limits, TasksExtension, _compat, task_options
from fastmcp_tasks.errors import StoreError
from fastmcp_tasks.server import creation, direct_calls
from fastmcp_tasks.server import extension as extension_module
from fastmcp_tasks.server.json_replies import JsonReplies
from fastmcp_tasks.stores.memory import MemoryTaskStore
from fastmcp_tasks.wire.names import IDEMPOTENCY_META_KEY
from tests.test_direct_polls import ENVELOPE, HEADERS, Watching, raw, seen
from tests.test_poll_lane import no_tracer_provider  # noqa: F401 - autouse: no tracer
from tests.test_poll_lane import server as lane_server
from tests.wire import serve_asgi

pytestmark = pytest.mark.anyio

#: FastMCP serves its tools' input schemas to the SDK (4.2 and later): only then can the
#: `Mcp-Param-*` headers be checked as the SDK's entry checks them, so only then is a call
#: answered at the entry (`test_without_the_schema_hook_every_call_goes_to_the_sdk`).
HOOKED = _compat.low_level_server(FastMCP("probe")).get_tool_input_schema is not None
answers_directly = pytest.mark.skipif(
    not HOOKED, reason="this FastMCP serves no tool schemas to the SDK: calls go through it"
)

CALL_HEADERS = {**HEADERS, "Mcp-Method": "tools/call", "Mcp-Name": "echo"}
#: What differs between two new tasks: the id and the times.
NEW = re.compile(rb'"taskId":"[^"]+"|"(createdAt|lastUpdatedAt)":"[^"]+"|"ttlMs":\d+')


def call(
    request_id: Any = 1, meta: dict[str, Any] | None = None, **arguments: Any
) -> dict[str, Any]:
    params = {"name": "echo", "arguments": arguments, "_meta": {**ENVELOPE, **(meta or {})}}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


@dataclass
class Seen:
    """What the runs of `seer` saw; `four` is set at the fourth."""

    runs: list[dict[str, Any]] = field(default_factory=list)
    four: anyio.Event = field(default_factory=anyio.Event)
    release: anyio.Event = field(default_factory=anyio.Event)  # ends `blocker`


def server(**options: Any) -> tuple[FastMCP, TasksExtension, Seen]:
    """`echo` (of the poll lane's server), `routed` (an argument mirrored in a header) and
    `seer`, which records what its run sees."""
    mcp, extension = lane_server("direct-calls", **options)
    seen = Seen()

    @mcp.tool(task=True)
    async def routed(
        region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})],
    ) -> str:
        return region

    @mcp.tool(task=True)
    async def blocker(text: str) -> str:
        await seen.release.wait()
        return text

    @mcp.tool(task=True)
    async def seer(ctx: Context = CurrentContext()) -> str:
        headers = get_http_headers(include_all=True)
        seen.runs.append({"headers": headers, "session": ctx.session_id})
        if len(seen.runs) == 4:
            seen.four.set()
        return "seen"

    return mcp, extension, seen


def seen_of(response: httpx.Response) -> tuple[int, list[tuple[str, str]], bytes]:
    """As a poll's answer is compared (`seen`), and the new task's id and times too."""
    status, headers, body = seen(response)
    return status, headers, NEW.sub(lambda m: m.group(0).split(b":")[0] + b":0", body)


def calls_of(extension: TasksExtension) -> Any:
    replies = extension.json_replies
    assert isinstance(replies, JsonReplies) and replies.calls is not None
    return replies.calls


async def both_ways(
    http: httpx.AsyncClient,
    url: str,
    extension: TasksExtension,
    content: bytes,
    headers: dict[str, str] | None = None,
) -> tuple[Any, Any, int, list[httpx.Response]]:
    """The same call answered at the entry, then by the SDK (direct answers off): both
    answers as compared, how many the entry answered, and the two responses."""
    replies = extension.json_replies
    assert replies is not None
    calls = calls_of(extension)
    sent = {**CALL_HEADERS, **(headers or {})}
    before = calls.answered
    direct = await http.post(url, content=content, headers=sent)
    answered = calls.answered - before
    replies.calls = None
    try:
        sdk = await http.post(url, content=content, headers=sent)
    finally:
        replies.calls = calls
    return seen_of(direct), seen_of(sdk), answered, [direct, sdk]


@answers_directly
async def test_every_kind_of_answer_is_the_sdks_byte_for_byte(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    mcp, extension, seen = server(limits=Limits(max_argument_bytes=200))
    blocking = call(meta={IDEMPOTENCY_META_KEY: "k" * 24}, text="same")
    blocking["params"]["name"] = "blocker"
    with anyio.fail_after(60):
        async with serve_asgi(mcp.http_app()) as base, httpx.AsyncClient(timeout=10) as http:
            url = f"{base}/mcp"
            cases = [
                raw(call(text="hi")),
                raw(call("req-7", text="x")),
                raw(call(2**40, text="y")),
                raw(blocking),  # with a key: the second answer is the first's task
                raw(call(meta={IDEMPOTENCY_META_KEY: 5}, text="bad key")),  # -32602
                raw(call(text="z" * 300)),  # over max_argument_bytes: -32602
            ]
            outcomes = [
                await both_ways(
                    http, url, extension, case, {"Mcp-Name": json.loads(case)["params"]["name"]}
                )
                for case in cases
            ]
            seen.release.set()

            async def refuse(*args: Any, **kwargs: Any) -> Any:
                raise StoreError("injected: the store is down")

            monkeypatch.setattr(extension.store, "create", refuse)
            down = await both_ways(http, url, extension, raw(call(text="down")))
    for direct, sdk, answered, _ in [*outcomes, down]:
        assert answered == 1
        assert direct == sdk
    results = [r[3][0].json() for r in outcomes]
    assert [r["result"]["resultType"] for r in results[:4]] == ["task"] * 4
    assert results[1]["id"] == "req-7" and results[2]["id"] == 2**40
    same = outcomes[3][3]
    assert same[0].content == same[1].content  # one task, answered twice the same
    assert [r["error"]["code"] for r in results[4:]] == [-32602, -32602]
    assert down[3][0].json()["error"]["code"] == -32603


@answers_directly
@pytest.mark.parametrize(
    ("raised", "expected"),
    [
        (ToolError("the tool said no"), "the tool said no"),
        (NotFoundError("gone"), "Unknown tool: 'echo'"),
        (RuntimeError("a bug"), None),  # -32603, its text never on the wire
    ],
)
async def test_an_error_creating_the_task_is_mapped_as_fastmcp_and_the_sdk_map_it(
    monkeypatch: pytest.MonkeyPatch, raised: Exception, expected: str | None
) -> None:
    async def failing(*args: Any, **kwargs: Any) -> Any:
        raise raised

    monkeypatch.setattr(direct_calls, "create_task", failing)
    monkeypatch.setattr(extension_module, "create_task", failing)
    mcp, extension, _ = server()
    with anyio.fail_after(60):
        async with serve_asgi(mcp.http_app()) as base, httpx.AsyncClient(timeout=10) as http:
            direct, sdk, answered, replies = await both_ways(
                http, f"{base}/mcp", extension, raw(call(text="e"))
            )
    assert answered == 1 and direct == sdk
    answer = replies[0].json()
    if expected is None:
        assert answer["error"]["code"] == -32603 and "a bug" not in replies[0].text
    else:
        assert answer["result"]["isError"] is True
        assert answer["result"]["content"][0]["text"] == expected


@answers_directly
async def test_the_task_is_the_same_task_and_its_run_sees_the_same_caller(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    mcp, extension, seen = server()
    made: list[Any] = []
    original = creation.new_record

    def recording(*args: Any, **kwargs: Any) -> Any:
        made.append(out := original(*args, **kwargs))
        return out

    monkeypatch.setattr(creation, "new_record", recording)
    with anyio.fail_after(60):
        async with serve_asgi(mcp.http_app()) as base, httpx.AsyncClient(timeout=10) as http:
            url = f"{base}/mcp"
            seer = {**call(), "params": {**call()["params"], "name": "seer"}}
            headers = {"Mcp-Name": "seer", "x-trace-me": "yes"}
            first = await both_ways(http, url, extension, raw(seer), headers)
            named = {**headers, "Mcp-Session-Id": "the-session"}
            second = await both_ways(http, url, extension, raw(seer), named)
            await seen.four.wait()
    assert [first[2], second[2]] == [1, 1] and first[0] == first[1]
    ignored = {"task_id", "created_at", "updated_at", "lease_expires"}
    records = [
        {f.name: getattr(r, f.name) for f in fields(r) if f.name not in ignored} for r, _ in made
    ]
    assert records[0] == records[1] and records[2] == records[3]
    assert made[0][1] == made[1][1] == frozenset()  # the input kinds declared
    by_session = sorted(seen.runs, key=lambda s: s["session"] == "the-session")
    for one in by_session:
        one["headers"].pop("content-length", None)
    assert by_session[0]["headers"] == by_session[1]["headers"]
    assert by_session[2] == by_session[3] and by_session[2]["session"] == "the-session"
    assert by_session[0]["session"] != by_session[1]["session"]  # a new id per request


@answers_directly
@pytest.mark.parametrize(
    ("content", "headers"),
    [
        (raw(call(text=5)), {}),  # invalid arguments: the synchronous path reports them
        (raw(call()), {}),  # a missing argument
        (raw([call(text="b")]), {}),  # a batch
        (raw({**call(text="x"), "extra": 1}), {}),
        (raw({**call(text="x"), "id": True}), {}),
        (raw({**call(text="x"), "id": None}), {}),
        (raw({**call(text="x"), "params": {**call(text="x")["params"], "requestState": "s"}}), {}),
        (raw({**call(text="x"), "params": {**call(text="x")["params"], "task": {}}}), {}),
        (raw(call(text="x")), {"Mcp-Name": "other"}),  # the header names another tool
        (raw(call(text="x")), {"Content-Type": "text/plain"}),
        (raw(call(meta={"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}, text="t")), {}),
        (b"ROUTED", {"Mcp-Name": "routed", "Mcp-Param-Region": "us"}),  # the body says eu
    ],
)
@pytest.mark.parametrize("json_mode", [False, True])
async def test_an_unusual_call_is_left_to_the_sdk(
    content: bytes, headers: dict[str, str], json_mode: bool
) -> None:
    mcp, extension, _ = server()
    with anyio.fail_after(60):
        async with serve_asgi(mcp.http_app(json_response=json_mode)) as base:
            async with httpx.AsyncClient(timeout=10) as http:
                url = f"{base}/mcp"
                template = await both_ways(http, url, extension, raw(call(text="plain")))
                if content == b"ROUTED":
                    routed = call(region="eu")
                    routed["params"]["name"] = "routed"
                    content = raw(routed)
                    good = {**headers, "Mcp-Param-Region": "eu"}
                    template = await both_ways(http, url, extension, content, good)
                direct, sdk, answered, _ = await both_ways(http, url, extension, content, headers)
    assert template[2] == 1 and template[0] == template[1]  # JSON mode answers directly too
    assert answered == 0
    assert direct == sdk


@answers_directly
async def test_what_would_watch_or_change_a_call_leaves_it_to_the_sdk() -> None:
    mcp, extension, _ = server()
    low = _compat.low_level_server(mcp)
    with anyio.fail_after(60):
        async with serve_asgi(mcp.http_app()) as base, httpx.AsyncClient(timeout=10) as http:
            url = f"{base}/mcp"
            mcp.add_middleware(Watching())
            watched = await both_ways(http, url, extension, raw(call(text="w")))
            mcp.middleware.clear()
            low.cache_hints["tools/call"] = CacheHint(ttl_ms=5, scope="private")
            hinted = await both_ways(http, url, extension, raw(call(text="h")))
            del low.cache_hints["tools/call"]
            entry = low.get_request_handler("tools/call")
            assert entry is not None

            async def audited(ctx: Any, params: Any) -> Any:
                return await entry.handler(ctx, params)

            low.add_request_handler("tools/call", CallToolRequestParams, audited)
            replaced = await both_ways(http, url, extension, raw(call(text="r")))
            low.add_request_handler("tools/call", CallToolRequestParams, entry.handler)
            plain = await both_ways(http, url, extension, raw(call(text="p")))
    assert [watched[2], hinted[2], replaced[2], plain[2]] == [0, 0, 0, 1]
    for direct, sdk, _, _ in (watched, hinted, replaced, plain):
        assert direct == sdk


class Audited(FastMCP):
    """A server of the author's that checks every call in `call_tool`."""

    async def call_tool(self, name: str, arguments: Any = None, **options: Any) -> Any:
        if (arguments or {}).get("text") == "forbidden":
            raise ToolError("denied by policy")
        return await super().call_tool(name, arguments, **options)


class Vetting(TasksExtension):
    """A tasks extension of the author's that vets a call before the interceptor's steps."""

    async def intercept_tool_call(self, params: Any, context: Any, call_next: Any) -> Any:
        if (params.arguments or {}).get("text") == "forbidden":
            raise ToolError("vetoed")
        return await super().intercept_tool_call(params, context, call_next)


def authored(server: type[FastMCP], extension: TasksExtension) -> FastMCP:
    mcp = server("authored")
    mcp.add_extension(extension)

    @mcp.tool(task=True)
    async def echo(text: str) -> str:
        return text

    return mcp


@answers_directly
async def test_the_authors_own_call_path_leaves_a_call_to_the_sdk() -> None:
    """A server class's own `call_tool`, an extension subclass's or a patched interceptor."""
    audited = TasksExtension()
    vetting = Vetting()
    patched = TasksExtension()
    outcomes = []
    with anyio.fail_after(60):
        for mcp, extension in (
            (authored(Audited, audited), audited),
            (authored(FastMCP, vetting), vetting),
            (authored(FastMCP, patched), patched),
        ):
            async with serve_asgi(mcp.http_app()) as base:
                async with httpx.AsyncClient(timeout=10) as http:
                    replies = extension.json_replies
                    assert replies is not None
                    if extension is patched:
                        calls_of(patched)  # made for it; then its interceptor is replaced
                        patched.intercept_tool_call = vetting.intercept_tool_call  # type: ignore[method-assign]
                    elif extension is vetting:
                        assert replies.calls is None  # never made for a subclass
                    sent = {**CALL_HEADERS}
                    answers = []
                    calls = replies.calls
                    for _ in range(2):  # the second by the SDK
                        reply = await http.post(
                            f"{base}/mcp", content=raw(call(text="forbidden")), headers=sent
                        )
                        answers.append(seen_of(reply))
                        replies.calls = None
                    outcomes.append((answers, calls.answered if calls else None))
    assert [answered for _, answered in outcomes] == [0, None, 0]
    for (direct, sdk), _ in outcomes:
        assert direct == sdk
        assert b'"isError":true' in direct[2] and b'"resultType":"task"' not in direct[2]


@answers_directly
async def test_a_concurrency_key_leaves_a_call_to_the_sdk() -> None:
    """The key may read FastMCP's request context, which only the SDK's path makes."""
    mcp, extension, _ = server()

    def key(arguments: dict[str, Any]) -> str:
        return f"{get_context().fastmcp.name}:{arguments['text']}"

    @mcp.tool(task=True)
    @task_options(concurrency=1, concurrency_key=key)
    async def keyed(text: str) -> str:
        return text

    keyed_call = call(text="a")
    keyed_call["params"]["name"] = "keyed"
    with anyio.fail_after(60):
        async with serve_asgi(mcp.http_app()) as base, httpx.AsyncClient(timeout=10) as http:
            url = f"{base}/mcp"
            direct, sdk, answered, replies = await both_ways(
                http, url, extension, raw(keyed_call), {"Mcp-Name": "keyed"}
            )
    assert answered == 0 and direct == sdk
    assert replies[0].json()["result"]["statusMessage"].endswith("'direct-calls:a'")


async def test_without_the_schema_hook_every_call_goes_to_the_sdk() -> None:
    """Without `get_tool_input_schema` the SDK's entry reads the schemas through the
    server's lifespan state, which the entry does not hand on: the SDK answers."""
    mcp, extension, _ = server()
    low = _compat.low_level_server(mcp)
    low.get_tool_input_schema = None
    with anyio.fail_after(60):
        async with serve_asgi(mcp.http_app()) as base, httpx.AsyncClient(timeout=10) as http:
            direct, sdk, answered, replies = await both_ways(
                http, f"{base}/mcp", extension, raw(call(text="n"))
            )
    assert answered == 0 and direct == sdk
    assert replies[0].json()["result"]["resultType"] == "task"


class Gatekeeping(FastMCP):
    """A server of the author's that vetoes a call in its middleware runner."""

    async def _run_middleware(self, context: Any, call_next: Any, **options: Any) -> Any:
        message = getattr(context, "message", None)
        if (getattr(message, "arguments", None) or {}).get("text") == "forbidden":
            raise ToolError("denied by policy")
        return await super()._run_middleware(context, call_next, **options)


class TenantStore(MemoryTaskStore):
    """A store of the author's that reads the request's FastMCP context on create."""

    async def create(self, record: Any, **options: Any) -> Any:
        if get_context().fastmcp.name != "direct-calls":
            raise RuntimeError("not a tenant")
        return await super().create(record, **options)


def server_named(check: str) -> str:
    if get_context().fastmcp.name != check:
        raise ValueError("unknown server")
    return check


@answers_directly
async def test_code_of_the_authors_that_reads_the_request_context_leaves_a_call_to_the_sdk() -> (
    None
):
    """A server class's own middleware runner, a store of the author's, a validator."""
    gatekeeping = TasksExtension()
    outcomes = []
    with anyio.fail_after(60):
        gated = authored(Gatekeeping, gatekeeping)
        tenant, tenant_extension, _ = server(store=TenantStore())
        plain, plain_extension, _ = server()

        @plain.tool(task=True)
        async def checked(text: Annotated[str, AfterValidator(server_named)]) -> str:
            return text

        for mcp, extension, case, name in (
            (gated, gatekeeping, raw(call(text="forbidden")), "echo"),
            (tenant, tenant_extension, raw(call(text="t")), "echo"),
            (
                plain,
                plain_extension,
                raw(call(text="x")).replace(b'"echo"', b'"checked"'),
                "checked",
            ),
        ):
            async with serve_asgi(mcp.http_app()) as base:
                async with httpx.AsyncClient(timeout=10) as http:
                    outcomes.append(
                        await both_ways(http, f"{base}/mcp", extension, case, {"Mcp-Name": name})
                    )
    assert [answered for _, _, answered, _ in outcomes] == [0, 0, 0]
    assert all(direct == sdk for direct, sdk, _, _ in outcomes)
    gate, store, validator = (replies[0].json()["result"] for _, _, _, replies in outcomes)
    assert gate["isError"] is True and store["resultType"] == "task"
    assert validator["isError"] is True and "unknown server" in validator["content"][0]["text"]
