"""Durable steps through a real crash: SIGKILL in the middle of a step, then resume.

A six-step resumable tool (`tests/steps_server.py`, not marked idempotent) writes
"start N" / "done N" lines to a file; step 4 waits until the test has SIGKILLed the
process running it. On SQLite a server restarted on the same file and port recovers the
task; on Redis and PostgreSQL a `concurrency=0` front end and two `fastmcp-tasks worker`
processes share the store, and the worker left takes the task over. Either way steps
1-3 are replayed (their lines appear once), step 4 runs again (two "start 4", one
"done 4"), 5 and 6 run once, and the caller following the task with the transparent
`Client.call_tool()` gets the result of the run that finished. Step 2 asks the caller
before it works: the answer is part of the step, so it is asked once, before the crash.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import anyio
import pytest
from fastmcp import Client

from tests.test_durability import Server, Worker, store_at
from tests.wire import free_port

pytestmark = [pytest.mark.anyio, pytest.mark.bound(120)]

__all__ = ["store_at"]  # the fixture, parametrized over SQLite, Redis and PostgreSQL

ROOT = Path(__file__).parent.parent
SERVER = Path(__file__).parent / "steps_server.py"
LEASE = 2.0


class StepsServer(Server):
    """`python tests/steps_server.py`, serving Streamable HTTP on `port`."""

    def __init__(self, db: str, port: int, concurrency: int = 100) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}/mcp"
        command = [sys.executable, str(SERVER), "--db", db, "--port", str(port)]
        command += ["--concurrency", str(concurrency), "--lease", str(LEASE)]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


class StepsWorker(Worker):
    """`python -m fastmcp_tasks worker tests/steps_server.py`."""

    def __init__(self, db: str) -> None:
        env = {**os.environ, "STEPS_DB": db, "STEPS_LEASE": str(LEASE)}
        self.banner = b""
        self.process = subprocess.Popen(
            [sys.executable, "-m", "fastmcp_tasks", "worker", str(SERVER), "--grace", "1"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=ROOT,
        )


def release(log: Path) -> None:
    """Let step 4 go through (`steps_server.released`)."""
    Path(f"{log}.go").touch()


def lines(log: Path) -> list[tuple[str, int, int]]:
    """The log's lines as `(start|done, step, pid)`."""
    if not log.exists():
        return []
    found = []
    for line in log.read_text().splitlines():
        what, n, pid = line.split()
        found.append((what, int(n), int(pid)))
    return found


async def step_four_started(log: Path) -> int:
    """The pid of the process that started step 4 (bounded wait on the file)."""
    with anyio.fail_after(20):
        while True:
            started = [pid for what, n, pid in lines(log) if (what, n) == ("start", 4)]
            if started:
                return started[0]
            await anyio.sleep(0.02)


def assert_resumed(log: Path, first: int, second: int) -> None:
    seen = lines(log)
    counts = Counter((what, n) for what, n, _ in seen)
    expected = Counter({(w, n): 1 for w in ("start", "done") for n in range(1, 7)})
    expected[("start", 4)] = 2
    assert counts == expected, seen
    assert {pid for what, n, pid in seen if n <= 3} == {first}
    assert [pid for what, n, pid in seen if (what, n) == ("start", 4)] == [first, second]
    assert {pid for what, n, pid in seen if n >= 5 or (what, n) == ("done", 4)} == {second}


async def follow(url: str, log: Path, results: list[str]) -> None:
    """The caller: the transparent `call_tool()`, riding through the crash, confirming the
    one question (step 2's) each time it is asked (`results` gets "asked" each time)."""

    async def confirm(message, response_type, params, context):  # type: ignore[no-untyped-def]
        results.append(f"asked: {message}")
        return True

    async with Client(url, elicitation_handler=confirm) as client:
        results.append(str((await client.call_tool("six", {"path": str(log)})).data))


async def test_a_killed_run_resumes_at_the_step_it_was_in(tmp_path: Path, store_at: str) -> None:
    log = tmp_path / "steps.log"
    if "://" not in store_at:  # SQLite: one server, killed and started again on its file
        await restarted_server(store_at, log)
    else:
        await workers_take_over(store_at, log)


async def restarted_server(db: str, log: Path) -> None:
    port = free_port()
    first = StepsServer(db, port)
    servers = [first]
    results: list[str] = []
    try:
        await first.ready()

        async def crash_and_restart() -> None:
            assert await step_four_started(log) == first.process.pid
            first.kill()
            release(log)  # the next run's step 4 goes through
            servers.append(StepsServer(db, port))
            await servers[-1].ready()

        with anyio.fail_after(90):
            async with anyio.create_task_group() as group:
                group.start_soon(follow, first.url, log, results)
                group.start_soon(crash_and_restart)
    finally:
        for server in servers:
            server.stop()
    second = servers[-1].process.pid
    assert results == ["asked: Run step 2?", f"21 in {second}"]  # asked once, before the crash
    assert_resumed(log, first.process.pid, second)


async def workers_take_over(db: str, log: Path) -> None:
    front = StepsServer(db, free_port(), concurrency=0)
    workers = [StepsWorker(db), StepsWorker(db)]
    results: list[str] = []
    try:
        for worker in workers:
            await worker.ready()
        await front.ready()
        pids: list[int] = []

        async def kill_the_runner() -> None:
            pid = await step_four_started(log)
            (victim,) = [w for w in workers if w.process.pid == pid]
            victim.kill()
            release(log)
            pids.append(pid)

        with anyio.fail_after(90):
            async with anyio.create_task_group() as group:
                group.start_soon(follow, front.url, log, results)
                group.start_soon(kill_the_runner)
    finally:
        front.stop()
        for worker in workers:
            worker.stop()
    (heir,) = [w.process.pid for w in workers if w.process.pid != pids[0]]
    assert results == ["asked: Run step 2?", f"21 in {heir}"]  # asked once, before the crash
    assert_resumed(log, pids[0], heir)
