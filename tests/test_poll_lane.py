"""A `tasks/get` no middleware or tracer could watch skips FastMCP's request seam
(`server.poll_lane`): it answers exactly as through the seam, whatever the answer; a
middleware that would see it puts it back through the seam at once; the seam is back in
its place when the server stops.

A tracer provider also puts it back: `test_observability` checks that FastMCP's SERVER
span of a `tasks/get` is still there with an OpenTelemetry SDK installed. Here the check
is pinned to "no provider", since another test module may have installed one in this
worker process.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from fastmcp import FastMCP
from fastmcp.server.auth.providers.jwt import StaticTokenVerifier
from fastmcp.server.middleware import Middleware, MiddlewareContext
from fastmcp.server.middleware.middleware import CallNext
from mcp.shared.exceptions import MCPError
from opentelemetry import propagate
from opentelemetry.propagators.composite import CompositePropagator

from fastmcp_tasks import TasksExtension, _compat
from fastmcp_tasks.server import poll_lane
from fastmcp_tasks.server.poll_lane import PollLane, observing_middleware
from tests.wire import Wire, WireError, connect, http_server, http_wire_for

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def no_tracer_provider(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No provider for the lane, and no trace context a client would inject into `_meta`:
    once another test module of this worker process installed an OpenTelemetry SDK, the
    SDK client's spans would put one on every request (and a poll carrying one goes
    through the seam, by design)."""
    monkeypatch.setattr(poll_lane, "tracing_installed", lambda: False)
    textmap = propagate.get_global_textmap()
    propagate.set_global_textmap(CompositePropagator([]))
    try:
        yield
    finally:
        propagate.set_global_textmap(textmap)


class Watcher(Middleware):
    """Sees every request in FastMCP's method-agnostic pass."""

    def __init__(self) -> None:
        self.methods: list[str] = []

    async def on_request(
        self, context: MiddlewareContext[Any], call_next: CallNext[Any, Any]
    ) -> Any:
        self.methods.append(str(context.method))
        return await call_next(context)


class ToolsOnly(Middleware):
    """Watches tool calls only: never sees a `tasks/get`."""

    async def on_call_tool(
        self, context: MiddlewareContext[Any], call_next: CallNext[Any, Any]
    ) -> Any:
        return await call_next(context)


def server(name: str = "lane", **options: Any) -> tuple[FastMCP, TasksExtension]:
    """A server with a task tool that answers and one that fails (`test_json_replies`
    adds its own tools to it)."""
    mcp = FastMCP(name)
    extension = TasksExtension(**options)
    mcp.add_extension(extension)

    @mcp.tool(task=True)
    async def echo(text: str) -> str:
        return text

    @mcp.tool(task=True)
    async def refused() -> str:
        raise MCPError(code=-32050, message="upstream refused", data={"retryAfter": 3})

    return mcp, extension


def answered_directly(extension: TasksExtension) -> int:
    """The polls answered at the SDK's HTTP entry, before the lane (`direct_polls`)."""
    replies = extension.json_replies
    return 0 if replies is None or replies.polls is None else replies.polls.answered


async def answers(wire: Wire, done: str, failed: str) -> list[Any]:
    """One `tasks/get` of every kind of answer, as the client sees it (errors included)."""
    asks: list[tuple[dict[str, Any], dict[str, Any]]] = [
        ({"taskId": done}, {}),
        ({"taskId": failed}, {}),
        ({"taskId": "no-such-task"}, {}),
        ({"taskId": done}, {"opt_in": False}),
        ({"taskId": done}, {"headers": {"Mcp-Name": failed}}),
        ({"taskId": 7}, {"malformed": True}),
        ({}, {"malformed": True}),
    ]
    out: list[Any] = []
    for params, options in asks:
        try:
            out.append(("result", await wire.request("tasks/get", params, **options)))
        except WireError as error:
            out.append(("error", error.code, error.message, error.data, error.http_status))
    return out


@pytest.mark.parametrize("transport", ["memory", "http"])
async def test_a_poll_answers_the_same_past_the_seam_and_through_it(transport: str) -> None:
    mcp, extension = server()
    with anyio.fail_after(30):
        async with connect(mcp, transport) as wire:
            done = (await wire.call_tool("echo", {"text": "hi"}))["taskId"]
            failed = (await wire.call_tool("refused"))["taskId"]
            await wire.wait(done)
            await wire.wait(failed)
            lane = extension.poll_lane
            assert isinstance(lane, PollLane)
            mcp.add_middleware(ToolsOnly())  # sees no tasks/get: the lane stays open
            before, direct = lane.taken, answered_directly(extension)
            past = await answers(wire, done, failed)
            # over HTTP the five well-formed polls are answered at the SDK's entry
            # (`direct_polls`), the two malformed ones past the seam
            assert answered_directly(extension) - direct == (5 if transport == "http" else 0)
            assert lane.taken - before + answered_directly(extension) - direct == len(past)

            watcher = Watcher()
            mcp.add_middleware(watcher)
            taken, direct = lane.taken, answered_directly(extension)
            through = await answers(wire, done, failed)
            assert lane.taken == taken  # every one went through the seam
            assert answered_directly(extension) == direct
            assert watcher.methods.count("tasks/get") == len(through)
    assert past[0][1]["status"] == "completed" and past[1][1]["status"] == "failed"
    # unknown id, no opt-in, two malformed; over HTTP also the other task's Mcp-Name
    assert [kind for kind, *_ in past].count("error") == (5 if transport == "http" else 4)
    assert past == through


