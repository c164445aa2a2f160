"""The store calls that leave a task's payloads where they are: `settle`
(`stores.settling`) and `peek` (`stores.peeking`).

Each durable store's `settle` works with its record decoder broken (so it decodes
nothing); a task run to completion through the wire is recorded with `settle`, never
with `transition`, and its result reads back as the tool returned it; `tasks/get`
reads the task with `peek`, never `get`, on both protocol generations' paths.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from fastmcp import Client, FastMCP

from fastmcp_tasks import Progress, TasksExtension
from fastmcp_tasks.server.health import HealthMonitor
from fastmcp_tasks.server.monitored_store import monitored
from fastmcp_tasks.server.sealed_store import sealed_store
from fastmcp_tasks.server.sealing import Sealer
from fastmcp_tasks.stores.base import TaskStore
from fastmcp_tasks.stores.peeking import peek
from fastmcp_tasks.stores.postgres import PostgresTaskStore
from fastmcp_tasks.stores.postgres import transitions as postgres_transitions
from fastmcp_tasks.stores.redis import RedisTaskStore
from fastmcp_tasks.stores.redis import store as redis_module
from fastmcp_tasks.stores.settling import lean_method
from fastmcp_tasks.stores.sqlite import SQLiteTaskStore
from fastmcp_tasks.stores.sqlite.tx import Tx
from fastmcp_tasks.testing import make_record
from tests.test_store_contract import postgres_store, redis_store
from tests.wire import connect, memory_wire_for

pytestmark = pytest.mark.anyio


def broken(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("settle read a record back")


@pytest.fixture(params=["sqlite", "redis", "postgres"])
async def durable(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[str, TaskStore]]:
    makers: dict[str, Callable[[], TaskStore]] = {
        "sqlite": lambda: SQLiteTaskStore(str(tmp_path / "tasks.db")),
        "redis": redis_store,
        "postgres": postgres_store,
    }
    store = makers[request.param]()
    await store.open()
    try:
        yield request.param, store
    finally:
        await store.close()


async def test_settle_decodes_no_record(
    durable: tuple[str, TaskStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    kind, store = durable
    ended, waiting = make_record(arguments={"big": "x" * 10_000}), make_record()
    for record in (ended, waiting):
        await store.create(record)
    where: dict[str, tuple[Any, str]] = {
        "sqlite": (Tx, "load"),
        "redis": (redis_module, "decode_task"),
        "postgres": (postgres_transitions, "from_row"),
    }  # (SQLite's `settle_message` reads two columns, never through `Tx.load`)
    replies: list[Any] = []
    sender = {"redis": "_task_script", "postgres": "_query"}.get(kind)
    if sender is not None:  # what the server answered: no task's fields
        original = getattr(store, sender)

        async def sent(*args: Any, **kw: Any) -> Any:
            replies.append(reply := await original(*args, **kw))
            return reply

        monkeypatch.setattr(store, sender, sent)
    with monkeypatch.context() as patch:
        patch.setattr(*where[kind], broken)
        with anyio.fail_after(10):
            assert await store.settle(ended.task_id, "completed", result={"n": 1}) is True  # type: ignore[attr-defined]
            assert await store.settle(ended.task_id, "cancelled") is False  # type: ignore[attr-defined]
            say = store.settle_message  # type: ignore[attr-defined]
            assert await say(waiting.task_id, "step 1") is True
            assert await say(ended.task_id, "too late") is False
    if sender is not None:  # applied, and nothing else: 1, (1, count) or (message, count)
        assert replies[0] in (1, [(1, 0)], [(1, 1)]), replies
        assert replies[2] in (1, [("step 1", 0)], [("step 1", 1)]), replies
    found = await store.get(ended.task_id)
    assert found is not None and found.status == "completed" and found.result == {"n": 1}
    said = await store.get(waiting.task_id)
    assert said is not None and said.status_message == "step 1"


def echo_server(name: str, tmp_path: Path) -> tuple[FastMCP, TasksExtension]:
    mcp = FastMCP(name)
    extension = TasksExtension(url=f"sqlite:///{tmp_path / 'tasks.db'}")
    mcp.add_extension(extension)

    @mcp.tool(task=True)
    async def echo(text: str) -> str:
        return text

    return mcp, extension


def spy_on(extension: TasksExtension, names: tuple[str, ...], calls: list[str]) -> None:
    """Note in `calls` each call of `names` on the extension's innermost store."""
    inner = getattr(extension.store, "inner", extension.store)
    for name in names:
        original = getattr(inner, name)

        async def spy(*args: Any, _name: str = name, _fn: Any = original, **kw: Any) -> Any:
            calls.append(_name)
            return await _fn(*args, **kw)

        setattr(inner, name, spy)


