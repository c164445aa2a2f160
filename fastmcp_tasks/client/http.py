"""Streamable HTTP for task clients: a connection failure fails one request, never the client.

    from fastmcp import Client
    from fastmcp_tasks.client.http import TasksHttpTransport

    async with Client(TasksHttpTransport(url)) as client:
        result = await client.call_tool("render", {"pages": 3})

The mcp SDK's streamable HTTP client sends each request as its own POST. When a
POST fails in the transport (the server restarts and refuses connections, a proxy
drops the connection, the server closes an idle keep-alive connection under a
poll), the error escapes the SDK's task group: FastMCP's session task dies, every
later request on that `Client` fails, and leaving `async with Client(...)`
re-raises the connection error. A durable task cannot be followed through that.

`RetryingTransport` wraps the httpx2 transport so that never happens:

- the POSTs whose `Mcp-Method` names a request that is safe to send twice
  (`tasks/get`, `ping`, the `*/list` reads, `resources/read`) are resent, with
  backoff, on a connection or protocol error before the response is complete
  (their body is read whole, so a connection lost mid-body is retried too), and
  on a proxy's 502, 503 or 504;
- when a request still fails (or is one that must not be sent twice: `tools/call`,
  `tasks/update`, `tasks/cancel`), the transport answers it with a JSON-RPC error of
  its own (`transport_failure()`): the caller of that one request gets an `MCPError`
  whose `data["fastmcp-tasks/transport"]` says what failed and whether the request
  may have reached the server (`"delivered": "no"` when the connection was never
  made). The session, and every other request on it, carries on; the task
  watchers (`client.watch`) retry such errors for their reconnect window.

The handshake (`initialize`, `server/discover`) is left alone: a server that cannot
be reached at connect time fails `async with Client(...)` as before. Listen streams
and other Server-Sent Events responses are passed through unbuffered (the SDK
resolves a broken stream itself).

Importing `fastmcp_tasks` makes this FastMCP's default HTTP client
(`tasks_http_client`, see `_compat.install_default_http_client`): a plain
`Client("http://...")` gets it without asking. A `Client` given its own
`httpx_client_factory` keeps it; `TasksHttpTransport` is a `StreamableHttpTransport`
that uses `tasks_http_client` by default.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import anyio
import httpx2
from fastmcp.client.transports import StreamableHttpTransport
from mcp_types import CONNECTION_CLOSED

from fastmcp_tasks import _compat
from fastmcp_tasks.client.resend import send_tool_call, spawn_on_loop
from fastmcp_tasks.client.watch import DEFAULT_RETRY, TRANSPORT_ERROR_KEY, RetryPolicy
from fastmcp_tasks.wire.names import EXPERIMENTAL_CAPABILITY

#: The MCP methods a dropped connection may resend: they change nothing on the server.
RETRY_SAFE_METHODS = frozenset(
    {
        "tasks/get",
        "ping",
        "tools/list",
        "prompts/list",
        "resources/list",
        "resources/templates/list",
        "resources/read",
    }
)
#: The transport failures a new connection may cure.
RETRYABLE_ERRORS: tuple[type[Exception], ...] = (
    httpx2.NetworkError,  # ConnectError, ReadError, WriteError, CloseError
    httpx2.RemoteProtocolError,  # "Server disconnected without sending a response."
    httpx2.ConnectTimeout,
)
#: Failures after which the request never reached the server.
UNSENT_ERRORS: tuple[type[Exception], ...] = (httpx2.ConnectError, httpx2.ConnectTimeout)
#: What a proxy answers while the server behind it is down or restarting.
GATEWAY_STATUSES = frozenset({502, 503, 504})
#: The handshake: a failure there is the connect's own, raised by `async with Client`.
HANDSHAKE_METHODS = frozenset({"initialize", "server/discover"})


def transport_failure(
    request: httpx2.Request, what: str, *, delivered: bool | None
) -> httpx2.Response:
    """The JSON-RPC error a request gets when its POST failed in the transport.

    The SDK hands a JSON error body of a non-2xx response to the request's caller as
    an `MCPError` (with the request's own id); its session is not touched.

    Args:
        request: the failed POST.
        what: what failed, one line (`ConnectError: All connection attempts failed`).
        delivered: `False` when the request never reached the server, `None` when it
            may have (the reply was lost).
    """
    reached = "no" if delivered is False else "unknown"
    message = (
        f"Could not reach the MCP server: {what}"
        if delivered is False
        else f"Lost the connection to the MCP server: {what}"
    )
    body = {
        "jsonrpc": "2.0",
        "id": None,
        "error": {
            "code": CONNECTION_CLOSED,
            "message": message,
            "data": {TRANSPORT_ERROR_KEY: {"error": what, "delivered": reached}},
        },
    }
    return httpx2.Response(
        503,
        headers={"content-type": "application/json"},
        content=json.dumps(body).encode(),
        request=request,
    )


def describe(error: BaseException) -> str:
    """One line: the exception's type and message."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


class RetryingTransport(httpx2.AsyncBaseTransport):
    """An httpx2 transport that resends safe MCP requests and contains every failure.

    Args:
        inner: the transport that sends (default: a fresh `httpx2.AsyncHTTPTransport()`).
        retry: the tries and backoff of a safe request (`RetryPolicy`: 0.1 s doubling
            up to 2 s, 5 tries).
        methods: the `Mcp-Method` values that may be resent.
    """

    def __init__(
        self,
        inner: httpx2.AsyncBaseTransport | None = None,
        *,
        retry: RetryPolicy = DEFAULT_RETRY,
        methods: frozenset[str] = RETRY_SAFE_METHODS,
    ) -> None:
        self.inner = inner if inner is not None else httpx2.AsyncHTTPTransport()
        self.retry = retry
        self.methods = methods
        self.retries = 0  # resends so far, for observability and tests
        self.failures = 0  # requests answered with `transport_failure`
        #: the server said in its handshake that it honours idempotency keys
        self.honours_keys = False
        #: tasks of abandoned `tools/call`s this transport cancelled (`client.resend`)
        self.abandoned: list[str] = []
        self._background: set[asyncio.Task[None]] = set()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        method = request.headers.get("mcp-method")
        if request.method != "POST" or method is None:
            return await self.inner.handle_async_request(request)
        if method in HANDSHAKE_METHODS:
            return await self._handshake(request)
        if method == "tools/call" and self.honours_keys:
            return await send_tool_call(self, request)
        return await self.deliver(request, safe=method in self.methods)

    async def deliver(self, request: httpx2.Request, *, safe: bool) -> httpx2.Response:
        """Send one request: resent a few times if `safe`; a final failure is its own error."""
        delays: list[float | None] = [*self.retry.delays(), None] if safe else [None]
        for delay in delays:
            try:
                response = await self._send(request, buffer=safe)
            except (httpx2.TransportError, OSError) as error:
                retryable = isinstance(error, RETRYABLE_ERRORS)
                if delay is None or not retryable:
                    self.failures += 1
                    unsent = isinstance(error, UNSENT_ERRORS)
                    return transport_failure(
                        request, describe(error), delivered=False if unsent else None
                    )
                self.retries += 1
                await anyio.sleep(delay)
                continue
            if response.status_code in GATEWAY_STATUSES and not is_json(response):
                if delay is not None:
                    await response.aclose()
                    self.retries += 1
                    await anyio.sleep(delay)
                    continue
                await response.aclose()
                self.failures += 1
                status = f"HTTP {response.status_code} from a proxy or gateway"
                return transport_failure(request, status, delivered=None)
            return response
        raise AssertionError("unreachable")  # pragma: no cover

    async def _handshake(self, request: httpx2.Request) -> httpx2.Response:
        """`initialize` / `server/discover`: failures are the connect's; note what it says."""
        response = await self.inner.handle_async_request(request)
        if not is_json(response):
            return response
        response = await self._whole(request, response)
        self.honours_keys = honours_idempotency_keys(response.content)
        return response

    def spawn(self, coroutine: Any) -> None:
        """Run `coroutine` in the background, beyond the request that started it."""
        spawn_on_loop(coroutine, self._background)

    async def _send(self, request: httpx2.Request, *, buffer: bool) -> httpx2.Response:
        """Send once; read a JSON (or any, with `buffer`) body whole, so a lost body fails here."""
        response = await self.inner.handle_async_request(request)
        if not (buffer or is_json(response)):
            return response  # an event stream: the SDK reads it and resolves a broken one
        return await self._whole(request, response)

    @staticmethod
    async def _whole(request: httpx2.Request, response: httpx2.Response) -> httpx2.Response:
        """`response` with its body read."""
        try:
            body = b"".join([chunk async for chunk in response.aiter_raw()])
        except httpx2.StreamConsumed:  # a response made whole in memory (a mock transport)
            body = response.content
        finally:
            await response.aclose()
        return httpx2.Response(
            response.status_code,
            headers=response.headers,
            content=body,
            extensions=response.extensions,
            request=request,
        )

    async def aclose(self) -> None:
        await self.inner.aclose()


def honours_idempotency_keys(handshake: bytes) -> bool:
    """Whether a handshake's answer advertises `experimental["fastmcp-tasks"]["idempotencyKey"]`."""
    try:
        result = json.loads(handshake).get("result") or {}
        ours = (
            (result.get("capabilities") or {}).get("experimental", {}).get(EXPERIMENTAL_CAPABILITY)
        )
    except (ValueError, AttributeError):
        return False
    return isinstance(ours, dict) and ours.get("idempotencyKey") is True


def is_json(response: httpx2.Response) -> bool:
    """Whether a response's body is JSON (read whole) rather than an event stream."""
    return response.headers.get("content-type", "").lower().startswith("application/json")


def tasks_http_client(
    headers: dict[str, str] | None = None,
    timeout: httpx2.Timeout | None = None,
    auth: httpx2.Auth | None = None,
    **options: Any,
) -> httpx2.AsyncClient:
    """An `httpx2.AsyncClient` over `RetryingTransport`, for `httpx_client_factory=`.

    Takes what `StreamableHttpTransport` passes its factory (and the SDK's default
    timeouts: 30 s, 300 s to read). Extra `options` go to `httpx2.AsyncClient`,
    except `verify`, `cert` and `trust_env`, which configure the inner transport.
    """
    transport_options = {k: options.pop(k) for k in ("verify", "cert", "trust_env") if k in options}
    inner = httpx2.AsyncHTTPTransport(**transport_options)
    options.pop("follow_redirects", None)  # the SDK follows same-origin redirects itself
    return httpx2.AsyncClient(
        transport=RetryingTransport(inner),
        headers=headers,
        timeout=timeout if timeout is not None else httpx2.Timeout(30.0, read=300.0),
        auth=auth,
        **options,
    )


def install_as_default() -> None:
    """Make `tasks_http_client` FastMCP's default HTTP client (done on import of `fastmcp_tasks`).

    A `Client("http://...")` without an `httpx_client_factory` of its own then keeps its
    session through connection failures: each failed request gets its own error.
    """
    _compat.install_default_http_client(tasks_http_client)


class TasksHttpTransport(StreamableHttpTransport):
    """`StreamableHttpTransport` whose HTTP client retries dropped `tasks/get` polls.

    Takes the same arguments; `httpx_client_factory` defaults to `tasks_http_client`
    (and `verify`, when given, configures it).
    """

    def __init__(self, url: str, **options: Any) -> None:
        if "httpx_client_factory" not in options:
            verify = options.pop("verify", None)
            extra = {} if verify is None else {"verify": verify}

            def factory(**kwargs: Any) -> httpx2.AsyncClient:
                return tasks_http_client(**kwargs, **extra)

            options["httpx_client_factory"] = factory
        super().__init__(url, **options)
