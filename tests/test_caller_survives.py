"""The caller keeps its task: real processes, real faults, seen from the client's side.

A front end that runs nothing (`concurrency=0`) and a `fastmcp-tasks worker` share a
store (a SQLite file, a Redis prefix or a PostgreSQL schema). Three callers follow one
task each, as users do: the transparent `Client.call_tool()`, a `ToolTask` handle's
`result()`, and the `fastmcp-tasks call` command. The front end is then killed (or
stopped by SIGTERM, as a deploy does) in the middle of the tasks and started again
on the same port much later than any short retry budget: every caller must still
get its result, and no tool body may run twice.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import pytest
from fastmcp import Client
from mcp.shared.exceptions import MCPError

from fastmcp_tasks import TaskUnreachable, call_tool_task
from fastmcp_tasks.client import TasksClientExtension
from fastmcp_tasks.wire.models import GetTaskRequest, TaskIdParams, TaskState
from tests.private_servers import Lines, blackhole_proxy
from tests.test_durability import Server, Worker, release, started_in, store_at
from tests.test_store_contract import REDIS_URL, redis_store
from tests.wire import free_port

ROOT = Path(__file__).parent.parent
#: How long the front end stays down: far beyond a few quick retries (about 3 s).
DOWN = float(os.environ.get("FASTMCP_TASKS_TEST_DOWN", "20"))

pytestmark = [pytest.mark.anyio, pytest.mark.bound(DOWN + 100)]

__all__ = ["store_at"]  # the fixture, parametrized over SQLite, Redis and PostgreSQL


@asynccontextmanager
async def deployment(
    tmp_path: Path, db: str, lease: float = 2.0
) -> AsyncIterator[tuple[Server, Worker, Path]]:
    """A `concurrency=0` front end on a fixed port and one worker, on one store. A store
    outage longer than `lease` rightly makes the worker's running task recoverable by
    another process (a non-idempotent one then fails): tests of such outages lengthen it."""
    markers = tmp_path / "markers"
    markers.mkdir(exist_ok=True)
    worker = Worker(db, markers, lease=lease)
    front = Server(db, markers, concurrency=0, port=free_port(), lease=lease)
    try:
        await worker.ready()
        await front.ready()
        yield front, worker, markers
    finally:
        front.stop()
        worker.stop()


def runs(markers: Path, key: str) -> int:
    """How many times the tool body of `key` started (one marker file per start)."""
    return len(list(markers.glob(f"{key}.started.*")))


def restart(front: Server, db: str, markers: Path) -> Server:
    """A new front end on the same port (the old one must be gone)."""
    return Server(db, markers, concurrency=0, port=front.port)


def cli(*arguments: str) -> Any:
    """`fastmcp-tasks ARGUMENTS...` as a subprocess (stdin closed, output piped)."""
    command = [sys.executable, "-m", "fastmcp_tasks", *arguments]
    return subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL
    )


def cli_call(url: str, tool: str, *arguments: str, reconnect: float | None = None) -> Any:
    extra = [] if reconnect is None else ["--reconnect-timeout", str(reconnect)]
    return cli("call", url, tool, *arguments, *extra)


async def finished(process: Any, within: float) -> tuple[int, str, str]:
    out, err = await anyio.to_thread.run_sync(lambda: process.communicate(timeout=within))
    return process.returncode, out.decode(), err.decode()


async def gather(*jobs: Callable[[], Awaitable[Any]]) -> list[Any]:
    results: list[Any] = [None] * len(jobs)

    async def run(index: int, job: Callable[[], Awaitable[Any]]) -> None:
        results[index] = await job()

    async with anyio.create_task_group() as group:
        for index, job in enumerate(jobs):
            group.start_soon(run, index, job)
    return results


async def three_callers(
    front: Server, markers: Path, outage: Callable[[], Awaitable[None]]
) -> None:
    """Start three callers on `plain_job`, run `outage` once all three tools run, release."""
    cli = cli_call(front.url, "plain_job", "key=cli")

    async def transparent() -> str:
        async with Client(front.url) as client:
            return str((await client.call_tool("plain_job", {"key": "call"})).data)

    async def handle() -> str:
        async with Client(front.url) as client:
            task = await call_tool_task(client, "plain_job", {"key": "handle"})
            return str((await task.result()).data)

    async def cli_result() -> str:
        code, out, err = await finished(cli, 120)
        assert code == 0, err
        assert "Traceback" not in err, err
        return out.strip().splitlines()[-1]

    async def fault() -> None:
        for key in ("call", "handle", "cli"):
            await started_in(markers, key)
        await outage()
        for key in ("call", "handle", "cli"):
            release(markers, key)

    try:
        with anyio.fail_after(DOWN + 90):
            got = await gather(transparent, handle, cli_result, fault)
    finally:
        if cli.poll() is None:
            cli.kill()
    assert got[:3] == ["plain call", "plain handle", "plain cli"]
    for key in ("call", "handle", "cli"):  # each tool body ran exactly once
        assert runs(markers, key) == 1


@pytest.mark.parametrize("how", ["sigkill", "sigterm"])
async def test_callers_ride_through_a_restart(tmp_path: Path, store_at: str, how: str) -> None:
    """SIGKILL and a new front end 20 s later; or SIGTERM, as a deploy, and 5 s later."""
    async with deployment(tmp_path, store_at) as (front, _worker, markers):
        replacements: list[Server] = []

        async def stop_then_replace() -> None:
            if how == "sigkill":
                front.kill()
            else:
                front.process.send_signal(signal.SIGTERM)
                await anyio.to_thread.run_sync(front.process.wait, 30)
            await anyio.sleep(DOWN if how == "sigkill" else 5.0)  # the outage: only time
            replacements.append(restart(front, store_at, markers))
            await replacements[-1].ready()

        try:
            await three_callers(front, markers, stop_then_replace)
        finally:
            for server in replacements:
                server.stop()


async def test_a_server_gone_for_good_gives_up_in_one_clear_error(tmp_path: Path) -> None:
    db = str(tmp_path / "tasks.db")
    async with deployment(tmp_path, db) as (front, _worker, markers):
        cli = cli_call(front.url, "plain_job", "key=cli", reconnect=5)
        extension = TasksClientExtension(reconnect_timeout=5)
        tasks: list[Any] = []
        # what the caller catches at the end of `async with Client(...)` is the call's own
        # error, not the connection error of a session that died with the server
        with anyio.fail_after(30), pytest.raises(TaskUnreachable) as gave_up:
            async with Client(front.url, extensions=[extension]) as client:
                tasks.append(await call_tool_task(client, "plain_job", {"key": "gone"}))
                await started_in(markers, "gone")
                await started_in(markers, "cli")
                front.kill()
                await tasks[0].result()
        error, task = gave_up.value, tasks[0]
        assert error.task_id == task.task_id
        assert "ConnectError" in error.last_error
        assert f"fastmcp-tasks wait {front.url} {task.task_id}" in str(error)
        code, _out, err = await finished(cli, 30)
        assert code == 1
        assert "Traceback" not in err
        lines = [line for line in err.splitlines() if line.strip()]
        assert 1 <= len(lines) <= 4, err
        assert "fastmcp-tasks wait" in err and "ConnectError" in err


async def test_callers_ride_through_a_store_outage(tmp_path: Path) -> None:
    """Redis black-holed for 3 s while the callers poll: "Task store unavailable" is retried."""
    store = redis_store()  # skips without Redis (fails when CI=true)
    prefix = store.keys.prefix  # type: ignore[attr-defined]
    async with blackhole_proxy(urlsplit(REDIS_URL).port or 6379) as proxy:
        db = f"{proxy.url()}?prefix={prefix}"
        async with deployment(tmp_path, db, lease=30) as (front, _worker, markers):
            unavailable: list[str] = []

            async def black_hole_for_three_seconds() -> None:
                proxy.black_hole()
                async with Client(front.url) as probe:  # what a poll meets meanwhile
                    with pytest.raises(MCPError) as refused:
                        await probe.session.send_request(
                            GetTaskRequest(params=TaskIdParams(taskId="any")), TaskState
                        )
                    unavailable.append(refused.value.error.message)
                    assert refused.value.error.data == {"retryable": True, "retryAfterMs": 1000}
                await anyio.sleep(3)  # the outage itself
                proxy.resume()

            await three_callers(front, markers, black_hole_for_three_seconds)
            assert unavailable and unavailable[0].startswith("Task store unavailable")
    await store.open()
    await store.close()  # deletes the prefix's keys


async def test_wait_started_while_the_server_is_down_gets_the_result(tmp_path: Path) -> None:
    db = str(tmp_path / "tasks.db")
    async with deployment(tmp_path, db) as (front, _worker, markers):
        async with Client(front.url) as client:
            task = await call_tool_task(client, "plain_job", {"key": "later"})
        await started_in(markers, "later")
        front.kill()
        waiting = cli("wait", front.url, str(task.task_id))
        try:
            errors = Lines(waiting.stderr)
            # `wait` met the outage (however slowly it started) and keeps trying
            await errors.wait_for(lambda line: "yet; retrying" in line, within=30)
            assert waiting.poll() is None
            back = restart(front, db, markers)
            try:
                await back.ready()
                release(markers, "later")
                code = await anyio.to_thread.run_sync(lambda: waiting.wait(timeout=30))
                out = await anyio.to_thread.run_sync(waiting.stdout.read)
            finally:
                back.stop()
        finally:
            if waiting.poll() is None:
                waiting.kill()
    assert code == 0, errors.text
    assert out.decode().strip().splitlines()[-1] == "plain later"
    assert f"cannot reach {front.url} yet; retrying" in errors.text
