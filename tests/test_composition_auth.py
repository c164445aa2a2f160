"""The caller's identity inside a task, over HTTP with a real bearer verifier.

In the process that accepted the call a task sees the caller's token exactly as
the synchronous call does: `get_access_token()`, `CurrentAccessToken()`,
`TokenClaim("sub")`, and a mounted child's `AuthMiddleware` allowing one
caller and refusing another. Each test compares the same call both ways.

In a process that did not accept the call (here a worker sharing the SQLite
store) the token does not exist, since it is never stored: a tool that
declares it needs it fails with a clear error; one that reads it
imperatively without saying so sees `None`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastmcp import FastMCP
from fastmcp.server.auth import AccessToken, require_scopes
from fastmcp.server.auth.providers.jwt import StaticTokenVerifier
from fastmcp.server.dependencies import CurrentAccessToken, TokenClaim, get_access_token
from fastmcp.server.middleware.authorization import AuthMiddleware

from fastmcp_tasks import TasksExtension, _compat, task_options
from fastmcp_tasks.server.engine.caller import TOKEN_UNAVAILABLE
from tests.test_composition import both_ways
from tests.wire import http_server, http_wire_for

pytestmark = pytest.mark.anyio

TOKENS = {
    "alice-token": {"client_id": "app", "sub": "alice", "scopes": ["deploy"]},
    "bob-token": {"client_id": "app", "sub": "bob", "scopes": []},
}
ALICE = {"Authorization": "Bearer alice-token"}
BOB = {"Authorization": "Bearer bob-token"}


def authed_server(**extension: Any) -> FastMCP:
    mcp = FastMCP("authed", auth=StaticTokenVerifier(tokens=TOKENS))
    mcp.add_extension(TasksExtension(**extension))

    @mcp.tool(task=True)
    async def whoami(
        token: AccessToken = CurrentAccessToken(), sub: str = TokenClaim("sub")
    ) -> dict[str, Any]:
        imperative = get_access_token()
        return {
            "imperative": imperative.claims.get("sub") if imperative else None,
            "dependency": token.claims.get("sub"),
            "claim": sub,
            "scopes": token.scopes,
        }

    @mcp.tool(task=True)
    async def peek() -> str:
        token = get_access_token()
        return f"token of {token.claims.get('sub')}" if token else "no token"

    @mcp.tool(task=True)
    @task_options(needs_access_token=True)
    async def peek_declared() -> str:
        token = get_access_token()
        return f"token of {token.claims.get('sub')}" if token else "no token"

    child = FastMCP("ops", middleware=[AuthMiddleware(auth=require_scopes("deploy"))])

    @child.tool(task=True)
    async def deploy(service: str) -> str:
        token = get_access_token()
        return f"{service} deployed by {token.claims.get('sub') if token else None}"

    mcp.mount(child, namespace="ops")
    return mcp


async def test_the_caller_s_token_inside_a_task_is_the_foreground_s() -> None:
    async with http_server(authed_server()) as url, http_wire_for(url) as wire:
        for headers, sub in ((ALICE, "alice"), (BOB, "bob")):
            sync, tasked, _ = await both_ways(wire, "whoami", headers)
            assert tasked == sync
            assert sync["structuredContent"]["dependency"] == sub
            assert sync["structuredContent"]["imperative"] == sync["structuredContent"]["claim"]


@pytest.mark.parametrize(("headers", "allowed"), [(ALICE, True), (BOB, False)])
async def test_a_mounted_child_s_auth_middleware_decides_as_in_the_foreground(
    headers: dict[str, str], allowed: bool
) -> None:
    async with http_server(authed_server()) as url, http_wire_for(url) as wire:
        params = {"name": "ops_deploy", "arguments": {"service": "api"}}
        sync = await wire.request("tools/call", dict(params), opt_in=False, headers=headers)
        created = await wire.request("tools/call", dict(params), headers=headers)
        if created.get("resultType") == "task":
            done = await wire.wait(created["taskId"], headers=headers)
            assert done["status"] == "completed", done
            tasked = done["result"]
        else:  # refused before any task was made: the same answer as the foreground
            tasked = created
    assert tasked == sync
    assert bool(sync.get("isError")) is not allowed
    if allowed:
        assert sync["content"][0]["text"] == "api deployed by alice"


async def test_a_worker_has_no_token_and_says_so(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tasks.db'}"
    front = authed_server(url=url, concurrency=0)  # every task waits for a worker
    worker = authed_server(url=url, concurrency=2)
    async with http_server(front) as front_url, http_wire_for(front_url) as wire:
        created = {
            name: (await wire.call_tool(name, headers=ALICE))["taskId"]
            for name in ("whoami", "peek", "peek_declared")
        }
        async with _compat.server_lifespan(worker):
            done = {
                name: await wire.wait(task_id, headers=ALICE, within=20)
                for name, task_id in created.items()
            }
    for name in ("whoami", "peek_declared"):
        assert done[name]["status"] == "failed", done[name]
        assert done[name]["error"]["message"] == TOKEN_UNAVAILABLE.format(tool=name)
    assert done["peek"]["status"] == "completed"
    assert done["peek"]["result"]["content"][0]["text"] == "no token"
