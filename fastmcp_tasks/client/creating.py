"""Sending a task-creating `tools/call` so that a lost reply neither loses nor doubles the task.

`call_tool_task()` (and so `fastmcp-tasks call`) sends every `tools/call` with an
idempotency key of 192 random bits in `_meta["fastmcp-tasks/idempotencyKey"]`.
When the call fails on the way (the transport's own JSON-RPC error for a failed
POST, a broken response stream, a proxy's 5xx, "Task store unavailable"), it is
sent again, with the same key, for the client's reconnect window: the server
answers a key it has seen with the task the first send created, so the caller
gets its task once, whatever happened to the first reply.

A resend is only made where it cannot run a tool twice:

- when the first send never reached the server (`"delivered": "no"`: the
  connection was refused), any server may get it again;
- otherwise only a server that advertises honouring the key
  (`capabilities.experimental["fastmcp-tasks"]["idempotencyKey"]`), and the
  resend says it is one (`_meta["fastmcp-tasks/resent"] = true`): a server that
  would answer it synchronously refuses it instead of running the tool again.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio
from mcp.shared.exceptions import MCPError

from fastmcp_tasks.client.watch import DEFAULT_RETRY, TRANSPORT_ERROR_KEY, Outage, transient_error
from fastmcp_tasks.wire.names import (
    EXPERIMENTAL_CAPABILITY,
    IDEMPOTENCY_META_KEY,
    RESENT_META_KEY,
)

if TYPE_CHECKING:
    from fastmcp import Client

#: Random bytes in an idempotency key (base64url: 32 characters, 192 bits).
KEY_BYTES = 24


def new_idempotency_key() -> str:
    """A fresh idempotency key: 192 random bits, base64url."""
    return secrets.token_urlsafe(KEY_BYTES)


def honours_idempotency_keys(client: Client[Any]) -> bool:
    """Whether the server advertised that it answers a known idempotency key with its task."""
    try:
        capabilities = client.server_capabilities
    except Exception:
        return False
    experimental = getattr(capabilities, "experimental", None) or {}
    ours = experimental.get(EXPERIMENTAL_CAPABILITY)
    return isinstance(ours, dict) and ours.get("idempotencyKey") is True


def delivery(error: MCPError) -> str | None:
    """Whether a failed send reached the server: "no", "unknown", or `None` (it was answered)."""
    data = error.error.data
    transport = data.get(TRANSPORT_ERROR_KEY) if isinstance(data, dict) else None
    if isinstance(transport, dict):
        return "no" if transport.get("delivered") == "no" else "unknown"
    if transient_error(error) is None:
        return None  # the server's answer: final
    if isinstance(data, dict) and (data.get("retryable") is True or "retryAfterMs" in data):
        return "no"  # the server refused it whole ("nothing was created or changed")
    return "unknown"  # a stream the SDK saw break


async def send_with_key(
    client: Client[Any],
    send: Callable[[dict[str, Any]], Awaitable[Any]],
    meta: dict[str, Any] | None,
    *,
    reconnect_timeout: float | None,
) -> Any:
    """`await send(meta)` with an idempotency key, resent while its fate is a lost reply.

    Args:
        client: the connected client (for the server's advertised capabilities).
        send: sends the `tools/call` with the `_meta` it is given; returns its answer.
        meta: the call's own `_meta` (not changed).
        reconnect_timeout: how long to keep resending (`None`: no limit).

    Raises:
        MCPError: the server's answer, or the last failure once the window ran out,
            or a failure after which a resend could run the tool a second time.
    """
    sent = {**(meta or {}), IDEMPOTENCY_META_KEY: new_idempotency_key()}
    outage: Outage | None = None
    while True:
        try:
            return await send(sent)
        except MCPError as error:
            reached = delivery(error)
            if reached is None:
                raise
            if reached == "unknown":
                if not honours_idempotency_keys(client):
                    raise  # a resend might run the tool again on a server that ignores keys
                sent = {**sent, RESENT_META_KEY: True}
            outage = outage or Outage(DEFAULT_RETRY, reconnect_timeout)
            delay = outage.next_delay(transient_error(error) or 0.0)
            if delay is None:
                raise
            await anyio.sleep(delay)
