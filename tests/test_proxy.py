"""A FastMCP proxy in front of a tasks server (`client.proxy`, issue 14).

`create_proxy(Client(backend))`: the proxy's backend client declares tasks (the
transparent client extension), so the backend runs the tool as a task; the
proxied call still returns exactly what a direct `client.call_tool` returns,
in memory and over a real HTTP backend. A failed task surfaces at the proxy's
client as the proxy surfaces a synchronous backend's JSON-RPC error of the
same code, message and data (masked alike). `ProxyClient(...)` and URL targets
keep working (they never declare tasks, so the backend answers synchronously).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp_types
import pytest
from fastmcp import Client, Context, FastMCP
from fastmcp.exceptions import ToolError
from fastmcp.server import create_proxy
from fastmcp.server.middleware import Middleware, MiddlewareContext
from fastmcp.server.providers.proxy import ProxyClient
from mcp.client.extension import UnexpectedClaimedResult
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel

from fastmcp_tasks import TasksExtension, _compat
from fastmcp_tasks.client.extension import TasksClientExtension
from fastmcp_tasks.client.proxy import TaskResolvingSession, install_proxy_resolution
from fastmcp_tasks.errors import IncompatibleFastMCP
from fastmcp_tasks.wire.models import CreateTaskResult
from tests.wire import http_server, http_wire_for

pytestmark = pytest.mark.anyio

install_proxy_resolution()  # what `import fastmcp_tasks` does (idempotent)

REFUSAL = {"code": -32042, "message": "nope", "data": {"why": "refused"}}


class Report(BaseModel):
    pages: int
    title: str


@dataclass
class Backend:
    server: FastMCP
    as_task: list[bool] = field(default_factory=list)  # per call: did it run as a task?
    cancelled: anyio.Event = field(default_factory=anyio.Event)
    started: anyio.Event = field(default_factory=anyio.Event)
    task_ids: list[str] = field(default_factory=list)


class RefuseCalls(Middleware):
    """A synchronous backend failure: `tools/call` answered with a JSON-RPC error."""

    async def on_call_tool(self, context: MiddlewareContext[Any], call_next: Any) -> Any:
        raise MCPError(REFUSAL["code"], REFUSAL["message"], REFUSAL["data"])


def backend(*, task: bool = True, refuse: bool = False) -> Backend:
    """The backend: the same tools, run as tasks (`task=True`) or synchronously."""
    mcp = FastMCP("backend")
    mcp.add_extension(TasksExtension())
    made = Backend(mcp)
    if refuse:
        mcp.add_middleware(RefuseCalls())

    @mcp.tool(task=task)
    async def slow(x: int, ctx: Context) -> int:
        made.as_task.append(ctx.is_background_task)
        return x + 1

    @mcp.tool(task=task)
    async def report(pages: int, ctx: Context) -> Report:
        made.as_task.append(ctx.is_background_task)
        return Report(pages=pages, title=f"{pages} pages")

    @mcp.tool(task=task)
    async def flagged(ctx: Context) -> mcp_types.CallToolResult:
        made.as_task.append(ctx.is_background_task)
        text = mcp_types.TextContent(type="text", text="flagged")
        return mcp_types.CallToolResult(content=[text], is_error=True)

    @mcp.tool(task=task)
    async def raises(ctx: Context) -> int:
        made.as_task.append(ctx.is_background_task)
        raise ToolError("it broke")

    @mcp.tool(task=task)
    async def refused(ctx: Context) -> int:
        """As a task: ends `failed` with this JSON-RPC error (C28)."""
        made.as_task.append(ctx.is_background_task)
        raise MCPError(REFUSAL["code"], REFUSAL["message"], REFUSAL["data"])

    @mcp.tool(task=task)
    async def confirm(ctx: Context) -> str:
        made.as_task.append(ctx.is_background_task)
        answer = await ctx.elicit("Sure?", bool)
        return f"{answer.action}:{getattr(answer, 'data', None)}"

    @mcp.tool(task=task)
    async def forever(ctx: Context) -> str:
        made.as_task.append(ctx.is_background_task)
        made.task_ids.append(str(ctx.task_id))
        made.started.set()
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            made.cancelled.set()
            raise
        return "never"

    return made


CALLS: dict[str, dict[str, Any]] = {
    "slow": {"x": 1},
    "report": {"pages": 3},
    "flagged": {},
    "raises": {},
}


def shape(result: Any) -> tuple[Any, ...]:
    """What the comparison reads of a FastMCP `CallToolResult`."""
    return (result.content, result.structured_content, result.data, result.is_error)


@asynccontextmanager
async def target(server: FastMCP, transport: str) -> AsyncIterator[Any]:
    """What a `Client` to `server` connects to: the server itself, or its HTTP URL."""
    if transport == "memory":
        yield server
    else:
        async with http_server(server) as url:
            yield url


async def outcome(client: Client, name: str, arguments: dict[str, Any]) -> tuple[Any, ...]:
    """A call's result shape, or the exception it raised (type and message)."""
    try:
        return shape(await client.call_tool(name, arguments, raise_on_error=False))
    except Exception as error:  # compared, not swallowed
        return ("raised", type(error).__name__, str(error))


