"""Operator records across real processes on one SQLite file: a `concurrency=0` front end
(`tests/durable_server.py`) and `fastmcp-tasks worker` processes.

An idle worker is listed within 10 s of its start and, once SIGKILLed, is seen gone
(`WorkerInfo.alive`, the store's view) within 60 s; a clean stop says goodbye. A paused
tool's tasks wait with the paused message while another tool's tasks run, and run once
resumed, and the history of a task says which processes created and ran it.
Skipped while the SQLite store keeps no operator records (`stores.operations`).
"""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

from fastmcp_tasks.server.engine.pauses import paused_message
from fastmcp_tasks.stores import store_from_url
from fastmcp_tasks.stores.operations import Pause, WorkerInfo
from tests.operable import eventually, history, kinds, sqlite_url
from tests.test_durability import Server, Worker, wire_to

pytestmark = pytest.mark.anyio


async def listed(store: object, pid: int) -> WorkerInfo | None:
    found = [w for w in await store.workers() if w.pid == pid]  # type: ignore[attr-defined]
    return found[0] if found else None


async def test_an_idle_worker_is_listed_and_seen_gone_after_sigkill(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = sqlite_url(tmp_path)
    markers = tmp_path / "markers"
    markers.mkdir()
    monkeypatch.setenv("DURABLE_BEAT", "0.5")  # the workers' heartbeat interval
    store = store_from_url(url)
    await store.open()
    killed_one, stopped_one = Worker(tmp_path / "tasks.db", markers), None
    try:
        await killed_one.ready()  # its engine runs (the process took its time to start)
        pid = killed_one.process.pid
        await eventually(lambda: listed(store, pid), within=10)
        info = await listed(store, pid)
        assert info is not None and info.alive(time.time()) and not info.stopped
        assert info.app == "durable" and info.concurrency == 100 and info.running == 0
        assert {"quick", "plain_job", "ask"} <= set(info.tools)
        seen = info.last_seen
        await eventually(lambda: _beat_after(store, pid, seen))  # it beats every 0.5 s
        killed_one.kill()
        killed = time.time()
        gone = await listed(store, pid)
        assert gone is not None and gone.last_seen <= killed and not gone.stopped
        await anyio.sleep(1.0)  # two intervals: a live worker would have beaten twice
        after = await listed(store, pid)
        assert after is not None and after.last_seen == gone.last_seen
        assert not after.alive(killed + 60)  # what a dashboard sees within a minute
        # a clean stop says goodbye at once
        stopped_one = Worker(tmp_path / "tasks.db", markers)
        await stopped_one.ready()
        other = stopped_one.process.pid
        await eventually(lambda: listed(store, other), within=10)
        stopped_one.stop()
        final = await listed(store, other)
        assert final is not None and final.stopped and not final.alive(time.time())
    finally:
        killed_one.stop()
        if stopped_one is not None:
            stopped_one.stop()
        await store.close()


async def _beat_after(store: object, pid: int, seen: float) -> bool:
    info = await listed(store, pid)
    return info is not None and info.last_seen > seen


async def test_a_paused_tool_waits_across_processes_until_resumed(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path)
    db, markers = tmp_path / "tasks.db", tmp_path / "markers"
    markers.mkdir()
    store = store_from_url(url)
    await store.open()
    front = Server(db, markers, concurrency=0)
    worker = Worker(db, markers)
    try:
        await worker.ready()
        await store.pause(Pause("durable", "quick", time.time(), "ops"))  # type: ignore[attr-defined]
        async with wire_to(front) as wire:
            waiting = [
                (await wire.call_tool("quick", {"text": str(n)}))["taskId"] for n in range(2)
            ]
            other = (await wire.call_tool("plain_job", {"key": "other"}))["taskId"]
            (markers / "other.go").touch()
            assert (await wire.wait(other, within=15))["status"] == "completed"
            for task_id in waiting:
                shown = await wire.get(task_id)
                assert shown["status"] == "working"
                assert shown["statusMessage"] == paused_message("quick")
            await store.resume("durable", "quick")  # type: ignore[attr-defined]
            for task_id in waiting:
                done = await wire.wait(task_id, within=15)
                assert done["status"] == "completed"
            # created, taken, paused (the worker claimed it), taken, started, finished
            events = await history(store, waiting[0], count=6)
            # the claim that was held had begun a run (`stores.phases`): it was taken back
            ended = [await store.get(task_id) for task_id in waiting]
            assert [record.attempts for record in ended if record is not None] == [1, 1]
    finally:
        worker.stop()
        front.stop()
        await store.close()
    assert kinds(events) == ["created", "taken", "paused", "taken", "started", "finished"]
    assert events[0].details["paused"] is True
    workers = {e.details["worker"] for e in events if e.kind in ("taken", "started", "paused")}
    assert len(workers) == 1 and workers != {events[0].details["by"]}
