"""The server the fault tests drive: a few task tools that report to the test through events.

`fault_server(**extension)` builds it in process; `python tests/fault_server.py --url URL
--port N` serves it over Streamable HTTP on 127.0.0.1 (tools that need a test's release
then wait on files in `--dir`). `fastmcp-tasks worker tests/fault_server.py` builds it
from `FAULT_URL` (and `FAULT_DIR`).
"""

from __future__ import annotations

import argparse
import inspect
import os
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import anyio
from fastmcp import Context, FastMCP
from fastmcp.utilities.tasks import TaskConfig
from mcp.shared.exceptions import MCPError
from mcp_types import ToolAnnotations

from fastmcp_tasks import MemoryTaskStore, Progress, TasksExtension, TaskStore
from fastmcp_tasks.stores.sqlite import SQLiteTaskStore
from tests.wire import Wire, WireError, memory_wire

FAST = TaskConfig(poll_interval=timedelta(milliseconds=50))
NAME = "faults"


@dataclass
class Probes:
    """What the tools tell the test: started / cancelled / answered events, release gates."""

    events: dict[str, anyio.Event] = field(default_factory=dict)
    runs: list[str] = field(default_factory=list)
    directory: Path | None = None

    def event(self, name: str) -> anyio.Event:
        return self.events.setdefault(name, anyio.Event())

    def release(self, key: str) -> None:
        self.event(f"{key}.go").set()
        if self.directory is not None:
            (self.directory / f"{key}.go").touch()

    async def hold(self, key: str) -> None:
        self.runs.append(key)
        self.event(f"{key}.started").set()
        if self.directory is not None:
            (self.directory / f"{key}.started.{os.getpid()}").touch()
            while not (self.directory / f"{key}.go").exists():  # noqa: ASYNC110 - a file signal
                await anyio.sleep(0.02)
            return
        await self.event(f"{key}.go").wait()


def fault_server(
    directory: Path | None = None, **extension: Any
) -> tuple[FastMCP, TasksExtension, Probes]:
    mcp = FastMCP(NAME)
    tasks = TasksExtension(**extension)
    mcp.add_extension(tasks)
    probes = Probes(directory=directory)

    @mcp.tool(task=FAST)
    async def quick(text: str) -> str:
        return f"quick {text}"

    @mcp.tool(task=FAST, annotations=ToolAnnotations(idempotentHint=True))
    async def again(text: str) -> str:
        probes.runs.append(f"again {text}")
        return f"again {text}"

    @mcp.tool(task=FAST)
    async def blocker(key: str) -> str:
        try:
            await probes.hold(key)
        except anyio.get_cancelled_exc_class():
            probes.event(f"{key}.cancelled").set()
            raise
        return f"released {key}"

    @mcp.tool(task=FAST)
    async def refuse(reason: str) -> str:
        raise MCPError(code=-32050, message=f"refused: {reason}")

    @mcp.tool(task=FAST)
    async def ask(question: str, ctx: Context) -> str:
        probes.runs.append(f"ask {question}")
        try:
            answer = await ctx.elicit(question, bool)
        except anyio.get_cancelled_exc_class():
            probes.event(f"{question}.cancelled").set()
            raise
        probes.event(f"{question}.answered").set()
        return f"{question} -> {answer.action}:{getattr(answer, 'data', None)}"

    @mcp.tool(task=FAST)
    async def progress(steps: int, meter: Progress = Progress()) -> str:
        await meter.set_total(steps)
        for _ in range(steps):
            await meter.increment()
        await meter.set_message("almost there")
        return f"counted {steps}"

    @mcp.tool(task=FAST)
    async def reporting(ctx: Context) -> str:
        await ctx.report_progress(1, 3)
        await ctx.report_progress(2, 3, "two of three")
        return "reported"

    @mcp.tool
    def plain(x: int) -> int:
        return x + 1

    return mcp, tasks, probes


# --- driving it ------------------------------------------------------------------