@pytest.mark.parametrize("name", sorted(CALLS))
async def test_a_proxied_task_returns_what_a_direct_call_returns(transport: str, name: str) -> None:
    made = backend()
    async with target(made.server, transport) as where:
        async with Client(where) as direct:
            expected = await outcome(direct, name, CALLS[name])
        async with Client(create_proxy(Client(where))) as front:
            proxied = await outcome(front, name, CALLS[name])
    assert made.as_task == [True, True]  # the backend ran both calls as tasks
    assert proxied == expected
    async with Client(create_proxy(Client(backend(task=False).server))) as front:
        assert await outcome(front, name, CALLS[name]) == expected  # as without tasks


@pytest.mark.parametrize("masked", [False, True], ids=["details", "masked"])
async def test_a_failed_task_surfaces_like_a_synchronous_backend_error(
    transport: str, masked: bool
) -> None:
    failing, refusing = backend(), backend(task=False, refuse=True)
    async with Client(refusing.server) as direct:
        with pytest.raises(MCPError) as sync_error:  # the same kind: a JSON-RPC error
            await direct.call_tool("refused", {})
    assert sync_error.value.error.model_dump() == REFUSAL
    async with target(failing.server, transport) as where:
        async with Client(where) as direct:
            with pytest.raises(MCPError) as task_error:
                await direct.call_tool("refused", {})
        assert task_error.value.error.model_dump() == REFUSAL
        proxy = create_proxy(Client(where), mask_error_details=masked)
        async with Client(proxy) as front:
            proxied = await outcome(front, "refused", {})
    reference = create_proxy(Client(refusing.server), mask_error_details=masked)
    async with Client(reference) as front:
        expected = await outcome(front, "refused", {})
    assert failing.as_task == [True, True]
    assert proxied == expected
    assert ("nope" in str(proxied)) is not masked


async def test_the_proxy_answers_in_task_elicitations_with_the_target_clients_handler() -> None:
    made = backend()
    asked: list[str] = []

    async def handler(message: str, response_type: Any, params: Any, context: Any) -> Any:
        asked.append(message)
        return True

    direct_target = Client(made.server, elicitation_handler=handler)
    async with direct_target as direct:
        expected = await outcome(direct, "confirm", {})
    async with Client(create_proxy(Client(made.server, elicitation_handler=handler))) as front:
        proxied = await outcome(front, "confirm", {})
    assert asked == ["Sure?", "Sure?"] and made.as_task == [True, True]
    assert proxied == expected
    assert expected[0][0].text == "accept:True"


async def test_cancelling_the_proxied_call_cancels_the_backend_task() -> None:
    """Over HTTP the backend outlives the proxied call: only a `tasks/cancel` ends its task."""
    made = backend()
    async with http_server(made.server) as url, http_wire_for(url) as wire:
        async with Client(create_proxy(Client(url))) as front:
            async with anyio.create_task_group() as group:
                group.start_soon(front.call_tool, "forever", {})
                await made.started.wait()
                group.cancel_scope.cancel()
        with anyio.fail_after(10):
            await made.cancelled.wait()
        (task_id,) = made.task_ids
        done = await wire.wait(task_id)
    assert done["status"] == "cancelled"
    assert made.as_task == [True]


async def test_a_proxy_client_target_keeps_working(transport: str) -> None:
    made = backend()
    async with target(made.server, transport) as where:
        async with Client(where) as direct:
            expected = await outcome(direct, "report", CALLS["report"])
        async with Client(create_proxy(ProxyClient(where))) as front:
            proxied = await outcome(front, "report", CALLS["report"])
    assert proxied == expected
    assert made.as_task == [True, False]  # it never declares tasks: answered synchronously


async def test_a_url_target_keeps_working() -> None:
    made = backend()
    async with http_server(made.server) as url:
        async with Client(url) as direct:
            expected = await outcome(direct, "report", CALLS["report"])
        async with Client(create_proxy(url)) as front:
            proxied = await outcome(front, "report", CALLS["report"])
    assert proxied == expected
    assert made.as_task == [True, False]  # a URL target is a ProxyClient: synchronous


async def test_a_caller_that_resolves_claims_itself_is_left_alone() -> None:
    """`allow_claimed=True` (what `Client.call_tool()` passes) gets the claim as is."""
    made = backend()
    extensions = [TasksClientExtension()]
    async with ProxyClient(made.server, mode="auto", extensions=extensions) as client:
        assert isinstance(client.session, TaskResolvingSession)
        created = await client.session.call_tool("slow", {"x": 1}, allow_claimed=True)
        assert isinstance(created, CreateTaskResult)
        assert (await client.call_tool("slow", {"x": 2})).data == 3  # resolved by the Client
    async with Client(made.server) as plain:  # a session outside proxies is not touched
        assert not isinstance(plain.session, TaskResolvingSession)
        with pytest.raises(UnexpectedClaimedResult):
            await plain.session.call_tool("slow", {"x": 1})


def test_installing_twice_wraps_core_s_session_class_once() -> None:
    install_proxy_resolution()
    install_proxy_resolution()
    session_class = _compat.proxy_session_class()
    wrappers = [k for k in session_class.__mro__ if k is TaskResolvingSession]
    assert wrappers == [TaskResolvingSession]
    core_classes = [k for k in session_class.__mro__[2:] if k.__module__.startswith("fastmcp.")]
    assert core_classes, "core's forwarding session stays in the chain"
    assert _compat.check_proxy_seams() is None


def test_a_moved_seam_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    from fastmcp.server.providers import proxy as core_proxy

    monkeypatch.setattr(core_proxy, "PROXY_TRANSPORT_OPTIONS", object())
    with pytest.raises(IncompatibleFastMCP) as info:
        install_proxy_resolution()
    assert "PROXY_TRANSPORT_OPTIONS.session_class" in str(info.value)
