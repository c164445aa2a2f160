"""Real PostgreSQL faults, on a private server (`tests/private_postgres.py`), never the
shared one: `pg_ctl stop -m immediate` while tasks run, the server kept down a few
seconds, then restarted on the same port and data directory; and a server started
while PostgreSQL is down.

The servers run in process over Streamable HTTP (uvicorn on 127.0.0.1), and one worker
is a real `python -m fastmcp_tasks worker tests/fault_server.py` subprocess. Like
`tests/test_real_faults.py` (whose outage scenario the first test runs on PostgreSQL),
each test is sync and runs its own event loop under its own `anyio.fail_after`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.fault_server import (
    assert_unavailable,
    completes,
    fault_server,
    health,
    health_until,
    healthy,
)
from tests.private_postgres import PrivatePostgres
from tests.private_servers import Lines, end_process
from tests.test_real_faults import (
    ROOT,
    STORE_TIMEOUT,
    ended,
    retrying,
    run,
    through_an_outage,
)
from tests.wire import WireError, http_server, http_wire_for, memory_wire

OUTAGE = 4.0  # seconds PostgreSQL stays down: twice the tests' 2 s lease


def interrupted(task: dict[str, Any]) -> bool:
    """Failed by the recovery rule: its runner's lease ran out during the outage."""
    error = task.get("error") or {}
    return (
        task["status"] == "failed"
        and error.get("code") == -32603
        and "Task interrupted" in error.get("message", "")
    )


def start_worker(url: str, markers: Path) -> subprocess.Popen[bytes]:
    """`python -m fastmcp_tasks worker tests/fault_server.py` on `url` (tools wait on files)."""
    return subprocess.Popen(
        [sys.executable, "-m", "fastmcp_tasks", "worker", "tests/fault_server.py", "--grace", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "FAULT_URL": url, "FAULT_DIR": str(markers)},
        cwd=ROOT,
    )


def test_postgres_stopped_immediately_under_running_parked_and_queued_tasks(
    tmp_path: Path,
) -> None:
    """Tasks running, parked, queued and finishing at the stop all end right after it."""
    server = PrivatePostgres(tmp_path / "pg")

    async def up() -> None:
        server.start()
        await server.ready()

    async def scenario() -> None:
        await up()
        await through_an_outage(server.url("faults"), server.stop_immediate, up, outage=OUTAGE)

    try:
        run(scenario, within=60)
    finally:
        server.stop()


def test_a_worker_and_its_front_end_through_an_immediate_stop(tmp_path: Path) -> None:
    server = PrivatePostgres(tmp_path / "pg")
    markers = tmp_path / "markers"
    markers.mkdir()
    url = server.url("faults")
    processes: list[subprocess.Popen[bytes]] = []

    async def scenario() -> None:
        server.start()
        await server.ready()
        worker = start_worker(url, markers)
        processes.append(worker)
        out, err = Lines(worker.stdout), Lines(worker.stderr)  # type: ignore[arg-type]
        await out.wait_for(lambda line: line.startswith("fastmcp-tasks worker: "), within=30)
        front, tasks, probes = fault_server(
            markers, url=url, concurrency=0, lease=timedelta(seconds=2), store_timeout=STORE_TIMEOUT
        )
        async with http_server(front) as endpoint, http_wire_for(endpoint) as wire:
            before = await wire.wait((await wire.call_tool("quick", {"text": "pre"}))["taskId"])
            assert before["status"] == "completed", before
            ids = {
                k: (await wire.call_tool("blocker", {"key": k}))["taskId"] for k in ("run", "end")
            }
            with anyio.fail_after(10):
                while not all(list(markers.glob(f"{k}.started.*")) for k in ids):  # noqa: ASYNC110
                    await anyio.sleep(0.02)
            probes.release("end")  # the worker finishes it right at the stop
            server.stop_immediate()
            back_at = anyio.current_time() + OUTAGE
            with anyio.fail_after(STORE_TIMEOUT.total_seconds() + 2):
                with pytest.raises(WireError) as refused:
                    await wire.call_tool("quick", {"text": "during"})
            assert_unavailable(refused.value, tasks.store)
            with anyio.fail_after(STORE_TIMEOUT.total_seconds() + 2):
                with pytest.raises(WireError) as unread:
                    await wire.get(ids["run"])
            assert_unavailable(unread.value, tasks.store)
            with anyio.fail_after(2):  # synchronous tools keep working
                assert (await wire.call_tool("plain", {"x": 1}))["content"][0]["text"] == "2"
            await health_until(tasks, lambda s: s.status == "degraded", within=OUTAGE)
            assert worker.poll() is None, err.text
            await anyio.sleep(max(0, back_at - anyio.current_time()))  # down >= OUTAGE s
            server.start()
            await server.ready()
            probes.release("run")
            with anyio.fail_after(30):  # nothing stays `working`
                final = {name: await ended(wire, task_id) for name, task_id in ids.items()}
                assert await retrying(lambda: wire.get(before["taskId"])) == before
            for name, task in final.items():  # done, or failed by the recovery rule
                if not interrupted(task):
                    assert task["status"] == "completed", (name, task, err.text[-2000:])
                    assert task["result"]["content"][0]["text"] == f"released {name}"
                assert len(list(markers.glob(f"{name}.started.*"))) == 1  # never run twice
            # nothing half-created: the store holds exactly the tasks we were given ids of
            listed = await tasks.store.list_tasks(limit=100)  # type: ignore[attr-defined]
            assert {r.task_id for r in listed} == {before["taskId"], *ids.values()}, listed
            await completes(wire, "quick", {"text": "after"}, "quick after")  # no restart
            assert healthy(await health_until(tasks, healthy, within=15))
        assert worker.poll() is None, err.text
        os.kill(worker.pid, signal.SIGTERM)
        assert await anyio.to_thread.run_sync(worker.wait, 20) == 0, err.text

    try:
        run(scenario, within=90)
    finally:
        for process in processes:
            end_process(process)
        server.stop()


