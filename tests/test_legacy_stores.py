"""2025-11-25 tasks on every store, and across a front end and a worker sharing one.

The same semantics as `tests/test_legacy.py` (result, cancel, list), on the
memory store, a SQLite file and Redis (skipped loudly without a server, failing
with `CI=true`); then a front end that runs nothing (`concurrency=0`) answers a
V1 `tasks/result` with the result a worker process produced.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from fastmcp_tasks import _compat
from tests.test_legacy import call, legacy_wire, v1, v1_server
from tests.test_store_contract import REDIS_URL, redis_store

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["memory", "sqlite", "redis"])
async def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    if request.param == "memory":
        yield "memory://"
    elif request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'tasks.db'}"
    else:
        store = redis_store()  # skips without Redis (fails when CI=true)
        yield f"{REDIS_URL}?prefix={store.keys.prefix}"  # type: ignore[attr-defined]
        await store.open()
        await store.close()  # deletes the prefix's keys


async def test_v1_semantics_on_every_store(store_url: str) -> None:
    server, events = v1_server(url=store_url)
    async with legacy_wire(server, "memory") as (wire, _):
        done = (await call(wire, "double", {"x": 3}))["task"]["taskId"]
        result = await v1(wire, "tasks/result", taskId=done)
        assert result["structuredContent"] == {"result": 6}
        running = (await call(wire, "gated", {"x": 1}))["task"]["taskId"]
        await events["started"].wait()
        assert (await v1(wire, "tasks/cancel", taskId=running))["status"] == "cancelled"
        listed = {t["taskId"]: t["status"] for t in (await v1(wire, "tasks/list"))["tasks"]}
    assert listed == {done: "completed", running: "cancelled"}


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
async def test_tasks_result_on_a_front_end_waits_for_a_worker(kind: str, tmp_path: Path) -> None:
    if kind == "sqlite":
        url, cleanup = f"sqlite:///{tmp_path / 'tasks.db'}", None
    else:
        cleanup = redis_store()
        url = f"{REDIS_URL}?prefix={cleanup.keys.prefix}"  # type: ignore[attr-defined]
    front, _ = v1_server(url=url, concurrency=0)
    worker, _ = v1_server(url=url, concurrency=2)
    try:
        async with legacy_wire(front, "http") as (wire, _):
            task_id = (await call(wire, "double", {"x": 20}))["task"]["taskId"]
            assert (await v1(wire, "tasks/get", taskId=task_id))["status"] == "working"
            async with _compat.server_lifespan(worker):
                result = await v1(wire, "tasks/result", taskId=task_id)
        assert result["structuredContent"] == {"result": 40}
    finally:
        if cleanup is not None:
            await cleanup.open()
            await cleanup.close()


async def test_each_principal_sees_only_its_own_tasks() -> None:
    """With authentication, V1 isolation is the 2026 side's: another principal's task is
    an unknown id, and `tasks/list` shows the caller's own tasks only."""
    from fastmcp import Client, FastMCP
    from fastmcp.server.auth.providers.jwt import StaticTokenVerifier

    from fastmcp_tasks import TasksExtension
    from tests.wire import WireError, http_server, memory_wire_for

    tokens = {
        "alice-token": {"client_id": "app", "sub": "alice", "scopes": []},
        "bob-token": {"client_id": "app", "sub": "bob", "scopes": []},
    }
    server = FastMCP("owned", auth=StaticTokenVerifier(tokens=tokens))
    server.add_extension(TasksExtension())

    @server.tool(task=True)
    async def secret(x: int) -> int:
        return x

    async with (
        http_server(server) as url,
        Client(url, mode="legacy", auth="alice-token") as alice_client,
        Client(url, mode="legacy", auth="bob-token") as bob_client,
    ):
        alice = memory_wire_for(alice_client, "http-legacy")
        bob = memory_wire_for(bob_client, "http-legacy")
        task_id = (await call(alice, "secret", {"x": 1}))["task"]["taskId"]
        await v1(alice, "tasks/result", taskId=task_id)
        for method in ("tasks/get", "tasks/result", "tasks/cancel"):
            with pytest.raises(WireError) as foreign:
                await v1(bob, method, taskId=task_id)
            with pytest.raises(WireError) as unknown:
                await v1(bob, method, taskId="y" * len(task_id))
            assert (foreign.value.code, foreign.value.message) == (
                unknown.value.code,
                unknown.value.message.replace("y" * len(task_id), task_id),
            )
        assert (await v1(bob, "tasks/list"))["tasks"] == []
        assert [t["taskId"] for t in (await v1(alice, "tasks/list"))["tasks"]] == [task_id]
