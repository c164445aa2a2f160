"""Following one task from the client: `tasks/get` with retries, and pushed states.

Both ways of waiting for a task share this module: the transparent resolver
(`TasksClientExtension`, behind `Client.call_tool()`) and task handles
(`ToolTask.result()`, `wait()`, `updates()`).

`get_task_state()` sends one `tasks/get` (with `Mcp-Name: <taskId>`, C73) and
keeps resending it while the way to the server is down: a transport error (the
connection refused or reset), the error a `client.http.RetryingTransport` answers
for a failed POST (`data["fastmcp-tasks/transport"]`), the SDK's stand-ins for a
broken stream or a proxy's 5xx, and a server error that says it is retryable
(`data.retryable`, `data.retryAfterMs`, e.g. "Task store unavailable"). It waits
0.1 s, doubling up to `RetryPolicy.max_delay` with jitter (never sooner than a
`retryAfterMs`), for as long as the reconnect window lasts (`reconnect_timeout`, 10
minutes by default, `None` for no limit; 0 for `RetryPolicy.attempts` quick tries),
then raises `TaskUnreachable`: the task id, the last error and how to resume. Any
other JSON-RPC error is the server's answer about the task: final.

`TaskWatch` yields the task's next state: a pushed `notifications/tasks` when
the server serves `subscriptions/listen` (C72), otherwise a poll no sooner than
the latest `pollIntervalMs` (C62). While push works, a slow safety poll still
runs every `SAFETY_POLL` seconds. The subscription runs as its own asyncio
task (FastMCP's client is asyncio-only), so a `TaskWatch` may be held across
the `yield`s of an async generator and closed from any task. A listen stream
that broke (the server restarted) is opened again after the next good poll.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from dataclasses import dataclass
from typing import Protocol, cast

import anyio
import httpx2
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INTERNAL_ERROR,
    SubscriptionFilter,
    SubscriptionsListenRequest,
    SubscriptionsListenRequestParams,
    SubscriptionsListenResult,
)

from fastmcp_tasks import _compat
from fastmcp_tasks.errors import TaskUnreachable
from fastmcp_tasks.wire.models import GetTaskRequest, TaskIdParams, TaskState, TaskStateDict

#: Poll interval used when the server gives none (the spec's default is the server's).
DEFAULT_POLL_SECONDS = 1.0
#: While push works, polls still happen at least this far apart, as a safety net.
SAFETY_POLL = 30.0
#: How long one listen stream may stay open.
LISTEN_TIMEOUT = 24 * 3600.0
#: The exceptions a retry may cure: the connection failed, the server did not answer it.
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (httpx2.TransportError, OSError)
#: `error.data` key of the JSON-RPC error `client.http.RetryingTransport` answers a
#: request with when its POST failed in the transport.
TRANSPORT_ERROR_KEY = "fastmcp-tasks/transport"
#: How long a watcher keeps trying to reach the server about a task by default.
DEFAULT_RECONNECT_TIMEOUT = 600.0
#: The SDK's stand-in for a non-JSON 4xx/5xx answer (e.g. a proxy's 502 page).
SDK_HTTP_ERROR = "Server returned an error response"


class PushSource(Protocol):
    """Where pushed task states come from: the client's `TasksClientExtension`."""

    def add_watcher(self, task_id: str, inbox: MemoryObjectSendStream[TaskStateDict]) -> None:
        """Deliver the task's pushed `notifications/tasks` states to `inbox`."""

    def remove_watcher(self, task_id: str, inbox: MemoryObjectSendStream[TaskStateDict]) -> None:
        """Stop delivering the task's pushed states to `inbox`."""


@dataclass(frozen=True)
class RetryPolicy:
    """How often a transiently failing `tasks/get` is retried, and how far apart.

    Args:
        attempts: tries in all (the first one included); the last error surfaces.
        first_delay: seconds before the first retry; each later one waits twice as long.
        max_delay: the longest wait between two tries.
    """

    attempts: int = 5
    first_delay: float = 0.1
    max_delay: float = 2.0

    def delays(self) -> list[float]:
        """The waits between tries: `attempts - 1` of them."""
        return [
            min(self.first_delay * 2**n, self.max_delay) for n in range(max(self.attempts - 1, 0))
        ]


DEFAULT_RETRY = RetryPolicy()