async def test_the_engine_records_an_outcome_with_settle(tmp_path: Path) -> None:
    mcp, extension = echo_server("settling", tmp_path)
    calls: list[str] = []
    with anyio.fail_after(20):
        async with connect(mcp, "memory") as wire:
            spy_on(extension, ("transition", "settle"), calls)
            created = await wire.call_tool("echo", {"text": "done"})
            done = await wire.wait(created["taskId"])
    assert done["status"] == "completed" and done["result"]["content"][0]["text"] == "done"
    assert calls == ["settle"]


async def test_tasks_get_reads_the_task_with_peek(tmp_path: Path) -> None:
    mcp, extension = echo_server("peeking", tmp_path)
    calls: list[str] = []
    with anyio.fail_after(20):
        async with connect(mcp, "memory") as wire:
            spy_on(extension, ("get", "peek"), calls)
            created = await wire.call_tool("echo", {"text": "x" * 10_000})
            await wire.wait(created["taskId"])
            calls.clear()  # the worker's own reads are not tasks/get's
            got = await wire.get(created["taskId"])
    assert got["status"] == "completed" and got["result"]["content"][0]["text"] == "x" * 10_000
    assert calls == ["peek"]


class Redacting:
    """A third-party wrapper: its own `transition` and `get`, the rest forwarded."""

    def __init__(self, inner: TaskStore) -> None:
        self.inner = inner
        self.scheme, self.durable = inner.scheme, inner.durable

    async def transition(self, task_id: str, status: Any, **fields: Any) -> Any:
        if fields.get("result") is not None:
            result = dict(fields["result"], content=[{"type": "text", "text": "[redacted]"}])
            result.pop("structuredContent", None)
            fields["result"] = result
        return await self.inner.transition(task_id, status, **fields)

    async def get(self, task_id: str) -> Any:
        found = await self.inner.get(task_id)
        if found is not None:
            found.status_message = "seen by the wrapper"
        return found

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_a_wrappers_own_transition_and_get_are_never_skipped(tmp_path: Path) -> None:
    """The inner store settles and peeks, the wrapper only forwards those: the engine and
    `tasks/get` use the wrapper's own `transition` and `get`."""
    inner = SQLiteTaskStore(str(tmp_path / "tasks.db"))
    mcp = FastMCP("wrapped")
    mcp.add_extension(TasksExtension(store=Redacting(inner)))  # type: ignore[arg-type]

    @mcp.tool(task=True)
    async def echo(text: str) -> str:
        return text

    with anyio.fail_after(20):
        async with connect(mcp, "memory") as wire:
            created = await wire.call_tool("echo", {"text": "card 4111"})
            await wire.wait(created["taskId"])
            got = await wire.get(created["taskId"])
    assert got["result"]["content"][0]["text"] == "[redacted]"
    assert got["statusMessage"] == "seen by the wrapper"


class Hiding(SQLiteTaskStore):
    """A subclass of a bundled store whose own `get` hides every task."""

    async def get(self, task_id: str) -> Any:
        return None


class Caching(Redacting):
    """A wrapper that keeps what it forwards in its own `__dict__`."""

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.inner, name)
        self.__dict__[name] = value
        return value


async def test_a_subclass_or_caching_wrapper_keeps_its_own_get(tmp_path: Path) -> None:
    """`peek` inherited from above a subclass's own `get`, or cached in a wrapper's
    `__dict__`, is not used instead of it (`stores.settling.lean_method`)."""
    hiding = Hiding(str(tmp_path / "hiding.db"))
    caching = Caching(SQLiteTaskStore(str(tmp_path / "caching.db")))
    assert getattr(caching, "peek", None) is not None  # now in its __dict__
    for store in (hiding, caching):
        await store.open()
        try:
            record = make_record()
            await store.create(record)
            found = await peek(store, record.task_id)
            if store is hiding:
                assert found is None
            else:
                assert found is not None and found.status_message == "seen by the wrapper"
        finally:
            await store.close()


