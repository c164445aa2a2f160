"""Caps on active tasks (issue 8): global and per principal, atomic in every store.

Store-level tests run on memory, SQLite and Redis through the contract's
`store` fixture; wire tests show the JSON-RPC error (naming the limit and its
value, nothing created) in memory and over HTTP, and per-principal isolation
with a real bearer verifier.
"""

from __future__ import annotations

import anyio
import pytest
from fastmcp import FastMCP
from fastmcp.server.auth.providers.jwt import StaticTokenVerifier

from fastmcp_tasks import Limits, TaskLimitExceeded, TasksExtension, TaskStore
from fastmcp_tasks.stores.base import ActiveCaps
from tests.test_auth import TOKENS, as_user
from tests.test_store_contract import STORE_FACTORIES, record, store
from tests.wire import WireError, connect, http_server, http_wire_for

pytestmark = pytest.mark.anyio

__all__ = ["store"]  # the contract's parametrized fixture, used below


async def test_the_global_cap_counts_active_tasks_only(store: TaskStore) -> None:
    caps = ActiveCaps(total=3)
    tasks = [record(owner=f"p{i}") for i in range(3)]
    for task in tasks:
        await store.create(task, caps=caps)
    refused = record()
    with pytest.raises(TaskLimitExceeded) as info:
        await store.create(refused, caps=caps)
    assert (info.value.limit, info.value.value) == ("max_active_tasks", 3)
    assert await store.get(refused.task_id) is None  # nothing was stored
    await store.transition(tasks[0].task_id, "completed", result={})
    await store.create(record(), caps=caps)  # a finished task frees its place
    with pytest.raises(TaskLimitExceeded):
        await store.create(record(), caps=caps)
    await store.create(record(), caps=None)  # the caps apply only when asked for


async def test_the_per_owner_cap_isolates_principals(store: TaskStore) -> None:
    caps = ActiveCaps(per_owner=2)
    alice = [record(owner="app|alice") for _ in range(2)]
    for task in alice:
        await store.create(task, caps=caps)
    with pytest.raises(TaskLimitExceeded) as info:
        await store.create(record(owner="app|alice"), caps=caps)
    assert (info.value.limit, info.value.value) == ("max_active_per_principal", 2)
    await store.create(record(owner="app|bob"), caps=caps)  # another principal is not held up
    for _ in range(3):
        await store.create(record(owner=None), caps=caps)  # anonymous: global cap only
    for status in ("failed", "cancelled"):  # every way of ending frees a place
        ended = await store.transition(
            alice.pop().task_id, status, error={"code": 1, "message": "m"}
        )
        assert ended is not None and ended.status == status
        again = record(owner="app|alice")
        await store.create(again, caps=caps)
        alice.append(again)
    with pytest.raises(TaskLimitExceeded):
        await store.create(record(owner="app|alice"), caps=caps)


async def test_concurrent_creates_never_overshoot(store: TaskStore) -> None:
    caps = ActiveCaps(total=10, per_owner=4)
    outcomes: list[str] = []

    async def attempt(owner: str) -> None:
        try:
            await store.create(record(owner=owner), caps=caps)
            outcomes.append(owner)
        except TaskLimitExceeded as exc:
            outcomes.append(exc.limit)

    async with anyio.create_task_group() as group:
        for i in range(30):
            group.start_soon(attempt, f"p{i % 3}")
    created = [o for o in outcomes if o.startswith("p")]
    assert len(outcomes) == 30
    assert len(created) == 10
    assert all(created.count(f"p{i}") <= 4 for i in range(3))
    assert len(await store.active_tasks()) == 10


@pytest.mark.parametrize("kind", ["sqlite", "redis", "postgres"])
async def test_the_cap_holds_across_store_instances(kind: str, tmp_path: object) -> None:
    """Two processes sharing a store share its caps (two instances stand in for them)."""
    first = STORE_FACTORIES[kind]()
    if kind == "sqlite":
        from fastmcp_tasks.stores.sqlite import SQLiteTaskStore

        second: TaskStore = SQLiteTaskStore(first.path, max_tasks=50)  # type: ignore[attr-defined]
    elif kind == "redis":
        from fastmcp_tasks.stores.redis import RedisTaskStore

        second = RedisTaskStore(first.url, prefix=first.keys.prefix)  # type: ignore[attr-defined]
    else:
        from fastmcp_tasks.stores.postgres import PostgresTaskStore

        second = PostgresTaskStore(first.url, schema=first.schema)  # type: ignore[attr-defined]
    await first.open()
    await second.open()
    try:
        caps = ActiveCaps(per_owner=5)
        won = 0

        async def attempt(instance: TaskStore) -> None:
            nonlocal won
            try:
                await instance.create(record(owner="app|alice"), caps=caps)
                won += 1
            except TaskLimitExceeded:
                pass

        async with anyio.create_task_group() as group:
            for i in range(20):
                group.start_soon(attempt, first if i % 2 else second)
        assert won == 5
    finally:
        await second.close()
        await first.close()


def capped_server(limits: Limits, **server: object) -> tuple[FastMCP, anyio.Event]:
    mcp = FastMCP("capped", **server)  # type: ignore[arg-type]
    mcp.add_extension(TasksExtension(limits=limits))
    release = anyio.Event()

    @mcp.tool(task=True)
    async def hold() -> str:
        await release.wait()
        return "released"

    return mcp, release


async def test_over_the_global_cap_tools_call_names_the_limit(transport: str) -> None:
    mcp, release = capped_server(Limits(max_active_tasks=2))
    store = mcp._extensions["io.modelcontextprotocol/tasks"].store  # type: ignore[attr-defined]
    async with connect(mcp, transport) as wire:
        first = await wire.call_tool("hold")
        await wire.call_tool("hold")
        with pytest.raises(WireError) as info:
            await wire.call_tool("hold")
        assert info.value.code == -32000
        assert "max_active_tasks=2" in info.value.message
        assert "no task was created" in info.value.message
        assert info.value.data == {"limit": "max_active_tasks", "value": 2}
        assert len(store) == 2
        release.set()
        await wire.wait(first["taskId"])
        await wire.wait((await wire.call_tool("hold"))["taskId"])  # room again


async def test_one_principal_at_its_cap_does_not_hold_up_another() -> None:
    mcp, release = capped_server(
        Limits(max_active_per_principal=1), auth=StaticTokenVerifier(tokens=TOKENS)
    )
    async with http_server(mcp) as url, http_wire_for(url) as wire:
        alice, bob = as_user("alice-token"), as_user("bob-token")
        mine = await wire.call_tool("hold", headers=alice)
        with pytest.raises(WireError) as info:
            await wire.call_tool("hold", headers=alice)
        assert info.value.code == -32000
        assert info.value.data == {"limit": "max_active_per_principal", "value": 1}
        theirs = await wire.call_tool("hold", headers=bob)
        release.set()
        for created, who in ((mine, alice), (theirs, bob)):
            done = await wire.wait(created["taskId"], headers=who)
            assert done["status"] == "completed"
        again = await wire.call_tool("hold", headers=alice)
        assert (await wire.wait(again["taskId"], headers=alice))["status"] == "completed"


def test_limits_reject_nonsense() -> None:
    from fastmcp_tasks import ConfigurationError

    for bad in (
        {"max_active_tasks": 0},
        {"max_active_per_principal": -1},
        {"min_poll_fraction": 0},
        {"min_poll_fraction": 1.5},
        {"poll_burst": 0},
    ):
        with pytest.raises(ConfigurationError):
            Limits(**bad)  # type: ignore[arg-type]