def store_factory(
    kind: str, directory: Path
) -> tuple[Callable[[], TaskStore], Callable[[], Awaitable[None]]]:
    """Unopened stores of `kind` on the same data (one file in `directory`, one Redis
    prefix), and the cleanup to await once every store is closed (Redis: delete the keys).

    Redis skips (fails when `CI=true`) when unreachable, as the store contract does.
    """
    from tests.test_store_contract import REDIS_URL, redis_store

    async def nothing() -> None:
        pass

    if kind == "memory":
        return MemoryTaskStore, nothing
    if kind == "sqlite":
        return lambda: SQLiteTaskStore(directory / "tasks.db"), nothing
    redis_store()  # the skip, before any test body runs
    from fastmcp_tasks.stores.redis import RedisTaskStore

    prefix = f"faults-{uuid.uuid4().hex[:12]}"

    def make() -> TaskStore:
        return RedisTaskStore(REDIS_URL, prefix=prefix)  # closing it keeps the keys

    async def clear() -> None:
        store = RedisTaskStore(REDIS_URL, prefix=prefix)
        await store.open()
        try:
            await store.clear()
        finally:
            await store.close()

    return make, clear


@asynccontextmanager
async def served(store: TaskStore, **extension: Any) -> AsyncIterator[tuple[Wire, Any, Probes]]:
    """`fault_server(store=store, ...)` entered, with a `Wire` to it in memory."""
    mcp, tasks, probes = fault_server(store=store, **extension)
    async with memory_wire(mcp) as wire:
        yield wire, tasks, probes


def secrets_of(store: TaskStore) -> list[str]:
    """What a client must never read in an error: paths, hosts, ports, passwords."""
    path = getattr(store, "path", None)
    if path is not None:
        return [str(path), str(path.parent)]
    url = getattr(store, "url", None)
    if store.scheme in ("redis", "postgresql") and isinstance(url, str):
        parts = urlsplit(url)
        return [v for v in (parts.hostname, str(parts.port), parts.password) if v]
    return []


def assert_unavailable(error: WireError, store: TaskStore) -> None:
    assert error.code == -32603, error
    assert error.message.startswith("Task store unavailable"), error.message
    for secret in secrets_of(store):
        assert secret not in error.message, f"{secret!r} leaked: {error.message}"


async def health(tasks: TasksExtension) -> Any:
    state = tasks.health()  # type: ignore[attr-defined]
    return await state if inspect.isawaitable(state) else state


async def health_until(
    tasks: TasksExtension, check: Callable[[Any], bool], within: float = 10
) -> Any:
    with anyio.fail_after(within):
        while not check(state := await health(tasks)):  # noqa: ASYNC110 - a deadline poll
            await anyio.sleep(0.02)
    return state


def healthy(state: Any) -> bool:
    return state.status == "ok" and state.store_reachable and state.pending_outcomes == 0


async def call_until_created(
    wire: Wire, tool: str, args: dict[str, Any], within: float = 15
) -> str:
    """`tools/call` until the store answers again (each refusal must be the clean -32603)."""
    with anyio.fail_after(within):
        while True:
            try:
                return str((await wire.call_tool(tool, args))["taskId"])
            except WireError as error:
                assert error.code == -32603 and "Task store unavailable" in error.message
            await anyio.sleep(0.05)


async def completes(wire: Wire, tool: str, args: dict[str, Any], text: str) -> None:
    """A new task of `tool` runs to `completed` with `text`: the engine still serves."""
    task = await wire.wait((await wire.call_tool(tool, args))["taskId"])
    assert task["status"] == "completed", task
    assert task["result"]["content"][0]["text"] == text


async def nothing_stuck(store: TaskStore, within: float = 10) -> None:
    with anyio.fail_after(within):
        while active := await store.active_tasks():  # noqa: ASYNC110 - a deadline poll
            await anyio.sleep(0.05)
    assert not active


def exception_tree(error: BaseException) -> list[BaseException]:
    """`error`, its causes, contexts and group members."""
    found: list[BaseException] = []
    todo = [error]
    while todo:
        item = todo.pop()
        if any(item is seen for seen in found):
            continue
        found.append(item)
        todo.extend(getattr(item, "exceptions", ()))
        todo.extend(e for e in (item.__cause__, item.__context__) if e is not None)
    return found


if "FAULT_URL" in os.environ:  # `fastmcp-tasks worker tests/fault_server.py`
    _dir = os.environ.get("FAULT_DIR")
    mcp, _, _ = fault_server(
        Path(_dir) if _dir else None,
        url=os.environ["FAULT_URL"],
        lease=timedelta(seconds=2),
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--concurrency", type=int, default=100)
    args = parser.parse_args()
    server, _, _ = fault_server(
        Path(args.dir),
        url=args.url,
        concurrency=args.concurrency,
        lease=timedelta(seconds=2),
    )
    server.run(transport="http", host="127.0.0.1", port=args.port, path="/mcp", show_banner=False)


if __name__ == "__main__":
    main()