def test_a_server_started_while_postgres_is_down_runs_tasks_once_it_is_up(
    tmp_path: Path,
) -> None:
    server = PrivatePostgres(tmp_path / "pg")  # initdb'd, not started: the port is closed

    async def scenario() -> None:
        mcp, tasks, _ = fault_server(url=server.url("faults"), store_timeout=STORE_TIMEOUT)
        starting = anyio.current_time()
        async with memory_wire(mcp) as wire:
            assert anyio.current_time() - starting < 15  # it did not wait for the store
            assert (await wire.call_tool("plain", {"x": 1}))["content"][0]["text"] == "2"
            with anyio.fail_after(STORE_TIMEOUT.total_seconds() + 2):
                with pytest.raises(WireError) as refused:
                    await wire.call_tool("quick", {"text": "early"})
            assert_unavailable(refused.value, tasks.store)
            assert (await health(tasks)).status in ("starting", "degraded")
            server.start()
            await server.ready()
            with anyio.fail_after(30):
                created = await retrying(lambda: wire.call_tool("quick", {"text": "late"}))
                done = await ended(wire, created["taskId"])
            assert done["result"]["content"][0]["text"] == "quick late"
            assert healthy(await health_until(tasks, healthy, within=15))

    try:
        run(scenario, within=60)
    finally:
        server.stop()


def test_requests_answer_within_store_timeout_while_postgres_is_down(tmp_path: Path) -> None:
    """docs/how-to/durability.md, "When the store fails": task requests answer -32603 "Task
    store unavailable" within `store_timeout`, every one of them, not only the first after
    the stop."""
    server = PrivatePostgres(tmp_path / "pg")
    store_timeout = timedelta(seconds=1)
    bound = store_timeout.total_seconds() + 0.5

    async def scenario() -> None:
        server.start()
        await server.ready()
        mcp, tasks, _ = fault_server(url=server.url("faults"), store_timeout=store_timeout)
        async with memory_wire(mcp) as wire:
            done = await wire.wait((await wire.call_tool("quick", {"text": "a"}))["taskId"])
            server.stop_immediate()
            requests = {
                "tools/call": lambda: wire.call_tool("quick", {"text": "b"}),
                "tasks/get": lambda: wire.get(done["taskId"]),
                "tasks/cancel": lambda: wire.cancel(done["taskId"]),
            }
            for round_ in range(2):  # the first meets broken connections, the next none
                for name, request in requests.items():
                    started = anyio.current_time()
                    with anyio.move_on_after(bound * 3), pytest.raises(WireError) as refused:
                        await request()
                    took = anyio.current_time() - started
                    assert took <= bound, f"{name} (round {round_}) answered after {took:.1f} s"
                    assert_unavailable(refused.value, tasks.store)
            server.start()
            await server.ready()
            with anyio.fail_after(20):
                created = await retrying(lambda: wire.call_tool("quick", {"text": "c"}))
                assert (await ended(wire, created["taskId"]))["status"] == "completed"

    try:
        run(scenario, within=60)
    finally:
        server.stop()