async def test_the_seam_is_back_in_place_when_the_server_stops() -> None:
    mcp, extension = server()
    chain = _compat.request_seam_chain(mcp)
    seam = next(entry for entry in chain if _compat.is_request_seam(entry))
    with anyio.fail_after(30):
        async with connect(mcp, "memory"):
            assert extension.poll_lane is not None and extension.poll_lane.seam is seam
            assert seam not in chain and extension.poll_lane in chain
        assert seam in chain and extension.poll_lane is None
        assert not any(isinstance(entry, PollLane) for entry in chain)
        async with connect(mcp, "memory"):  # started again: one lane, not two
            assert sum(isinstance(entry, PollLane) for entry in chain) == 1


def test_which_middleware_would_see_a_poll() -> None:
    class OwnCall(Middleware):
        async def __call__(self, context: Any, call_next: Any) -> Any:
            return await call_next(context)

    class OnMessage(Middleware):
        async def on_message(self, context: Any, call_next: Any) -> Any:
            return await call_next(context)

    async def plain_callable(context: Any, call_next: Any) -> Any:
        return await call_next(context)

    class OwnChain(Middleware):
        async def _dispatch_handler(self, context: Any, call_next: Any, phase: Any = "all") -> Any:
            return await super()._dispatch_handler(context, call_next, phase)

    hooked = Middleware()
    hooked.on_request = plain_callable  # type: ignore[method-assign]

    assert observing_middleware(Watcher())
    assert observing_middleware(OwnChain())
    assert observing_middleware(hooked)
    assert observing_middleware(OwnCall())
    assert observing_middleware(OnMessage())
    assert observing_middleware(plain_callable)
    assert not observing_middleware(ToolsOnly())
    assert not observing_middleware(Middleware())


def test_a_patched_base_middleware_counts_as_watching(monkeypatch: pytest.MonkeyPatch) -> None:
    """An instrumentation library that wraps `Middleware.on_request` itself makes every
    middleware watch requests, though no subclass overrides the hook."""

    async def wrapped(self: Any, context: Any, call_next: Any) -> Any:
        return await call_next(context)

    monkeypatch.setattr(Middleware, "on_request", wrapped)
    assert observing_middleware(ToolsOnly())
    assert observing_middleware(Middleware())


async def test_a_start_that_fails_after_the_lane_puts_the_seam_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    mcp, extension = server()
    chain = _compat.request_seam_chain(mcp)
    seam = next(entry for entry in chain if _compat.is_request_seam(entry))

    def refuse() -> None:
        raise RuntimeError("advertising failed")

    monkeypatch.setattr(extension, "_advertise_idempotency", refuse)
    with anyio.fail_after(30), pytest.raises(Exception, match="advertising failed"):
        async with connect(mcp, "memory"):
            pass
    assert seam in chain and not any(isinstance(entry, PollLane) for entry in chain)
    assert extension.poll_lane is None


TRACE = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
TOKENS = {
    "alice-token": {"client_id": "app", "sub": "alice", "scopes": []},
    "bob-token": {"client_id": "app", "sub": "bob", "scopes": []},
}


async def test_each_caller_sees_only_its_own_tasks_past_the_seam_and_traced_polls_keep_it() -> None:
    """Authenticated over HTTP: the owner's poll answers, another principal's is -32602, the
    same past the seam as through it; a poll carrying a trace context in `_meta` goes
    through the seam, which makes that context current for the handler."""
    mcp = FastMCP("owned", auth=StaticTokenVerifier(tokens=TOKENS))
    extension = TasksExtension()
    mcp.add_extension(extension)

    @mcp.tool(task=True)
    async def job() -> str:
        return "done"

    alice = {"Authorization": "Bearer alice-token"}
    bob = {"Authorization": "Bearer bob-token"}

    async def polls(wire: Wire, task_id: str, meta: dict[str, Any]) -> list[Any]:
        out: list[Any] = []
        for headers in (alice, bob):
            try:
                params = {"taskId": task_id, "_meta": meta}
                out.append((await wire.request("tasks/get", params, headers=headers))["status"])
            except WireError as error:
                out.append(error.code)
        return out

    with anyio.fail_after(30):
        async with http_server(mcp) as url, http_wire_for(url) as wire:
            task_id = (await wire.call_tool("job", headers=alice))["taskId"]
            await wire.wait(task_id, headers=alice)
            lane = extension.poll_lane
            assert lane is not None
            taken, direct = lane.taken, answered_directly(extension)
            past = await polls(wire, task_id, {})
            assert lane.taken == taken and answered_directly(extension) - direct == 2
            traced = await polls(wire, task_id, TRACE)
            assert lane.taken == taken  # both went through the seam
            assert answered_directly(extension) - direct == 2
            mcp.add_middleware(Watcher())
            through = await polls(wire, task_id, {})
            assert lane.taken == taken and answered_directly(extension) - direct == 2
    assert past == traced == through == ["completed", -32602]
