"""Expired and purged tasks: their owner hears so (when, why); anyone else hears "not found".

A store that keeps tombstones (`stores.flow`: memory, SQLite and Redis) lets
`tasks/get`, `tasks/update` and `tasks/cancel`, and the 2025-11-25 `tasks/get`,
`tasks/result` and `tasks/cancel`, answer the principal that
owned a removed task with `-32602` "Task expired" / "Task purged" and its data, while
another principal gets the very answer an unknown id gets. The operator's
`fastmcp-tasks show` says it too, and `fastmcp-tasks get` prints the server's message.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from fastmcp import Client, FastMCP
from fastmcp.server.auth.providers.jwt import StaticTokenVerifier

from fastmcp_tasks import MemoryTaskStore, SQLiteTaskStore, TasksExtension
from fastmcp_tasks.cli.operator import OperatorError, _show
from fastmcp_tasks.client.handles import call_tool_task
from fastmcp_tasks.errors import error_object, task_not_found
from fastmcp_tasks.stores.base import TaskStore
from fastmcp_tasks.stores.flow import keeps_flow_control
from fastmcp_tasks.testing.base import make_record
from tests.test_auth import TOKENS, as_user
from tests.test_store_contract import REDIS_URL, redis_store
from tests.wire import MODERN, Wire, WireError, http_server, memory_wire_for, parse_http_response

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).parent.parent
COMMAND = [str(Path(sys.executable).parent / "fastmcp-tasks")]
ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
EXPIRED = re.compile(
    r"Failed to retrieve task: Task expired \((?P<id>[^)]+)\): it finished and its "
    r"retention ran out at (?P<at>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)"
)


def server(
    store: TaskStore | None = None,
    *,
    retention: timedelta | None = timedelta(0),
    auth: bool = False,
) -> FastMCP:
    """A server whose finished tasks expire at once (`retention=0`), or are kept."""
    mcp = FastMCP("expiring", auth=StaticTokenVerifier(tokens=TOKENS) if auth else None)
    mcp.add_extension(
        TasksExtension(store=store if store is not None else MemoryTaskStore(), retention=retention)
    )

    @mcp.tool(task=True)
    async def quick(text: str = "hi") -> str:
        return f"quick {text}"

    return mcp


def store_of(mcp: FastMCP) -> Any:
    return mcp._extensions["io.modelcontextprotocol/tasks"].store


async def gone(wire: Wire, task_id: str, **kw: Any) -> WireError:
    """Poll `tasks/get` until the task is no longer readable (bounded); that error."""
    with anyio.fail_after(10):
        while True:
            try:
                await wire.get(task_id, **kw)
            except WireError as exc:
                return exc
            await anyio.sleep(0.005)


def removed_at(error: WireError) -> float:
    return (
        datetime.strptime(error.data["removedAt"], "%Y-%m-%dT%H:%M:%SZ")
        .replace(tzinfo=UTC)
        .timestamp()
    )


# --- through the wire, in memory, without authentication ------------------------------------


async def test_an_expired_task_says_so_with_when_and_why() -> None:
    mcp = server()
    async with Client(mcp) as client:
        wire = memory_wire_for(client)
        before = time.time()
        task = await call_tool_task(client, "quick")
        assert task.task_id is not None
        error = await gone(wire, task.task_id)
        assert error.code == -32602
        match = EXPIRED.fullmatch(error.message)
        assert match is not None, error.message
        assert match["id"] == task.task_id
        assert error.data == {"taskId": task.task_id, "reason": "expired", "removedAt": match["at"]}
        assert int(before) <= removed_at(error) <= time.time() + 1
        # tasks/update and tasks/cancel answer the same
        for method, extra in (("tasks/update", {"inputResponses": {}}), ("tasks/cancel", {})):
            with pytest.raises(WireError) as again:
                await wire.request(method, {"taskId": task.task_id, **extra})
            assert (again.value.code, again.value.message, again.value.data) == (
                error.code,
                error.message,
                error.data,
            )


async def test_an_id_that_never_existed_is_not_found() -> None:
    async with Client(server()) as client:
        wire = memory_wire_for(client)
        with pytest.raises(WireError) as unknown:
            await wire.get("n" * 32)
    assert unknown.value.code == -32602
    assert "Task not found" in unknown.value.message and unknown.value.data is None
    assert {"code": -32602, "message": unknown.value.message} == error_object(
        task_not_found("n" * 32)
    )


async def test_a_purged_task_says_an_operator_removed_it() -> None:
    mcp = server(retention=timedelta(hours=1))
    store = store_of(mcp)
    async with Client(mcp) as client:
        wire = memory_wire_for(client)
        task = await call_tool_task(client, "quick")
        assert task.task_id is not None
        await task.result(timeout=10)
        assert (await wire.get(task.task_id))["status"] == "completed"
        assert await store.purge_finished(time.time() + 1) == 1
        error = await gone(wire, task.task_id)
    assert error.code == -32602
    assert error.message.startswith(f"Failed to retrieve task: Task purged ({task.task_id}): ")
    assert error.data["reason"] == "purged" and ISO.fullmatch(error.data["removedAt"])
    assert error.data["taskId"] == task.task_id


async def test_without_tombstones_an_expired_task_is_not_found() -> None:
    mcp = server(MemoryTaskStore(tombstone_retention=None))
    async with Client(mcp) as client:
        wire = memory_wire_for(client)
        task = await call_tool_task(client, "quick")
        assert task.task_id is not None
        error = await gone(wire, task.task_id)
    assert error_object(task_not_found(task.task_id)) == {
        "code": error.code,
        "message": error.message,
    }


async def test_the_2025_11_25_methods_say_expired_too() -> None:
    mcp = server()
    async with Client(mcp, mode="legacy") as client:
        wire = memory_wire_for(client, "memory-legacy")
        created = await wire.request(
            "tools/call", {"name": "quick", "arguments": {}, "task": {}}, opt_in=False
        )
        task_id = created["task"]["taskId"]
        errors = []
        with anyio.fail_after(10):
            while not errors:
                try:
                    await wire.request("tasks/get", {"taskId": task_id}, opt_in=False)
                except WireError as exc:
                    errors.append(exc)
                await anyio.sleep(0.005)
        for method in ("tasks/result", "tasks/cancel"):
            with pytest.raises(WireError) as again:
                await wire.request(method, {"taskId": task_id}, opt_in=False)
            errors.append(again.value)
    for error in errors:
        assert error.code == -32602
        assert EXPIRED.fullmatch(error.message), error.message
        assert error.data["reason"] == "expired" and error.data["taskId"] == task_id


# --- over HTTP, with two principals -----------------------------------------------------------


@asynccontextmanager
async def raw_http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=10) as http:
        yield http


async def raw_answer(
    http: httpx.AsyncClient, url: str, method: str, params: dict[str, Any], token: str
) -> tuple[int, str]:
    """One request with a fixed JSON-RPC id: the HTTP status and the answer's JSON text."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientInfo": {"name": "tests", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {
            "extensions": {"io.modelcontextprotocol/tasks": {}}
        },
    }
    body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": {**params, "_meta": meta}}
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": method,
        **as_user(token),
    }
    response = await http.post(url, json=body, headers=headers)
    message = parse_http_response(response)
    assert "error" in message, message
    return response.status_code, json.dumps(message)


