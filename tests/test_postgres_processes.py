"""Front ends and workers on one PostgreSQL database, every one a real process.

Two front ends (`tests/durable_server.py --concurrency 0`) and worker processes
(`python -m fastmcp_tasks worker tests/durable_server.py`) share a fresh schema of the
shared PostgreSQL (dropped afterwards). Tools signal through marker files
(`<key>.started.<pid>`, `<key>.cancelled.<pid>`, released by `<key>.go`), so which
process ran what is read from the file names. Skips loudly without PostgreSQL at
`$POSTGRES_URL`, and fails instead when `CI=true`.
"""

from __future__ import annotations

import signal
import time
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path

import anyio
import pytest

from tests.private_postgres import shared_schema
from tests.private_servers import Lines
from tests.test_durability import Worker, release, servers, started_in, wire_to
from tests.test_listen import _listen_params, http_listen

pytestmark = pytest.mark.anyio


@pytest.fixture
async def database() -> AsyncIterator[str]:
    async with shared_schema() as url:
        yield url


def ran_by(markers: Path, key: str, kind: str = "started") -> list[int]:
    """The pids that wrote `<key>.<kind>.<pid>`, in no particular order."""
    return [int(p.name.rsplit(".", 1)[1]) for p in markers.glob(f"{key}.{kind}.*")]


async def marked(markers: Path, key: str, kind: str, within: float = 10) -> list[int]:
    with anyio.fail_after(within):
        while not (pids := ran_by(markers, key, kind)):  # noqa: ASYNC110 - a file signal
            await anyio.sleep(0.02)
    return pids


def stop_all(workers: list[Worker]) -> None:
    for worker in workers:
        worker.stop()


async def test_two_front_ends_and_two_workers_share_one_database(
    tmp_path: Path, database: str
) -> None:
    markers = tmp_path / "markers"
    with servers(tmp_path, 2, concurrency=0, db=database) as (a, b):
        workers = [Worker(database, markers) for _ in range(2)]
        try:
            for worker in workers:
                await worker.ready()
            pids = {worker.process.pid for worker in workers}
            async with wire_to(a) as on_a, wire_to(b) as on_b:
                # tasks made on both front ends complete, each run once, by a worker
                keys = [f"job{n}" for n in range(8)]
                for key in keys:
                    release(markers, key)  # each runs straight through once taken
                ids = [
                    (await (on_a, on_b)[n % 2].call_tool("plain_job", {"key": key}))["taskId"]
                    for n, key in enumerate(keys)
                ]
                for n, (key, task_id) in enumerate(zip(keys, ids, strict=True)):
                    done = await (on_b, on_a)[n % 2].wait(task_id, within=15)  # the other one
                    assert done["status"] == "completed", done
                    assert done["result"]["content"][0]["text"] == f"plain {key}"
                for key in keys:
                    runs = ran_by(markers, key)
                    assert len(runs) == 1 and runs[0] in pids, (key, runs, pids)

                # a cancel sent to front end A stops the tool running on a worker
                running = (await on_b.call_tool("plain_job", {"key": "stop-me"}))["taskId"]
                await started_in(markers, "stop-me")
                (runner,) = ran_by(markers, "stop-me")
                await on_a.cancel(running)
                assert await marked(markers, "stop-me", "cancelled") == [runner]
                assert (await on_b.wait(running))["status"] == "cancelled"

                # a subscriber on front end B hears a completion a worker made: pushed
                pushed = (await on_a.call_tool("plain_job", {"key": "push"}))["taskId"]
                await started_in(markers, "push")
                async with http_listen(b.url, _listen_params([pushed])) as frames:
                    await frames.next()  # the ack
                    release(markers, "push")
                    final = await frames.until(
                        lambda f: f.get("params", {}).get("status") == "completed"
                    )
                    heard = time.time()
                params = final["params"]
                assert params["result"]["content"][0]["text"] == "plain push"
                finished = datetime.fromisoformat(params["lastUpdatedAt"]).timestamp()
                # no poll of tasks/get, no polling interval: the frame follows the commit
                assert heard - finished < 1.0, heard - finished
        finally:
            stop_all(workers)


