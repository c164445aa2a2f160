"""`tools/call` in the transport (`client.resend`): keyed and resent only for a server that
honours idempotency keys, marked as a resend once it may have arrived, never for others."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest

from fastmcp_tasks.client.http import RetryingTransport
from fastmcp_tasks.client.watch import RetryPolicy

pytestmark = pytest.mark.anyio

QUICK = RetryPolicy(attempts=3, first_delay=0.01, max_delay=0.02)
KEY = "fastmcp-tasks/idempotencyKey"
RESENT = "fastmcp-tasks/resent"


def discover(honours: bool) -> dict[str, Any]:
    experimental = {"fastmcp-tasks": {"idempotencyKey": True}} if honours else {}
    return {"jsonrpc": "2.0", "id": 0, "result": {"capabilities": {"experimental": experimental}}}


class Script(httpx2.AsyncBaseTransport):
    """Answers the handshake, then each `tools/call` with the next scripted outcome."""

    def __init__(self, honours: bool, outcomes: list[Any]) -> None:
        self.honours, self.outcomes = honours, outcomes
        self.calls: list[dict[str, Any]] = []

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.headers["mcp-method"] == "server/discover":
            return httpx2.Response(200, json=discover(self.honours))
        self.calls.append(json.loads(request.content)["params"].get("_meta") or {})
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


CREATED = httpx2.Response(200, json={"jsonrpc": "2.0", "id": 1, "result": {"resultType": "task"}})
UNAVAILABLE = httpx2.Response(
    500,
    json={
        "jsonrpc": "2.0",
        "id": 1,
        "error": {"code": -32603, "message": "Task store unavailable", "data": {"retryable": True}},
    },
)


async def call(script: Script) -> httpx2.Response:
    transport = RetryingTransport(script, retry=QUICK)
    async with httpx2.AsyncClient(transport=transport) as http:
        await http.post("http://s/mcp", json={}, headers={"Mcp-Method": "server/discover"})
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "t"}}
        return await http.post("http://s/mcp", json=body, headers={"Mcp-Method": "tools/call"})


async def test_a_lost_reply_is_resent_with_the_same_key_and_marked_resent() -> None:
    lost = httpx2.RemoteProtocolError("Server disconnected without sending a response.")
    refused = httpx2.ConnectError("All connection attempts failed")
    script = Script(True, [refused, lost, CREATED])
    assert (await call(script)).json()["result"]["resultType"] == "task"
    first, second, third = script.calls
    assert len(first[KEY]) == 32 and first[KEY] == second[KEY] == third[KEY]
    assert RESENT not in first and RESENT not in second  # never arrived: a plain resend
    assert third[RESENT] is True  # may have arrived: the server must not run it again


async def test_store_unavailable_is_resent_as_nothing_was_created() -> None:
    script = Script(True, [UNAVAILABLE, CREATED])
    assert (await call(script)).status_code == 200
    assert [RESENT in meta for meta in script.calls] == [False, False]


async def test_a_server_that_ignores_keys_gets_the_call_once_untouched() -> None:
    lost = httpx2.RemoteProtocolError("Server disconnected without sending a response.")
    script = Script(False, [lost])
    answer = await call(script)
    assert answer.json()["error"]["data"]["fastmcp-tasks/transport"]["delivered"] == "unknown"
    assert script.calls == [{}]  # no key added, no resend