async def test_redis_peek_of_a_task_with_thousands_of_fields_answers_get() -> None:
    """The `peek` script reads a hash's fields a thousand at a time: 9,000 outstanding
    input requests, more than Lua's `unpack` takes at once, are answered as `get`
    answers them."""
    store = redis_store()
    await store.open()
    try:
        record = make_record(arguments={"big": "x" * 1000})
        await store.create(record)
        question = {"method": "elicitation/create", "params": {"message": "?"}}
        for n in range(5):  # each call below `unpack`'s limit too
            asked = {f"k{n}-{i}": question for i in range(1800)}
            assert await store.request_input(record.task_id, asked) is not None
        full, lean = await store.get(record.task_id), await peek(store, record.task_id)
        assert full is not None and len(full.input_requests or {}) == 9000
        assert lean == dataclasses.replace(full, arguments=None, context=None)
    finally:
        await store.close()


async def test_a_2025_11_25_tasks_get_and_status_push_read_the_task_with_peek(
    tmp_path: Path,
) -> None:
    mcp, extension = echo_server("legacy-peeking", tmp_path)
    calls: list[str] = []
    with anyio.fail_after(20):
        async with Client(mcp, mode="legacy") as client:
            wire = memory_wire_for(client, "memory-legacy")
            spy_on(extension, ("get", "peek"), calls)
            params = {"name": "echo", "arguments": {"text": "old"}, "task": {}}
            created = await wire.request("tools/call", params, opt_in=False)
            task_id = created["task"]["taskId"]
            while True:
                calls.clear()  # the worker's own reads, while it runs, are not tasks/get's
                got = await wire.request("tasks/get", {"taskId": task_id}, opt_in=False)
                if got["status"] == "completed":
                    break
                await anyio.sleep(0.01)
    # the status pushes to this session read the task too, as `tasks/get` does
    assert "peek" in calls and "get" not in calls, calls


async def test_a_tools_progress_messages_are_written_with_settle_message(tmp_path: Path) -> None:
    mcp, extension = echo_server("reporting", tmp_path)

    @mcp.tool(task=True)
    async def count(steps: int, meter: Progress = Progress()) -> str:
        await meter.set_total(steps)
        for _ in range(steps):
            await meter.increment()
        return f"counted {steps}"

    calls: list[str] = []
    with anyio.fail_after(20):
        async with connect(mcp, "memory") as wire:
            spy_on(extension, ("set_status_message", "settle_message"), calls)
            created = await wire.call_tool("count", {"steps": 3})
            done = await wire.wait(created["taskId"])
    assert done["result"]["content"][0]["text"] == "counted 3"
    assert calls and set(calls) == {"settle_message"}


LEAN = (("settle", "transition"), ("settle_message", "set_status_message"), ("peek", "get"))


@pytest.mark.parametrize("kind", ["sqlite", "redis", "postgres"])
@pytest.mark.parametrize("sealed", [False, True], ids=["plain", "sealed"])
def test_every_bundled_durable_store_takes_every_lean_path(
    kind: str, sealed: bool, tmp_path: Path
) -> None:
    """Each lean method is defined at least as far down as the one it replaces, in each
    bundled durable store and in the wrappers a server puts around it: none is skipped
    (`stores.settling.lean_method`)."""
    made: dict[str, Callable[[], TaskStore]] = {
        "sqlite": lambda: SQLiteTaskStore(str(tmp_path / "tasks.db")),
        "redis": lambda: RedisTaskStore("redis://127.0.0.1:6379/15"),
        "postgres": lambda: PostgresTaskStore("postgresql://127.0.0.1/test"),
    }
    store = made[kind]()  # not opened: the choice is the classes'
    sealer = Sealer([secrets.token_urlsafe(32)]) if sealed else None
    layers = [store, sealed_store(store, sealer, seal_all=True)]
    layers.append(monitored(layers[-1], HealthMonitor(), 5.0))
    for layer in layers:
        for lean, full in LEAN:
            assert lean_method(layer, lean, full) is not None, (type(layer).__name__, lean)


async def test_tasks_cancel_ends_a_waiting_task_with_settle(tmp_path: Path) -> None:
    """A task no process runs (a front end with `concurrency=0`) is ended by `tasks/cancel`
    itself, without the task read back."""
    mcp = FastMCP("cancelling")
    extension = TasksExtension(url=f"sqlite:///{tmp_path / 'tasks.db'}", concurrency=0)
    mcp.add_extension(extension)

    @mcp.tool(task=True)
    async def echo(text: str) -> str:
        return text

    calls: list[str] = []
    with anyio.fail_after(20):
        async with connect(mcp, "memory") as wire:
            spy_on(extension, ("transition", "settle"), calls)
            created = await wire.call_tool("echo", {"text": "never run"})
            await wire.cancel(created["taskId"])
            done = await wire.get(created["taskId"])
    assert done["status"] == "cancelled"
    assert calls == ["settle"]
