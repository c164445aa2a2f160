"""Direct polls' pieces, apart from a server's run: the security settings are applied
before anything runs, the result's wire form is the SDK runner's, and the binding a
registered handler serves is found only in FastMCP's wrapper (`server.direct_polls`,
`_compat.modern_entry`).
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from fastmcp import FastMCP
from fastmcp.server.extensions import MethodBinding, build_method_handler
from mcp.server.connection import Connection
from mcp.server.runner import ServerRunner
from mcp.server.transport_security import TransportSecuritySettings

from fastmcp_tasks import TasksExtension, _compat
from fastmcp_tasks.server.direct_polls import DirectPolls
from fastmcp_tasks.wire.models import TaskIdParams
from tests.test_direct_polls import HEADERS, body
from tests.wire import MODERN

pytestmark = pytest.mark.anyio


def server() -> tuple[FastMCP, TasksExtension]:
    mcp = FastMCP("direct-polls-units")
    extension = TasksExtension()
    mcp.add_extension(extension)
    return mcp, extension


async def test_the_security_settings_are_checked_as_the_sdk_checks_them() -> None:
    """FastMCP turns the SDK's host checks off (its own guard runs before): settings that
    have them on are applied here as the SDK applies them."""
    mcp, extension = server()
    asked: list[Any] = []

    async def poll(context: Any, params: Any) -> dict[str, Any]:
        asked.append(params)
        return {}

    extension._methods.modern_get = poll
    polls = DirectPolls(mcp, extension._methods)
    sent: list[Any] = []

    async def send(message: Any) -> None:
        sent.append(message)

    async def receive() -> Any:
        raise AssertionError("the body was read already")

    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=["allowed.example"]
    )
    headers = [(k.lower().encode(), v.encode()) for k, v in HEADERS.items()]
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/mcp",
        "headers": [*headers, (b"host", b"evil.example")],
    }
    message = {"type": "http.request", "body": body("t"), "more_body": False}
    exchange = _compat.Exchange(security, send, json_response=False)
    with anyio.fail_after(10):
        assert not await polls.answer(scope, message, receive, exchange)
    assert sent == [] and asked == [] and polls.answered == 0


@pytest.mark.parametrize(
    "result",
    [
        {"taskId": "t", "status": "working", "resultType": "complete"},
        {"taskId": "t"},  # no resultType
        {"taskId": "t", "_meta": {"k": 1}},
        {"taskId": "t", "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "own"}}},
        {"taskId": "t", "_meta": {"io.modelcontextprotocol/serverInfo": None}},
        {"taskId": "t", "_meta": ["not", "a", "dict"]},
        {"taskId": "t", "resultType": None},
    ],
)
def test_the_wire_form_is_the_sdk_runners(result: dict[str, Any]) -> None:
    """`wire_result` against the SDK runner's own `_serialize` for a method outside the
    spec's, with no cache hint."""
    mcp, _ = server()
    low = _compat.low_level_server(mcp)
    connection = Connection.from_envelope(MODERN, None, {})
    runner = ServerRunner(low, connection, None)
    sdk = runner._serialize("tasks/get", MODERN, dict(result))
    assert _compat.wire_result(low, MODERN, dict(result)) == sdk


async def _handler(ctx: Any, params: Any) -> dict[str, Any]:
    return {}


def test_the_binding_is_found_only_in_fastmcps_wrapper() -> None:
    binding = MethodBinding("example/method", TaskIdParams, _handler)
    assert _compat.method_binding(build_method_handler(binding)) is binding
    assert _compat.method_binding(_handler) is None
    assert _compat.method_binding(None) is None