async def test_sigkill_of_a_worker_mid_task_moves_or_fails_its_tasks(
    tmp_path: Path, database: str
) -> None:
    markers = tmp_path / "markers"
    with servers(tmp_path, 1, concurrency=0, db=database) as (front,):
        victim = Worker(database, markers)
        workers = [victim]
        try:
            await victim.ready()
            async with wire_to(front) as wire:
                idem = (await wire.call_tool("idempotent_job", {"key": "hop"}))["taskId"]
                plain = (await wire.call_tool("plain_job", {"key": "lost"}))["taskId"]
                await started_in(markers, "hop", victim.process.pid)
                await started_in(markers, "lost", victim.process.pid)
                heir = Worker(database, markers)  # started once the victim holds both
                workers.append(heir)
                await heir.ready()
                victim.kill()
                failed = await wire.wait(plain, {"failed"}, within=20)
                assert failed["error"]["code"] == -32603, failed
                assert "Task interrupted" in failed["error"]["message"], failed
                assert "not marked idempotentHint=True" in failed["error"]["message"]
                await started_in(markers, "hop", heir.process.pid)
                release(markers, "hop")
                moved = await wire.wait(idem, within=20)
                assert moved["status"] == "completed", moved
                text = moved["result"]["content"][0]["text"]
                assert text == f"idempotent hop in {heir.process.pid}"
                assert sorted(ran_by(markers, "hop")) == sorted(
                    [victim.process.pid, heir.process.pid]
                )
                assert ran_by(markers, "lost") == [victim.process.pid]  # never run again
        finally:
            stop_all(workers)


async def test_sigterm_of_a_worker_drains_to_the_other(tmp_path: Path, database: str) -> None:
    markers = tmp_path / "markers"
    with servers(tmp_path, 1, concurrency=0, db=database) as (front,):
        workers = [Worker(database, markers, grace=15, concurrency=1) for _ in range(2)]
        try:
            for worker in workers:
                await worker.ready()
            async with wire_to(front) as wire:
                held = [(await wire.call_tool("plain_job", {"key": k}))["taskId"] for k in "xy"]
                await started_in(markers, "x")
                await started_in(markers, "y")
                by_pid = {worker.process.pid: worker for worker in workers}
                (x_pid,), (y_pid,) = ran_by(markers, "x"), ran_by(markers, "y")
                assert {x_pid, y_pid} == set(by_pid), "one slot each: one task each"
                runner, other = by_pid[x_pid], by_pid[y_pid]
                queued = []
                for key in ("q1", "q2"):
                    release(markers, key)  # they run straight through once taken
                    created = await wire.call_tool("plain_job", {"key": key})
                    assert created["statusMessage"].startswith("Queued"), created
                    queued.append(created["taskId"])
                assert runner.process.stdout is not None
                said = Lines(runner.process.stdout)
                runner.process.send_signal(signal.SIGTERM)
                await said.wait_for(lambda line: "stopping" in line)
                release(markers, "x")  # the running task finishes within the grace
                done = await wire.wait(held[0], within=15)
                assert done["status"] == "completed", done
                assert await anyio.to_thread.run_sync(runner.process.wait, 20) == 0
                for task_id in queued:  # not failed, not taken by the draining worker
                    assert (await wire.get(task_id))["status"] == "working"
                release(markers, "y")  # the other worker's slot frees: it takes the queue
                for key, task_id in zip(("q1", "q2"), queued, strict=True):
                    finished = await wire.wait(task_id, within=15)
                    assert finished["status"] == "completed", finished
                    assert ran_by(markers, key) == [other.process.pid], key
                assert (await wire.wait(held[1]))["status"] == "completed"
        finally:
            stop_all(workers)