def transient_error(error: MCPError) -> float | None:
    """Seconds to wait before resending a request that got `error`, or `None`: final.

    Some JSON-RPC errors are not the server's answer about the task: the one a
    `RetryingTransport` answers for a failed POST (`data["fastmcp-tasks/transport"]`),
    the ones the SDK makes up when an HTTP response stream breaks (-32000 "SSE stream
    ...", -32700 "Failed to parse JSON response ...") or a proxy answers a non-JSON
    5xx (-32603 "Server returned an error response", no data), and a server error
    that says when, or that, to come back (`data.retryAfterMs`, C19; `data.retryable`,
    as "Task store unavailable" does). Every other error is final.
    """
    data = error.error
    message = data.message or ""
    extra = data.data if isinstance(data.data, dict) else {}
    if TRANSPORT_ERROR_KEY in extra:
        return 0.0
    prefix = _compat.SDK_TRANSPORT_ERRORS.get(data.code)
    if prefix is not None and message.startswith(prefix):
        return 0.0
    if data.code == INTERNAL_ERROR and message == SDK_HTTP_ERROR and data.data is None:
        return 0.0
    retry_after = extra.get("retryAfterMs")
    if isinstance(retry_after, int) and 0 < retry_after <= 60_000:
        return retry_after / 1000
    if extra.get("retryable") is True:
        return 0.0
    return None


def describe_error(error: BaseException) -> str:
    """One line for a person: the JSON-RPC message, or the exception's type and text."""
    if isinstance(error, MCPError):
        return f"{error.error.message} (error {error.error.code})"
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


class Outage:
    """One stretch of failed tries: when to try again, and when to give up.

    Args:
        retry: tries `retry.first_delay` doubling up to `retry.max_delay` apart (each a
            random 50-100 % of that, so many clients cut off together do not come back
            together); with a window of 0, `retry.attempts` tries in all.
        reconnect_timeout: keep trying for this many seconds after the first failure
            (`None`: as long as it takes; 0: `retry.attempts` quick tries).
    """

    def __init__(self, retry: RetryPolicy, reconnect_timeout: float | None) -> None:
        self.retry = retry
        self.reconnect_timeout = reconnect_timeout
        self.started = time.monotonic()
        self.tries = 0

    @property
    def waited(self) -> float:
        return time.monotonic() - self.started

    def next_delay(self, at_least: float = 0.0) -> float | None:
        """Seconds before the next try, or `None` once the window is spent (with a window
        of 0, once `retry.attempts` tries failed)."""
        self.tries += 1
        window = self.reconnect_timeout
        if window is not None and (
            self.waited >= window if window > 0 else self.tries >= self.retry.attempts
        ):
            return None
        ceiling = min(self.retry.first_delay * 2 ** min(self.tries - 1, 32), self.retry.max_delay)
        delay: float = max(ceiling * random.uniform(0.5, 1.0), at_least)
        if window is not None and window > 0:
            delay = min(delay, max(window - self.waited, 0.0))
        return delay


async def get_task_state(
    session: ClientSession,
    task_id: str,
    *,
    read_timeout: float | None = None,
    retry: RetryPolicy = DEFAULT_RETRY,
    reconnect_timeout: float | None = DEFAULT_RECONNECT_TIMEOUT,
    server: str | None = None,
) -> TaskStateDict:
    """One `tasks/get`, resent while the server cannot be reached; the DetailedTask fields.

    Args:
        session: the connected client session.
        task_id: the task.
        read_timeout: the read timeout of each try (`None`: the session's).
        retry: the least number of tries, and how far apart.
        reconnect_timeout: how long to keep trying after the first failure (`None`: no limit).
        server: the server's URL or name, for the resume hint of `TaskUnreachable`.

    Raises:
        MCPError: the server's JSON-RPC error about the task (never retried, except the
            transient ones of `transient_error`).
        TaskUnreachable: the tries and the reconnect window ran out.
    """
    timeout = None if read_timeout in (None, math.inf) else read_timeout
    request = GetTaskRequest(params=TaskIdParams(taskId=task_id))
    outage: Outage | None = None
    while True:
        try:
            result = await session.send_request(
                request, TaskState, request_read_timeout_seconds=timeout
            )
        except MCPError as exc:
            wait = transient_error(exc)
            if wait is None:
                raise
            failure: BaseException = exc
        except TRANSIENT_ERRORS as exc:
            wait, failure = 0.0, exc
        else:
            state = result.model_dump(by_alias=True, exclude_none=False)
            state.pop("resultType", None)
            state.pop("_meta", None)
            return cast(
                TaskStateDict, {k: v for k, v in state.items() if v is not None or k == "ttlMs"}
            )
        outage = outage or Outage(retry, reconnect_timeout)
        delay = outage.next_delay(wait)
        if delay is None:
            raise TaskUnreachable(
                task_id, describe_error(failure), waited=outage.waited, server=server
            ) from failure
        await anyio.sleep(delay)


def poll_interval(state: TaskStateDict, floor: float = 0.0) -> float:
    """Seconds until the next poll: the latest `pollIntervalMs` (C62), at least `floor`."""
    poll_ms = state.get("pollIntervalMs")
    given = isinstance(poll_ms, int) and poll_ms > 0
    seconds = poll_ms / 1000 if given and poll_ms is not None else DEFAULT_POLL_SECONDS
    return max(seconds, floor)


