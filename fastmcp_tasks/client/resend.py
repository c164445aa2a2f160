"""`tools/call` in the transport: keyed, resent when its reply is lost, cancelled when abandoned.

`client.http.RetryingTransport` hands a `tools/call` POST here once the server has
said, in its handshake, that it honours idempotency keys
(`capabilities.experimental["fastmcp-tasks"]["idempotencyKey"]`). So the
transparent `Client.call_tool()`, which builds its request itself, gets what
`call_tool_task()` does (`client.creating`):

- the call carries an idempotency key (`_meta["fastmcp-tasks/idempotencyKey"]`,
  192 random bits) unless it has one;
- when the POST fails in the transport it is sent again with the same key, with
  backoff and jitter, for `RESEND_WINDOW` seconds at most (the call's own timeout
  ends it sooner); after a failure that may have reached the server the resend says
  so (`_meta["fastmcp-tasks/resent"]`): the server answers with the task the first
  send created, and refuses, rather than runs again, a tool it would run synchronously;
  a server error that says to retry ("Task store unavailable": nothing was created) is
  resent the same way;
- when the caller abandons the call before its reply (cancelled, or timed out), the
  call is sent once more in the background with the same key, to learn the task it
  may have created, and that task is cancelled (`tasks/cancel`): a task nobody holds
  is never left running.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any, Protocol

import anyio
import httpx2
from mcp_types import CLIENT_CAPABILITIES_META_KEY, PROTOCOL_VERSION_META_KEY

from fastmcp_tasks.client.creating import new_idempotency_key
from fastmcp_tasks.client.watch import DEFAULT_RETRY, TRANSPORT_ERROR_KEY, Outage
from fastmcp_tasks.wire.names import IDEMPOTENCY_META_KEY, RESENT_META_KEY


class CallTransport(Protocol):
    """What this module needs of `client.http.RetryingTransport`."""

    retries: int
    abandoned: list[str]

    async def deliver(self, request: httpx2.Request, *, safe: bool) -> httpx2.Response:
        """Send one request; a transport failure comes back as its own error response."""
        ...

    def spawn(self, coroutine: Any) -> None:
        """Run `coroutine` beyond the request that started it."""
        ...


#: The longest a `tools/call` is resent while its server cannot be reached.
RESEND_WINDOW = 600.0
#: How long the background cancel of an abandoned call may take in all.
ABANDON_GRACE = 10.0
#: Headers of the call that a follow-up request must not copy.
CALL_ONLY_HEADERS = ("content-length", "mcp-method", "mcp-name")


def keyed(request: httpx2.Request, body: dict[str, Any], **meta: Any) -> httpx2.Request:
    """`request` with `body`, its `_meta` updated with `meta`."""
    params = body.setdefault("params", {})
    params["_meta"] = {**(params.get("_meta") or {}), **meta}
    headers = [(k, v) for k, v in request.headers.multi_items() if k.lower() != "content-length"]
    return httpx2.Request(
        request.method,
        request.url,
        headers=headers,
        content=json.dumps(body).encode(),
        extensions=request.extensions,
    )


def delivery(response: httpx2.Response) -> str | None:
    """Whether a `tools/call` may be sent again, and how: "no" (it did nothing: a refused
    connection, or a server that says "retry", as "Task store unavailable" does),
    "unknown" (the transport lost it, maybe after it arrived), or `None` (an answer)."""
    if response.status_code < 400 or not response.headers.get("content-type", "").startswith(
        "application/json"
    ):
        return None
    try:
        data = json.loads(response.content).get("error", {}).get("data") or {}
    except (ValueError, AttributeError):
        return None
    if not isinstance(data, dict):
        return None
    failure = data.get(TRANSPORT_ERROR_KEY)
    if isinstance(failure, dict):
        return "no" if failure.get("delivered") == "no" else "unknown"
    return "no" if data.get("retryable") is True else None


async def send_tool_call(transport: CallTransport, request: httpx2.Request) -> httpx2.Response:
    """Send a `tools/call` with a key, resending it while the transport fails it."""
    try:
        body = json.loads(request.content)
    except ValueError:
        return await transport.deliver(request, safe=False)
    if not isinstance(body, dict) or not isinstance(body.get("params"), dict):
        return await transport.deliver(request, safe=False)
    meta = body["params"].get("_meta") or {}
    key = meta.get(IDEMPOTENCY_META_KEY) or new_idempotency_key()
    sent = keyed(request, body, **{IDEMPOTENCY_META_KEY: key})
    outage: Outage | None = None
    maybe_arrived = False
    try:
        while True:
            response = await transport.deliver(sent, safe=False)
            reached = delivery(response)
            if reached is None:
                return response
            if reached == "unknown" and not maybe_arrived:
                maybe_arrived = True
                sent = keyed(sent, body, **{RESENT_META_KEY: True})
            outage = outage or Outage(DEFAULT_RETRY, RESEND_WINDOW)
            delay = outage.next_delay()
            if delay is None:
                return response
            transport.retries += 1
            await anyio.sleep(delay)
    except anyio.get_cancelled_exc_class():
        # abandoned before its reply: the server may have made a task nobody will follow
        transport.spawn(cancel_abandoned(transport, keyed(sent, body, **{RESENT_META_KEY: True})))
        raise


async def cancel_abandoned(transport: CallTransport, resend: httpx2.Request) -> None:
    """Learn the task an abandoned call may have created (same key) and cancel it."""
    with anyio.move_on_after(ABANDON_GRACE):
        try:
            response = await transport.deliver(resend, safe=False)
            if not response.headers.get("content-type", "").startswith("application/json"):
                return  # an event stream: no task result to read here
            result = json.loads(response.content).get("result") or {}
            task_id = result.get("taskId")
            if result.get("resultType") != "task" or not isinstance(task_id, str):
                return  # refused, or answered synchronously: nothing to cancel
            await transport.deliver(cancel_request(resend, task_id), safe=False)
            transport.abandoned.append(task_id)
        except Exception:  # best effort: the caller has already gone
            return


def cancel_request(call: httpx2.Request, task_id: str) -> httpx2.Request:
    """A `tasks/cancel` for `task_id`, sent as `call` was (its auth, version, capabilities)."""
    meta = (json.loads(call.content).get("params") or {}).get("_meta") or {}
    envelope = {
        k: meta[k] for k in (PROTOCOL_VERSION_META_KEY, CLIENT_CAPABILITIES_META_KEY) if k in meta
    }
    body = {
        "jsonrpc": "2.0",
        "id": f"fastmcp-tasks-cancel-{uuid.uuid4().hex}",
        "method": "tasks/cancel",
        "params": {"taskId": task_id, "_meta": envelope},
    }
    headers = [
        (k, v)
        for k, v in call.headers.multi_items()
        if k.lower() not in CALL_ONLY_HEADERS and not k.lower().startswith("mcp-param-")
    ]
    headers += [("mcp-method", "tasks/cancel"), ("mcp-name", task_id)]
    timeout = call.extensions.get("timeout")
    return httpx2.Request(
        "POST",
        call.url,
        headers=headers,
        content=json.dumps(body).encode(),
        extensions={} if timeout is None else {"timeout": timeout},
    )


def spawn_on_loop(coroutine: Any, holder: set[asyncio.Task[None]]) -> None:
    """Run `coroutine` as its own asyncio task (it outlives a cancelled request)."""
    task = asyncio.get_running_loop().create_task(coroutine)
    holder.add(task)
    task.add_done_callback(holder.discard)
