"""Client robustness over HTTP: dropped polls are retried, JSON-RPC errors are not.

The mcp SDK's streamable HTTP client lets a failed POST escape its task group,
which ends the whole FastMCP session (`test_a_dropped_poll_ends_a_plain_session`).
`RetryingTransport` resends retry-safe requests before the SDK sees the error;
`get_task_state` retries transport errors that do reach the session.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx2
import pytest
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport
from mcp.shared.exceptions import MCPError

from fastmcp_tasks.client import TasksClientExtension
from fastmcp_tasks.client.watch import RetryPolicy, get_task_state
from fastmcp_tasks.client_http import RetryingTransport, TasksHttpTransport, tasks_http_client
from fastmcp_tasks.errors import TaskUnreachable
from fastmcp_tasks.wire.models import GetTaskRequest, TaskIdParams, TaskState
from tests.private_servers import tcp_relay
from tests.servers import napping
from tests.test_durability import Server
from tests.wire import free_port, http_server

pytestmark = pytest.mark.anyio

QUICK = RetryPolicy(attempts=3, first_delay=0.01, max_delay=0.02)


class Flaky(httpx2.AsyncBaseTransport):
    """Fails the first `fails` POSTs of `method`: before any response, or while reading it."""

    def __init__(self, method: str, fails: int, *, where: str = "connect") -> None:
        self.inner = httpx2.AsyncHTTPTransport()
        self.method, self.fails, self.where = method, fails, where
        self.sent: list[str] = []

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        method = request.headers.get("mcp-method", "")
        self.sent.append(method)
        if method != self.method or self.fails <= 0:
            return await self.inner.handle_async_request(request)
        self.fails -= 1
        if self.where == "connect":
            raise httpx2.RemoteProtocolError("Server disconnected without sending a response.")
        response = await self.inner.handle_async_request(request)

        class Broken(httpx2.AsyncByteStream):
            async def __aiter__(self) -> Any:
                raise httpx2.ReadError("connection reset while reading the body")
                yield b""  # pragma: no cover

            async def aclose(self) -> None:
                await response.aclose()

        return httpx2.Response(response.status_code, headers=response.headers, stream=Broken())

    async def aclose(self) -> None:
        await self.inner.aclose()


def factory_over(transport: httpx2.AsyncBaseTransport) -> Callable[..., httpx2.AsyncClient]:
    def factory(**kwargs: Any) -> httpx2.AsyncClient:
        kwargs.pop("follow_redirects", None)
        kwargs.setdefault("timeout", httpx2.Timeout(30.0, read=300.0))
        return httpx2.AsyncClient(transport=transport, **kwargs)

    return factory


@pytest.mark.parametrize("where", ["connect", "body"])
async def test_dropped_polls_are_resent_and_the_task_completes(where: str) -> None:
    mcp, _ = napping(timedelta(milliseconds=50), 0.3)
    flaky = Flaky("tasks/get", 2, where=where)
    retrying = RetryingTransport(flaky)
    async with http_server(mcp) as url:
        transport = StreamableHttpTransport(url, httpx_client_factory=factory_over(retrying))
        with anyio.fail_after(10):
            async with Client(transport, extensions=[TasksClientExtension(push=False)]) as c:
                assert (await c.call_tool("nap", {})).data == "rested"
                assert await c.list_tools()  # the session lived through it
    assert retrying.retries == 2
    assert flaky.sent.count("tasks/get") >= 3


async def test_a_dropped_poll_ends_a_plain_session() -> None:
    """What the SDK does alone: the transport error escapes and the session is gone."""
    mcp, _ = napping(timedelta(milliseconds=50), 0.3)
    caught: Exception | None = None
    async with http_server(mcp) as url:
        plain = StreamableHttpTransport(
            url, httpx_client_factory=factory_over(Flaky("tasks/get", 1))
        )
        with anyio.fail_after(10):
            try:
                async with Client(plain, extensions=[TasksClientExtension(push=False)]) as client:
                    await client.call_tool("nap", {})
            except Exception as exc:  # an ExceptionGroup from the SDK's task groups
                caught = exc
    assert caught is not None and _contains(caught, httpx2.RemoteProtocolError)


def _contains(exc: BaseException, kind: type[BaseException]) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return any(_contains(inner, kind) for inner in exc.exceptions)
    return isinstance(exc, kind)


def transport_error(response: httpx2.Response) -> dict[str, Any]:
    """The JSON-RPC error `RetryingTransport` answered a failed POST with."""
    assert response.status_code == 503
    error: dict[str, Any] = response.json()["error"]
    assert error["code"] == -32000
    return error


async def test_retries_are_bounded_then_the_request_gets_its_own_error() -> None:
    flaky = Flaky("tasks/get", 99)
    retrying = RetryingTransport(flaky, retry=QUICK)
    async with httpx2.AsyncClient(transport=retrying) as http:
        answer = await http.post(
            "http://127.0.0.1:9/mcp", json={}, headers={"Mcp-Method": "tasks/get"}
        )
    error = transport_error(answer)
    assert error["message"] == (
        "Lost the connection to the MCP server: "
        "RemoteProtocolError: Server disconnected without sending a response."
    )
    assert error["data"]["fastmcp-tasks/transport"]["delivered"] == "unknown"
    assert flaky.sent == ["tasks/get"] * 3 and retrying.retries == 2 and retrying.failures == 1


@pytest.mark.parametrize("method", ["tasks/update", "tasks/cancel", "tools/call"])
async def test_requests_with_effects_are_never_resent(method: str) -> None:
    flaky = Flaky(method, 99)
    retrying = RetryingTransport(flaky, retry=QUICK)
    async with httpx2.AsyncClient(transport=retrying) as http:
        answer = await http.post("http://127.0.0.1:9/mcp", json={}, headers={"Mcp-Method": method})
    assert transport_error(answer)["data"]["fastmcp-tasks/transport"]["delivered"] == "unknown"
    assert flaky.sent == [method] and retrying.retries == 0


async def test_a_refused_connection_says_the_request_never_arrived() -> None:
    retrying = RetryingTransport(retry=QUICK)
    async with httpx2.AsyncClient(transport=retrying) as http:
        for method in ("tools/call", "tasks/get"):
            answer = await http.post(
                f"http://127.0.0.1:{free_port()}/mcp", json={}, headers={"Mcp-Method": method}
            )
            error = transport_error(answer)
            assert error["message"].startswith("Could not reach the MCP server: ConnectError")
            assert error["data"]["fastmcp-tasks/transport"]["delivered"] == "no"


async def test_the_handshake_still_fails_the_connect() -> None:
    retrying = RetryingTransport(retry=QUICK)
    async with httpx2.AsyncClient(transport=retrying) as http:
        with pytest.raises(httpx2.ConnectError):
            await http.post(
                f"http://127.0.0.1:{free_port()}/mcp",
                json={},
                headers={"Mcp-Method": "server/discover"},
            )


async def test_a_json_rpc_error_is_not_retried() -> None:
    mcp, gets = napping(timedelta(milliseconds=50), 0.1)
    async with http_server(mcp) as url, Client(TasksHttpTransport(url)) as client:
        with pytest.raises(MCPError):
            await get_task_state(client.session, "no-such-task", retry=QUICK)
    assert len(gets) == 1


class DroppingSession:
    """A session whose first `fails` requests fail in the transport, then go through."""

    def __init__(self, session: Any, fails: int, error: BaseException) -> None:
        self.session, self.fails, self.error, self.calls = session, fails, error, 0

    async def send_request(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.fails > 0:
            self.fails -= 1
            raise self.error
        return await self.session.send_request(*args, **kwargs)


async def test_get_task_state_retries_transport_errors_but_not_mcp_errors() -> None:
    mcp, _ = napping(timedelta(milliseconds=50), 0.1)
    async with Client(mcp) as client:
        created = await client.session.call_tool("nap", {}, allow_claimed=True)
        task_id = created.task_id  # type: ignore[union-attr]
        flaky = DroppingSession(client.session, 2, httpx2.ReadError("reset"))
        state = await get_task_state(flaky, task_id, retry=QUICK)  # type: ignore[arg-type]
        assert state["taskId"] == task_id and flaky.calls == 3
        broken = DroppingSession(client.session, 99, ConnectionResetError("reset"))
        with pytest.raises(TaskUnreachable) as gave_up:
            await get_task_state(broken, task_id, retry=QUICK, reconnect_timeout=0)  # type: ignore[arg-type]
        assert broken.calls == 3
        assert gave_up.value.task_id == task_id
        assert gave_up.value.last_error == "ConnectionResetError: reset"
        assert isinstance(gave_up.value.__cause__, ConnectionResetError)
        refused = DroppingSession(client.session, 99, MCPError(code=-32602, message="unknown"))
        with pytest.raises(MCPError):
            await get_task_state(refused, task_id, retry=QUICK)  # type: ignore[arg-type]
        assert refused.calls == 1
        # errors the SDK makes up for a broken response stream are the transport's, not
        # the server's answer; a pacing refusal says when to come back
        for made_up in (
            MCPError(code=-32000, message="SSE stream ended without a response"),
            MCPError(code=-32603, message="Server returned an error response"),
            MCPError(code=-32000, message="Lost", data={"fastmcp-tasks/transport": {}}),
            MCPError(code=-32603, message="Task store unavailable", data={"retryable": True}),
            MCPError(code=-32700, message="Failed to parse JSON response: truncated"),
            MCPError(code=-32000, message="Polling too fast", data={"retryAfterMs": 20}),
        ):
            stream_broke = DroppingSession(client.session, 1, made_up)
            state = await get_task_state(stream_broke, task_id, retry=QUICK)  # type: ignore[arg-type]
            assert state["taskId"] == task_id and stream_broke.calls == 2
        server_said = DroppingSession(client.session, 99, MCPError(code=-32000, message="SSE?"))
        with pytest.raises(MCPError):
            await get_task_state(server_said, task_id, retry=QUICK)  # type: ignore[arg-type]
        assert server_said.calls == 1


class KeepAliveExpiry:
    """A TCP proxy in front of uvicorn whose keep-alive timer always wins the race.

    A request arriving on a connection that already answered and then sat idle for
    `idle` seconds is read and the connection closed unanswered: what uvicorn does
    when `timeout_keep_alive` fires as a poll lands, here every time, not by chance.
    """

    def __init__(self, upstream: str, idle: float) -> None:
        self.upstream = httpx2.URL(upstream)
        self.idle, self.dropped = idle, 0

    def serving(self) -> AbstractAsyncContextManager[str]:
        """Serve the proxy; yield its URL."""
        return tcp_relay(self.upstream, self._relay)

    async def _relay(self, client: anyio.abc.SocketStream) -> None:
        last, answered = anyio.current_time(), False
        upstream = await anyio.connect_tcp("127.0.0.1", self.upstream.port or 80)
        async with client, upstream, anyio.create_task_group() as group:

            async def requests() -> None:
                nonlocal last
                async for chunk in client:
                    if answered and anyio.current_time() - last >= self.idle:
                        self.dropped += 1  # the timer fired as the request landed
                        break
                    last = anyio.current_time()
                    await upstream.send(chunk)
                group.cancel_scope.cancel()

            async def answers() -> None:
                nonlocal last, answered
                async for chunk in upstream:
                    last, answered = anyio.current_time(), True
                    await client.send(chunk)
                group.cancel_scope.cancel()

            group.start_soon(requests)
            group.start_soon(answers)


async def test_polls_landing_as_the_keep_alive_expires_are_resent() -> None:
    """Every poll meets a connection the server closes as it lands; each is resent once."""
    mcp, gets = napping(timedelta(milliseconds=400), 1.5)
    clients: list[httpx2.AsyncClient] = []

    def factory(**kwargs: Any) -> httpx2.AsyncClient:
        clients.append(tasks_http_client(**kwargs))  # what TasksHttpTransport builds
        return clients[-1]

    async with http_server(mcp) as url:
        expiry = KeepAliveExpiry(url, idle=0.3)  # polls come every 0.4 s
        async with expiry.serving() as proxied:
            with anyio.fail_after(15):
                transport = TasksHttpTransport(proxied, httpx_client_factory=factory)
                tasks = TasksClientExtension(push=False)
                async with Client(transport, extensions=[tasks]) as client:
                    assert (await client.call_tool("nap", {})).data == "rested"
                    assert await client.list_tools()  # the session lived through it
    retries = sum(c._transport.retries for c in clients)  # type: ignore[attr-defined]
    assert expiry.dropped >= 2, "no poll met an expiring connection: the race never ran"
    assert retries == expiry.dropped
    assert len(gets) >= 2  # and the resent polls reached the server


def test_tasks_http_client_takes_what_fastmcp_passes() -> None:
    client = tasks_http_client(headers={"x": "1"}, auth=None, follow_redirects=True, verify=False)
    assert isinstance(client._transport, RetryingTransport)
    assert client.headers["x"] == "1" and client.timeout.read == 300.0


class Gateway(httpx2.AsyncBaseTransport):
    """A proxy whose upstream is down: a non-JSON 502/503/504 page for the first `fails`."""

    def __init__(self, fails: int, status: int) -> None:
        self.fails, self.status, self.sent = fails, status, 0

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        self.sent += 1
        if self.fails > 0:
            self.fails -= 1
            return httpx2.Response(self.status, text="<html>Bad Gateway</html>")
        return httpx2.Response(200, json={"jsonrpc": "2.0", "id": 1, "result": {}})


@pytest.mark.parametrize("status", [502, 503, 504])
async def test_a_gateway_error_is_resent_for_safe_requests_and_contained_for_others(
    status: int,
) -> None:
    safe = Gateway(2, status)
    async with httpx2.AsyncClient(transport=RetryingTransport(safe, retry=QUICK)) as http:
        answer = await http.post("http://proxy/mcp", json={}, headers={"Mcp-Method": "tasks/get"})
    assert answer.status_code == 200 and safe.sent == 3
    effect = Gateway(1, status)
    async with httpx2.AsyncClient(transport=RetryingTransport(effect, retry=QUICK)) as http:
        answer = await http.post("http://proxy/mcp", json={}, headers={"Mcp-Method": "tools/call"})
    error = transport_error(answer)
    assert error["data"]["fastmcp-tasks/transport"] == {
        "error": f"HTTP {status} from a proxy or gateway",
        "delivered": "unknown",
    }
    assert effect.sent == 1  # never resent


async def test_a_plain_client_keeps_its_session_when_the_server_is_gone(tmp_path: Path) -> None:
    """Importing fastmcp_tasks gives `Client(url)` a transport whose failures stay per request:
    each request to a server that is gone gets its own error, the session lives on, and
    leaving `async with Client(...)` raises nothing of its own."""
    (tmp_path / "markers").mkdir()
    server = Server(tmp_path / "tasks.db", tmp_path / "markers")
    try:
        await server.ready()
        async with Client(server.url) as client:
            assert await client.list_tools()
            server.kill()  # the server is gone
            for _ in range(2):
                with pytest.raises(MCPError) as lost:
                    await client.session.send_request(
                        GetTaskRequest(params=TaskIdParams(taskId="any")), TaskState
                    )
                transport = lost.value.error.data["fastmcp-tasks/transport"]
                assert transport["delivered"] == "no"
                assert transport["error"].startswith("ConnectError")
    finally:
        server.stop()
