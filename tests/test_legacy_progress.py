"""2025-11-25: a task's progress reaches the original `progressToken` for the task's life.

Raw Streamable HTTP, as a 2025-11-25 client speaks it: `initialize`, then the
session's standalone GET stream, then a task-augmented `tools/call` carrying a
`progressToken`. The tool reports progress after the call has answered; the
`notifications/progress` (tagged with the related task) and the
`notifications/tasks/status` arrive on the session's stream.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest
from fastmcp import Context, FastMCP

from fastmcp_tasks import TasksExtension
from fastmcp_tasks.wire.legacy import RELATED_TASK
from tests.wire import http_server, parse_http_response

pytestmark = pytest.mark.anyio

HEADERS = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}


async def events(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """The JSON-RPC messages of an SSE response, as they arrive."""
    async for line in response.aiter_lines():
        if line.startswith("data:") and line[5:].strip():
            yield json.loads(line[5:])


async def test_progress_goes_to_the_original_token_after_the_call_answered() -> None:
    go = anyio.Event()
    mcp = FastMCP("progress")
    mcp.add_extension(TasksExtension())

    @mcp.tool(task=True)
    async def render(ctx: Context) -> str:
        await go.wait()  # only once the CreateTaskResult has been answered
        await ctx.report_progress(2, 5, "page 2 of 5")
        return "rendered"

    async with http_server(mcp) as url, httpx.AsyncClient(timeout=10) as http:
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "raw-v1", "version": "1"},
            },
        }
        answer = await http.post(url, json=init, headers=HEADERS)
        session = {**HEADERS, "Mcp-Session-Id": answer.headers["mcp-session-id"]}
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        await http.post(url, json=initialized, headers=session)
        async with http.stream("GET", url, headers=session) as stream:
            call = {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {
                    "name": "render",
                    "arguments": {},
                    "task": {"ttl": 60_000},
                    "_meta": {"progressToken": "tok-7"},
                },
            }
            created = parse_http_response(await http.post(url, json=call, headers=session))
            task_id = created["result"]["task"]["taskId"]
            get = {"jsonrpc": "2.0", "id": 3, "method": "tasks/get", "params": {"taskId": task_id}}
            await http.post(url, json=get, headers=session)  # status pushes start from here
            go.set()
            seen: dict[str, dict[str, Any]] = {}
            with anyio.fail_after(10):
                async for message in events(stream):
                    params = message.get("params", {})
                    if message.get("method") == "notifications/progress":
                        seen["progress"] = params
                    elif params.get("status") == "completed":  # notifications/tasks/status
                        seen["completed"] = params
                    if len(seen) == 2:
                        break
    progress = seen["progress"]
    assert (progress["progressToken"], progress["progress"], progress["total"]) == ("tok-7", 2, 5)
    assert progress["message"] == "page 2 of 5"
    assert progress["_meta"][RELATED_TASK] == {"taskId": task_id}
    assert seen["completed"]["taskId"] == task_id