async def test_only_the_owner_hears_expired_and_others_get_the_unknown_answer() -> None:
    mcp = server(auth=True)
    store = store_of(mcp)
    async with (
        http_server(mcp) as url,
        Client(url, auth="alice-token") as alice,
        raw_http() as http,
    ):
        task = await call_tool_task(alice, "quick")
        assert task.task_id is not None
        task_id = task.task_id
        error = await gone(memory_wire_for(alice, "http"), task_id)
        assert EXPIRED.fullmatch(error.message) and error.data["reason"] == "expired"
        assert await store.tombstone(task_id) is not None
        calls = [
            ("tasks/get", {"taskId": task_id}),
            ("tasks/cancel", {"taskId": task_id}),
            ("tasks/update", {"taskId": task_id, "inputResponses": {}}),
        ]
        bob = [await raw_answer(http, url, m, p, "bob-token") for m, p in calls]
        owner = [await raw_answer(http, url, m, p, "alice-token") for m, p in calls]
        assert all("Task expired" in text for _, text in owner)
        assert not any("Task expired" in text or "removedAt" in text for _, text in bob)
        store._flow.tombstones.clear()  # now the id is simply unknown, to everyone
        unknown = [await raw_answer(http, url, m, p, "bob-token") for m, p in calls]
        forgotten = [await raw_answer(http, url, m, p, "alice-token") for m, p in calls]
    assert bob == unknown == forgotten  # byte for byte: status and JSON-RPC error
    assert json.loads(bob[0][1])["error"] == error_object(task_not_found(task_id))


