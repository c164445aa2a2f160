"""Idempotency keys of task-creating `tools/call` through the wire (`server.idempotency`):
a resend with the same key gets the first send's task, in memory and in durable stores."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from fastmcp import Client, FastMCP
from fastmcp.server.auth.providers.jwt import StaticTokenVerifier
from fastmcp.utilities.tasks import TaskConfig

from fastmcp_tasks import TasksExtension
from fastmcp_tasks.wire.names import (
    EXPERIMENTAL_CAPABILITY,
    IDEMPOTENCY_META_KEY,
    RESENT_META_KEY,
)
from tests.test_store_contract import POSTGRES_URL, REDIS_URL, postgres_store, redis_store
from tests.wire import (
    MODERN,
    TASKS,
    Wire,
    WireError,
    http_server,
    http_wire_for,
    memory_wire,
    parse_http_response,
)

pytestmark = pytest.mark.anyio

#: Per server name: set to let its `held` tool finish.
RELEASE: dict[str, anyio.Event] = {}


def new_key() -> str:
    return uuid.uuid4().hex  # 32 characters of [0-9a-f]


def idempotent_server(
    name: str = "idem", *, auth: Any = None, **extension: Any
) -> tuple[FastMCP, Counter[str]]:
    mcp = FastMCP(name, auth=auth)
    mcp.add_extension(TasksExtension(**extension))
    runs: Counter[str] = Counter()

    @mcp.tool(task=True)
    async def work(x: int) -> int:
        runs["work"] += 1
        return x * 2

    @mcp.tool(task=True)
    async def other(x: int) -> int:
        runs["other"] += 1
        return x

    @mcp.tool(task=TaskConfig(mode="forbidden"))
    async def never_task(x: int) -> int:
        runs["never_task"] += 1
        return x

    @mcp.tool(task=True)
    async def held(x: int) -> int:
        runs["held"] += 1
        await RELEASE[mcp.name].wait()
        return x

    RELEASE[mcp.name] = anyio.Event()
    return mcp, runs


def keyed(
    name: str, arguments: dict[str, Any], key: Any, *, resent: bool = False
) -> dict[str, Any]:
    meta: dict[str, Any] = {IDEMPOTENCY_META_KEY: key}
    if resent:
        meta[RESENT_META_KEY] = True
    return {"name": name, "arguments": arguments, "_meta": meta}


async def send(wire: Wire, params: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return await wire.request("tools/call", params, **kw)


async def test_a_resend_gets_the_first_task_and_runs_nothing_again() -> None:
    mcp, runs = idempotent_server()
    key = new_key()
    async with memory_wire(mcp) as wire:
        first = await send(wire, keyed("work", {"x": 2}, key))
        again = await send(wire, keyed("work", {"x": 2}, key, resent=True))
        assert first["resultType"] == again["resultType"] == "task"
        assert again["taskId"] == first["taskId"]
        done = await wire.wait(first["taskId"])
        late = await send(wire, keyed("work", {"x": 2}, key, resent=True))
    assert done["status"] == "completed"
    assert late["taskId"] == first["taskId"] and late["status"] == "completed"
    assert runs["work"] == 1


async def test_a_cancelled_task_still_answers_its_key() -> None:
    mcp, runs = idempotent_server("cancelled")
    key = new_key()
    async with memory_wire(mcp) as wire:
        first = await send(wire, keyed("held", {"x": 1}, key))
        await wire.cancel(first["taskId"])
        ended = await wire.wait(first["taskId"])
        again = await send(wire, keyed("held", {"x": 1}, key, resent=True))
    assert ended["status"] == again["status"] == "cancelled"
    assert again["taskId"] == first["taskId"]
    assert runs["held"] <= 1  # (it may have started before the cancel)


async def test_different_keys_make_different_tasks() -> None:
    mcp, runs = idempotent_server()
    async with memory_wire(mcp) as wire:
        one = await send(wire, keyed("work", {"x": 1}, new_key()))
        two = await send(wire, keyed("work", {"x": 1}, new_key()))
        assert one["taskId"] != two["taskId"]
        for task in (one, two):
            await wire.wait(task["taskId"])
    assert runs["work"] == 2


@pytest.mark.parametrize(
    ("key", "problem"),
    [
        ("a" * 21, "22 to 128 characters, got 21"),
        ("a" * 129, "22 to 128 characters, got 129"),
        ("a" * 21 + "!", "only the characters"),
        ("a" * 21 + "=", "only the characters"),
        ("a" * 21 + "\x00", "only the characters"),
        ("a" * 21 + "é", "only the characters"),
        (12345678901234567890123, "must be a string, got a number"),
        (None, "must be a string, got null"),
        (["a" * 22], "must be a string, got an array"),
    ],
)
async def test_an_invalid_key_is_refused_and_the_server_keeps_serving(
    key: Any, problem: str
) -> None:
    mcp, runs = idempotent_server()
    extension = mcp._extensions[TASKS]
    async with memory_wire(mcp) as wire:
        with pytest.raises(WireError) as refused:
            await send(wire, keyed("work", {"x": 1}, key), malformed=True)
        assert len(extension.store) == 0  # nothing created
        fine = await send(wire, keyed("work", {"x": 1}, new_key()))
        await wire.wait(fine["taskId"])
    assert refused.value.code == -32602
    assert f"Invalid _meta['{IDEMPOTENCY_META_KEY}']" in refused.value.message
    assert problem in refused.value.message
    assert refused.value.data["key"] == IDEMPOTENCY_META_KEY
    assert problem in refused.value.data["problem"]
    assert runs["work"] == 1


async def test_a_lone_surrogate_key_is_refused() -> None:
    mcp, runs = idempotent_server()
    async with memory_wire(mcp) as wire:
        for key in ("\ud800", "a" * 21 + "\ud800"):
            with pytest.raises(WireError) as refused:
                await send(wire, keyed("work", {"x": 1}, key), malformed=True)
            assert refused.value.code == -32602
        fine = await send(wire, keyed("work", {"x": 1}, new_key()))
        await wire.wait(fine["taskId"])
    assert runs["work"] == 1


async def test_a_lone_surrogate_escape_over_http_is_refused() -> None:
    """`"\\ud800"` in the JSON body (no UTF-8 encoder would send the character itself)."""
    mcp, runs = idempotent_server()
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": keyed("work", {"x": 1}, "a" * 21 + "\ud800"),
    }
    body["params"]["_meta"].update(
        {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientInfo": {"name": "tests", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS: {}}},
        }
    )
    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/call",
        "Mcp-Name": "work",
    }
    async with http_server(mcp) as url, httpx.AsyncClient(timeout=10) as http:
        raw = json.dumps(body, ensure_ascii=True)  # the escape, as ASCII
        answer = parse_http_response(await http.post(url, content=raw, headers=headers))
        async with http_wire_for(url) as wire:
            fine = await send(wire, keyed("work", {"x": 1}, new_key()))
            await wire.wait(fine["taskId"])
    assert answer["error"]["code"] == -32602
    assert "only the characters" in answer["error"]["message"]
    assert runs["work"] == 1


async def test_a_key_reused_for_another_call_is_refused() -> None:
    mcp, runs = idempotent_server("reused")
    key = new_key()
    extension = mcp._extensions[TASKS]
    async with memory_wire(mcp) as wire:
        first = await send(wire, keyed("held", {"x": 1}, key))
        for params in (keyed("other", {"x": 1}, key), keyed("held", {"x": 2}, key)):
            with pytest.raises(WireError) as refused:
                await send(wire, params)
            assert refused.value.code == -32602
            assert "idempotency key already used for a different call" in refused.value.message
        RELEASE["reused"].set()
        await wire.wait(first["taskId"])
        for params in (keyed("other", {"x": 1}, key), keyed("held", {"x": 2}, key)):
            with pytest.raises(WireError) as ended:  # an ended task keeps tool and arguments
                await send(wire, params)
            assert ended.value.code == -32602
        same = await send(wire, keyed("held", {"x": 1}, key, resent=True))
        assert same["taskId"] == first["taskId"]
        assert len(extension.store) == 1
    assert runs["other"] == 0 and runs["held"] == 1


async def test_a_resend_that_would_run_synchronously_is_refused() -> None:
    mcp, runs = idempotent_server()
    async with memory_wire(mcp) as wire:
        for params, opt_in in (
            (keyed("never_task", {"x": 1}, new_key(), resent=True), True),  # forbidden
            (keyed("work", {"x": 1}, new_key(), resent=True), False),  # no tasks opt-in
            ({"name": "work", "arguments": {"x": 1}, "_meta": {RESENT_META_KEY: True}}, False),
        ):
            with pytest.raises(WireError) as refused:
                await send(wire, params, opt_in=opt_in)
            assert refused.value.code == -32602
            assert "was resent after a lost reply" in refused.value.message
            assert "so it was not run again" in refused.value.message
        first = await send(wire, keyed("never_task", {"x": 1}, new_key()))  # not resent: runs
    assert first["resultType"] == "complete"
    assert runs == Counter({"never_task": 1})


async def test_a_resend_on_a_legacy_connection_without_a_task_is_refused() -> None:
    mcp, runs = idempotent_server()
    async with memory_wire(mcp, mode="legacy") as wire:
        with pytest.raises(WireError) as refused:
            await send(wire, keyed("work", {"x": 1}, new_key(), resent=True), opt_in=False)
    assert refused.value.code == -32602 and "resent" in refused.value.message
    assert runs["work"] == 0


async def test_the_experimental_capability_is_advertised() -> None:
    mcp, _ = idempotent_server()
    async with memory_wire(mcp) as wire:
        discovered = (await wire.request("server/discover", {}))["capabilities"]
    assert discovered["experimental"][EXPERIMENTAL_CAPABILITY] == {"idempotencyKey": True}
    assert discovered["extensions"][TASKS] == {}
    async with Client(mcp, mode="legacy") as client:
        legacy = client.initialize_result.capabilities.model_dump(by_alias=True)
    assert legacy["experimental"][EXPERIMENTAL_CAPABILITY] == {"idempotencyKey": True}


TOKENS = {
    "alice-token": {"client_id": "app", "sub": "alice", "scopes": []},
    "bob-token": {"client_id": "app", "sub": "bob", "scopes": []},
}


async def test_a_key_is_scoped_to_its_principal() -> None:
    mcp, runs = idempotent_server(auth=StaticTokenVerifier(tokens=TOKENS))
    key = new_key()
    alice = {"Authorization": "Bearer alice-token"}
    bob = {"Authorization": "Bearer bob-token"}
    async with http_server(mcp) as url, http_wire_for(url) as wire:
        mine = await send(wire, keyed("work", {"x": 1}, key), headers=alice)
        theirs = await send(wire, keyed("work", {"x": 1}, key, resent=True), headers=bob)
        again = await send(wire, keyed("work", {"x": 1}, key, resent=True), headers=alice)
        assert theirs["taskId"] != mine["taskId"] and again["taskId"] == mine["taskId"]
        await wire.wait(mine["taskId"], headers=alice)
        await wire.wait(theirs["taskId"], headers=bob)
    assert runs["work"] == 2


async def test_a_resend_to_another_process_on_a_sqlite_file(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tasks.db'}"
    first_server, first_runs = idempotent_server("shared", url=url)
    second_server, second_runs = idempotent_server("shared", url=url)
    key = new_key()
    async with memory_wire(first_server) as one:
        first = await send(one, keyed("work", {"x": 3}, key))
        await one.wait(first["taskId"])
    async with memory_wire(second_server) as two:
        again = await send(two, keyed("work", {"x": 3}, key, resent=True))
    assert again["taskId"] == first["taskId"] and again["status"] == "completed"
    assert first_runs["work"] + second_runs["work"] == 1


@pytest.mark.parametrize("backend", ["redis", "postgres"])
async def test_a_resend_on_a_shared_server_store(backend: str) -> None:
    name = f"t{uuid.uuid4().hex[:16]}"
    if backend == "redis":
        cleanup = redis_store(prefix=name)  # skips without Redis; its close() clears
        url = f"{REDIS_URL}?prefix={name}"
    else:
        cleanup = postgres_store(schema=name)  # skips without PostgreSQL; close() drops
        url = f"{POSTGRES_URL}?schema={name}"
    try:
        mcp, runs = idempotent_server(url=url)
        key = new_key()
        async with memory_wire(mcp) as wire:
            first = await send(wire, keyed("work", {"x": 3}, key))
            again = await send(wire, keyed("work", {"x": 3}, key, resent=True))
            assert again["taskId"] == first["taskId"]
            await wire.wait(first["taskId"])
            late = await send(wire, keyed("work", {"x": 3}, key, resent=True))
        assert late["taskId"] == first["taskId"] and runs["work"] == 1
    finally:
        with anyio.fail_after(10):
            await cleanup.open()
            await cleanup.close()
