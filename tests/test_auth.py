"""Ownership over HTTP with a real bearer verifier and two principals (C14, C49)."""

from __future__ import annotations

import logging

import anyio
import httpx
import pytest
from fastmcp import FastMCP
from fastmcp.server.auth.providers.jwt import StaticTokenVerifier

from fastmcp_tasks import TasksExtension
from fastmcp_tasks.server import ownership
from fastmcp_tasks.server.observability import fingerprint
from fastmcp_tasks.wire import TASKS_EXTENSION_ID
from tests.test_listen import _listen_params, http_listen
from tests.wire import WireError, http_server, http_wire_for

pytestmark = pytest.mark.anyio

TOKENS = {
    "alice-token": {"client_id": "app", "sub": "alice", "scopes": []},
    "bob-token": {"client_id": "app", "sub": "bob", "scopes": []},
}


def authed_server() -> tuple[FastMCP, anyio.Event]:
    mcp = FastMCP("owned", auth=StaticTokenVerifier(tokens=TOKENS))
    mcp.add_extension(TasksExtension())
    release = anyio.Event()

    @mcp.tool(task=True)
    async def private_job() -> str:
        await release.wait()
        return "alice's result"

    return mcp, release


def as_user(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_another_principal_sees_nothing() -> None:
    mcp, release = authed_server()
    async with http_server(mcp) as url, http_wire_for(url) as wire:
        alice, bob = as_user("alice-token"), as_user("bob-token")
        created = await wire.call_tool("private_job", headers=alice)
        task_id = created["taskId"]
        assert (await wire.get(task_id, headers=alice))["status"] == "working"
        for method, extra in (
            ("tasks/get", {}),
            ("tasks/cancel", {}),
            ("tasks/update", {"inputResponses": {}}),
        ):
            with pytest.raises(WireError) as foreign:
                await wire.request(method, {"taskId": task_id, **extra}, headers=bob)
            with pytest.raises(WireError) as unknown:
                await wire.request(method, {"taskId": "x" * len(task_id), **extra}, headers=bob)
            assert foreign.value.code == unknown.value.code == -32602
            assert foreign.value.message.replace(task_id, "ID") == unknown.value.message.replace(
                "x" * len(task_id), "ID"
            )
            assert foreign.value.http_status == unknown.value.http_status
        # Bob's cancel did nothing: the task is still Alice's and still running
        assert (await wire.get(task_id, headers=alice))["status"] == "working"
        headers_bob = {"Authorization": "Bearer bob-token"}
        async with http_listen(url, _listen_params([task_id]), headers=headers_bob) as frames:
            ack = await frames.next()
        assert ack["params"]["notifications"]["taskIds"] == []
        release.set()
        done = await wire.wait_for(task_id, lambda t: t["status"] == "completed", headers=alice)
    assert done["result"]["content"][0]["text"] == "alice's result"


async def test_unauthenticated_requests_are_refused_by_the_auth_layer() -> None:
    mcp, _ = authed_server()
    async with http_server(mcp) as url, httpx.AsyncClient(timeout=10) as http:
        response = await http.post(
            url,
            json={"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"taskId": "x"}},
            headers={"Accept": "application/json, text/event-stream"},
        )
    assert response.status_code == 401


async def test_an_authenticated_server_logs_full_task_ids(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="fastmcp_tasks.transitions")
    mcp, release = authed_server()
    async with http_server(mcp) as url, http_wire_for(url) as wire:
        created = await wire.call_tool("private_job", headers=as_user("alice-token"))
        release.set()
        with anyio.fail_after(10):
            await wire.wait(created["taskId"], headers=as_user("alice-token"))
    shown = [r.task_id for r in caplog.records if r.name == "fastmcp_tasks.transitions"]
    assert created["taskId"] in shown  # an id alone grants nothing here: logged in full
    assert fingerprint(created["taskId"]) not in shown


async def test_an_unidentifiable_caller_creates_no_task(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail closed: an auth layer that cannot say who is calling gets a refusal, never an
    unowned task (which anyone holding its id could read)."""
    mcp, release = authed_server()
    release.set()
    extension = mcp._extensions[TASKS_EXTENSION_ID]
    created: list[str] = []
    original = extension._store.create

    async def counting_create(record, *, caps=None):  # type: ignore[no-untyped-def]
        created.append(record.task_id)
        await original(record, caps=caps)

    monkeypatch.setattr(extension._store, "create", counting_create)

    def broken_token() -> None:
        raise RuntimeError("the token introspection endpoint is down")

    monkeypatch.setattr(ownership, "get_access_token", broken_token)
    async with http_server(mcp) as url, http_wire_for(url) as wire:
        with pytest.raises(WireError) as refused:
            await wire.call_tool("private_job", headers=as_user("alice-token"))
        assert refused.value.code == -32603
        assert refused.value.message == ownership.UNKNOWN_PRINCIPAL
        assert created == []