# --- the command line -------------------------------------------------------------------------


async def test_show_says_when_a_task_expired_or_was_purged(
    capsys: pytest.CaptureFixture[str],
) -> None:
    store = MemoryTaskStore()
    expired, purged = make_record(retention_ms=0), make_record()
    for record in (expired, purged):
        await store.create(record)
        await store.transition(record.task_id, "completed", result={"content": []})
    await store.purge_expired(time.time())
    assert await store.purge_finished(time.time() + 1) == 1
    with pytest.raises(OperatorError) as first:
        await _show(store, expired.task_id, False, "memory://")  # type: ignore[arg-type]
    with pytest.raises(OperatorError) as second:
        await _show(store, purged.task_id, False, "memory://")  # type: ignore[arg-type]
    with pytest.raises(OperatorError) as third:
        await _show(store, "never", False, "memory://")  # type: ignore[arg-type]
    assert f"task {expired.task_id!r} in memory:// expired (its retention ran out) at " in str(
        first.value
    )
    assert f"task {purged.task_id!r} in memory:// was purged at " in str(second.value)
    assert str(third.value) == "no task 'never' in memory:// (never created, expired or purged)"
    assert first.value.status == second.value.status == 1


async def test_the_get_command_prints_the_server_s_expired_message() -> None:
    mcp = server()
    async with http_server(mcp) as url, Client(url) as client:
        task = await call_tool_task(client, "quick")
        assert task.task_id is not None
        await gone(memory_wire_for(client, "http"), task.task_id)
        with anyio.fail_after(60):
            done = await anyio.run_process(
                [*COMMAND, "get", url, task.task_id],
                cwd=ROOT,
                check=False,
                stdin=subprocess.DEVNULL,
            )
    err = done.stderr.decode()
    assert done.returncode == 1, err
    assert f"Task expired ({task.task_id}): it finished and its retention ran out at" in err
    assert "(error -32602)" in err and '"reason": "expired"' in err


# --- real SQLite and Redis stores, built from their URLs ------------------------------------


@pytest.mark.parametrize("kept", [timedelta(hours=24), None])
async def test_stores_from_a_url_keep_tombstones_as_configured(
    tmp_path: Path, kept: timedelta | None
) -> None:
    urls = [f"sqlite:///{tmp_path / 'tasks.db'}"]
    redis = redis_store()  # skips without Redis (fails when CI=true)
    urls.append(f"{REDIS_URL}?prefix={redis.keys.prefix}")  # type: ignore[attr-defined]
    try:
        for url in urls:
            mcp = FastMCP("expiring")
            extension = TasksExtension(url, retention=timedelta(0), tombstone_retention=kept)
            mcp.add_extension(extension)

            @mcp.tool(task=True)
            async def quick() -> str:
                return "quick"

            assert keeps_flow_control(extension.store)
            async with Client(mcp) as client:
                task = await call_tool_task(client, "quick")
                assert task.task_id is not None
                error = await gone(memory_wire_for(client), task.task_id)
            if kept is None:
                assert error.message == error_object(task_not_found(task.task_id))["message"]
            else:
                assert EXPIRED.fullmatch(error.message), (url, error.message)
    finally:
        await redis.open()
        await redis.close()


async def test_on_a_sqlite_file(tmp_path: Path) -> None:
    db = tmp_path / "tasks.db"
    mcp = server(SQLiteTaskStore(db))
    async with Client(mcp) as client:
        wire = memory_wire_for(client)
        task = await call_tool_task(client, "quick")
        assert task.task_id is not None
        error = await gone(wire, task.task_id)
    assert EXPIRED.fullmatch(error.message) and error.data["reason"] == "expired"
    with anyio.fail_after(60):
        done = await anyio.run_process(
            [*COMMAND, "show", task.task_id, "--url", f"sqlite:///{db}"],
            cwd=ROOT,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    assert done.returncode == 1
    assert "expired (its retention ran out) at" in done.stderr.decode()
