"""Streamable HTTP for task clients: survive a server closing idle keep-alive connections.

    from fastmcp import Client
    from fastmcp_tasks.client.http import TasksHttpTransport

    async with Client(TasksHttpTransport(url)) as client:
        result = await client.call_tool("render", {"pages": 3})

Polling `tasks/get` every few seconds reuses pooled HTTP connections, and a
server drops idle ones (uvicorn after 5 s by default, the same as the default
`pollIntervalMs` of many servers). A poll sent on a connection the server is
closing fails with `httpx2.RemoteProtocolError` or `ReadError`. The mcp SDK's
streamable HTTP client does not retry a failed POST: the error escapes its
task group, FastMCP's session task dies and every later request on that
`Client` fails, so the caller cannot retry at the request level.

`RetryingTransport` wraps the httpx2 transport and retries, with backoff, the
POSTs whose `Mcp-Method` header names a request that is safe to send twice
(`tasks/get`, `ping`, the `*/list` reads, `resources/read`): on a connection
or protocol error before the response is complete (their body is read
whole, so a connection lost mid-body is retried too). `tasks/update`,
`tasks/cancel`, `tools/call` and listen streams are never resent.
`tasks_http_client` is a drop-in `httpx_client_factory` built on it, and
`TasksHttpTransport` a `StreamableHttpTransport` that uses it by default.
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx2
from fastmcp.client.transports import StreamableHttpTransport

from fastmcp_tasks.client.watch import DEFAULT_RETRY, RetryPolicy

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


class RetryingTransport(httpx2.AsyncBaseTransport):
    """An httpx2 transport that resends retry-safe MCP requests whose connection failed.

    Args:
        inner: the transport that sends (default: a fresh `httpx2.AsyncHTTPTransport()`).
        retry: the tries and backoff (`RetryPolicy`: 0.1 s doubling up to 2 s, 5 tries).
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

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.method != "POST" or request.headers.get("mcp-method") not in self.methods:
            return await self.inner.handle_async_request(request)
        for delay in [*self.retry.delays(), None]:
            try:
                response = await self.inner.handle_async_request(request)
                try:
                    body = b"".join([chunk async for chunk in response.aiter_raw()])
                finally:
                    await response.aclose()
            except RETRYABLE_ERRORS:
                if delay is None:
                    raise
                self.retries += 1
                await anyio.sleep(delay)
                continue
            return httpx2.Response(
                response.status_code,
                headers=response.headers,
                content=body,
                extensions=response.extensions,
                request=request,
            )
        raise AssertionError("unreachable")  # pragma: no cover

    async def aclose(self) -> None:
        await self.inner.aclose()


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