class TaskWatch:
    """The next states of one task, pushed when the server can, polled otherwise.

    Use `async with TaskWatch(...) as watch:` or call `start()` and `close()`.

    Args:
        session: the connected client session.
        task_id: the task to follow.
        extension: the client's `TasksClientExtension`, which receives the pushed
            `notifications/tasks`; without it (or with `push=False`) the watch only polls.
        push: subscribe with `subscriptions/listen` when the server offers it.
        min_poll_interval: the shortest wait between polls, whatever the server says.
        read_timeout: the read timeout of each `tasks/get` (`None`: the session's).
        retry: how a transiently failing `tasks/get` is retried.
        reconnect_timeout: how long a `tasks/get` keeps trying while the server cannot
            be reached (`None`: no limit); then `TaskUnreachable`.
        server: the server's URL or name, for the resume hint of `TaskUnreachable`.
    """

    def __init__(
        self,
        session: ClientSession,
        task_id: str,
        *,
        extension: PushSource | None = None,
        push: bool = True,
        min_poll_interval: float = 0.0,
        read_timeout: float | None = None,
        retry: RetryPolicy = DEFAULT_RETRY,
        reconnect_timeout: float | None = DEFAULT_RECONNECT_TIMEOUT,
        server: str | None = None,
    ) -> None:
        self.session = session
        self.task_id = task_id
        self.extension = extension if push else None
        self.min_poll_interval = min_poll_interval
        self.read_timeout = read_timeout
        self.retry = retry
        self.reconnect_timeout = reconnect_timeout
        self.server = server
        self.pushed = False
        self.broken = False  # the listen stream broke: open it again after a good poll
        self._inbox: MemoryObjectSendStream[TaskStateDict] | None = None
        self._pushes: MemoryObjectReceiveStream[TaskStateDict] | None = None
        self._listen: asyncio.Task[None] | None = None
        self._closed = False

    async def __aenter__(self) -> TaskWatch:
        self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def start(self) -> None:
        """Subscribe to the task's changes (when push is possible); idempotent."""
        if self.extension is None or self._pushes is not None or self._closed:
            return
        self._inbox, self._pushes = anyio.create_memory_object_stream[TaskStateDict](math.inf)
        self.extension.add_watcher(self.task_id, self._inbox)
        self._listen = asyncio.get_running_loop().create_task(self._subscribe())

    async def get(self) -> TaskStateDict:
        """One `tasks/get` (resent while the server cannot be reached)."""
        state = await get_task_state(
            self.session,
            self.task_id,
            read_timeout=self.read_timeout,
            retry=self.retry,
            reconnect_timeout=self.reconnect_timeout,
            server=self.server,
        )
        if self.broken and not self._closed and self._pushes is None:
            self.broken = False  # the server answers again: listen again (C72)
            self.start()
        return state

    async def next(self, state: TaskStateDict) -> TaskStateDict:
        """The task's next state after `state`: the next push, or a poll once it is due."""
        wait = poll_interval(state, self.min_poll_interval)
        if self._pushes is not None:
            with anyio.move_on_after(max(wait, SAFETY_POLL) if self.pushed else wait):
                try:
                    fresh = await self._pushes.receive()
                except anyio.EndOfStream:
                    self._pushes = None
                    self.pushed = False
                else:
                    self.pushed = True
                    return fresh
        else:
            await anyio.sleep(wait)
        return await self.get()

    async def close(self) -> None:
        """End the subscription and stop receiving pushes for this task."""
        self._closed = True
        listen, self._listen = self._listen, None
        self._stop_pushes()
        if self._pushes is not None:
            self._pushes.close()
            self._pushes = None
        if listen is not None and not listen.done():
            listen.cancel()
            with anyio.CancelScope(shield=True):
                await asyncio.wait([listen])

    async def _subscribe(self) -> None:
        """Hold a `subscriptions/listen` for the task; on any refusal, polling carries on."""
        notifications = SubscriptionFilter.model_validate({"taskIds": [self.task_id]})
        request = SubscriptionsListenRequest(
            params=SubscriptionsListenRequestParams(notifications=notifications)
        )
        try:
            await self.session.send_request(
                request, SubscriptionsListenResult, request_read_timeout_seconds=LISTEN_TIMEOUT
            )
        except MCPError as exc:  # -32601 from a server without push, a dropped stream, ...
            self.broken = transient_error(exc) is not None
        except Exception:
            self.broken = True
        finally:  # what was pushed is still read; then `next()` polls at the normal pace
            self._stop_pushes()

    def _stop_pushes(self) -> None:
        inbox, self._inbox = self._inbox, None
        if inbox is not None:
            if self.extension is not None:
                self.extension.remove_watcher(self.task_id, inbox)
            inbox.close()
