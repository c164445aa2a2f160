"""Real faults, on loopback: Redis SIGKILLed and restarted, Redis black-holed, SQLite locked
by another process, and a worker started before its Redis.

The servers run in process over Streamable HTTP (uvicorn on 127.0.0.1); Redis is a
private `redis-server` (`tests/private_servers.py`), never the shared one. The outage
scenarios take longer than conftest's 30 s bound on async tests, so each is a sync test
running its own event loop under its own `anyio.fail_after`.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import redis

from tests.fault_server import (
    assert_unavailable,
    completes,
    fault_server,
    health,
    health_until,
    healthy,
)
from tests.private_servers import Lines, PrivateRedis, SQLiteLock, blackhole_proxy, end_process
from tests.wire import Wire, WireError, http_server, http_wire_for, memory_wire

STORE_TIMEOUT = timedelta(seconds=2)
ROOT = Path(__file__).parent.parent
TERMINAL = frozenset({"completed", "failed", "cancelled"})


def run(scenario: Callable[..., Awaitable[None]], *args: Any, within: float) -> None:
    """Run `scenario(*args)` on a fresh asyncio loop, bounded by `within` seconds."""

    async def bounded() -> None:
        with anyio.fail_after(within):
            await scenario(*args)

    anyio.run(bounded, backend="asyncio")


async def retrying(request: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
    """`request()` again while the store is still coming back (the clean -32603 only).

    The test's own HTTP client may also find its idle keep-alive connection closed by
    uvicorn after the outage (5 s idle): that transport error is the client's, resent.
    """
    while True:
        try:
            return await request()
        except WireError as error:
            assert error.code == -32603 and "Task store unavailable" in error.message, error
        except (httpx.ReadError, httpx.RemoteProtocolError):
            pass
        await anyio.sleep(0.1)


async def ended(wire: Wire, task_id: str) -> dict[str, Any]:
    """The task once terminal (callers bound the wait)."""
    while (task := await retrying(lambda: wire.get(task_id)))["status"] not in TERMINAL:  # noqa: ASYNC110 - a deadline poll
        await anyio.sleep(0.05)
    return task


# --- the helpers do what they say ----------------------------------------------------


def test_a_killed_private_redis_is_gone_then_restarts_with_its_data(tmp_path: Path) -> None:
    server = PrivateRedis(tmp_path / "redis")

    async def scenario() -> None:
        server.start()
        await server.ready()
        client = redis.Redis.from_url(server.url, socket_timeout=2)
        client.set("kept", "yes")  # appendfsync always: on disk when acknowledged
        pid = server.pid
        server.kill()
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
        assert not await server.ping()
        with pytest.raises(redis.ConnectionError):
            client.ping()
        server.start()  # same port, same directory
        await server.ready()
        assert server.pid != pid and client.get("kept") == b"yes"
        client.close()

    try:
        run(scenario, within=30)
    finally:
        server.stop()


def test_the_proxy_black_holes_without_resetting_then_resumes(tmp_path: Path) -> None:
    server = PrivateRedis(tmp_path / "redis")

    async def scenario() -> None:
        server.start()
        await server.ready()
        async with blackhole_proxy(server.port) as proxy:
            async with await anyio.connect_tcp("127.0.0.1", proxy.port) as raw:
                await raw.send(b"PING\r\n")
                assert (await raw.receive()).startswith(b"+PONG")
                proxy.black_hole()
                await raw.send(b"INCR held\r\n")
                with anyio.move_on_after(1) as silence:
                    await raw.receive()
                assert silence.cancelled_caught  # no reply, and no reset either
                direct = redis.Redis.from_url(server.url)
                assert direct.get("held") is None  # the command did not reach Redis
                through = redis.Redis.from_url(proxy.url(), socket_timeout=0.5)
                with pytest.raises(redis.TimeoutError):  # a new connection: timeout, not refusal
                    await anyio.to_thread.run_sync(through.ping)
                proxy.resume()
                with anyio.fail_after(5):
                    assert (await raw.receive()).startswith(b":1")  # delivered once healed
                assert direct.get("held") == b"1"
                assert await anyio.to_thread.run_sync(through.ping)
                through.close()
                direct.close()

    try:
        run(scenario, within=30)
    finally:
        server.stop()


def test_the_sqlite_lock_holder_holds_the_write_lock(tmp_path: Path) -> None:
    path = tmp_path / "locked.db"
    sqlite3.connect(path).close()

    def try_write() -> bool:
        conn = sqlite3.connect(path, timeout=0.1, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("ROLLBACK")
            return True
        except sqlite3.OperationalError:
            return False
        finally:
            conn.close()

    async def scenario() -> None:
        async with SQLiteLock(path, seconds=30) as lock:
            assert not try_write()
            lock.release()
            await lock.released(within=5)
            assert try_write()

    run(scenario, within=30)


# --- the engine through real faults --------------------------------------------------


async def through_an_outage(
    url: str, down: Callable[[], None], up: Callable[[], Awaitable[None]], outage: float
) -> None:
    """Tasks running, parked, queued and finishing at the fault all end right after it."""
    mcp, tasks, probes = fault_server(
        url=url, concurrency=3, lease=timedelta(seconds=2), store_timeout=STORE_TIMEOUT
    )
    async with http_server(mcp) as endpoint, http_wire_for(endpoint) as wire:
        ids = {
            k: (await wire.call_tool("blocker", {"key": k}))["taskId"] for k in ("run", "finish")
        }
        await probes.event("run.started").wait()
        await probes.event("finish.started").wait()
        ids["asked"] = (await wire.call_tool("ask", {"question": "ship?"}))["taskId"]
        parked = await wire.wait_for(ids["asked"], lambda t: t.get("inputRequests"))
        (key,) = parked["inputRequests"]
        queued = await wire.call_tool("quick", {"text": "queued"})
        assert queued["statusMessage"].startswith("Queued"), queued
        ids["queued"] = queued["taskId"]
        ids["late"] = (await wire.call_tool("blocker", {"key": "late"}))["taskId"]
        probes.release("finish")  # finishing right at the fault
        down()
        back_at = anyio.current_time() + outage
        with anyio.fail_after(STORE_TIMEOUT.total_seconds() + 2):
            with pytest.raises(WireError) as refused:
                await wire.get(ids["run"])
        assert_unavailable(refused.value, tasks.store)
        with anyio.fail_after(2):
            assert (await wire.call_tool("plain", {"x": 1}))["content"][0]["text"] == "2"
        await health_until(tasks, lambda s: s.status == "degraded", within=outage)
        await anyio.sleep(back_at - anyio.current_time())  # the outage lasts `outage` s
        await up()
        with anyio.fail_after(30):  # nothing stays `working` 30 s after
            answer = {key: {"action": "accept", "content": {"value": True}}}
            await retrying(lambda: wire.update(ids["asked"], answer))
            await retrying(lambda: wire.cancel(ids["run"]))
            await probes.event("late.started").wait()
            probes.release("late")
            final = {name: await ended(wire, task_id) for name, task_id in ids.items()}
        assert {name: task["status"] for name, task in final.items()} == {
            "run": "cancelled",
            "finish": "completed",
            "asked": "completed",
            "queued": "completed",
            "late": "completed",
        }, final
        texts = {n: t["result"]["content"][0]["text"] for n, t in final.items() if n != "run"}
        assert texts == {
            "finish": "released finish",
            "asked": "ship? -> accept:True",
            "queued": "quick queued",
            "late": "released late",
        }
        assert probes.runs.count("finish") == 1 and probes.runs.count("ask ship?") == 1
        await completes(wire, "quick", {"text": "after"}, "quick after")
        assert healthy(await health_until(tasks, healthy))


def test_redis_sigkilled_for_5s_then_restarted(tmp_path: Path) -> None:
    server = PrivateRedis(tmp_path / "redis")

    async def up() -> None:
        server.start()
        await server.ready()

    async def scenario() -> None:
        await up()
        await through_an_outage(server.url, server.kill, up, outage=5)

    try:
        run(scenario, within=60)
    finally:
        server.stop()


def test_redis_black_holed_for_10s(tmp_path: Path) -> None:
    server = PrivateRedis(tmp_path / "redis")

    async def scenario() -> None:
        server.start()
        await server.ready()
        async with blackhole_proxy(server.port) as proxy:

            async def up() -> None:
                proxy.resume()

            await through_an_outage(proxy.url(), proxy.black_hole, up, outage=10)
            assert proxy.accepted >= 2 and proxy.forwarded > 0  # it carried the traffic

    try:
        run(scenario, within=70)
    finally:
        server.stop()


def test_sqlite_locked_by_another_process_while_tasks_finish(tmp_path: Path) -> None:
    path = tmp_path / "tasks.db"

    async def scenario() -> None:
        mcp, tasks, probes = fault_server(url=f"sqlite:///{path}", store_timeout=STORE_TIMEOUT)
        async with memory_wire(mcp) as wire:
            keys = ("a", "b", "c")
            ids = [(await wire.call_tool("blocker", {"key": key}))["taskId"] for key in keys]
            for key in keys:
                await probes.event(f"{key}.started").wait()
            seen: set[str] = set()
            async with SQLiteLock(path, seconds=10) as lock:
                for key in keys:
                    probes.release(key)  # they finish while the file is locked
                while not lock.done:
                    for task_id in ids:  # tasks/get keeps answering during the lock
                        with anyio.fail_after(STORE_TIMEOUT.total_seconds() + 1):
                            seen.add((await wire.get(task_id))["status"])
                    await anyio.sleep(0.2)
            assert "working" in seen and "failed" not in seen, seen  # held back, not failed
            with anyio.fail_after(20):
                final = [await ended(wire, task_id) for task_id in ids]
            assert [t["status"] for t in final] == ["completed"] * 3, final
            await completes(wire, "quick", {"text": "unlocked"}, "quick unlocked")
            assert healthy(await health_until(tasks, healthy))

    run(scenario, within=60)


def test_a_worker_started_before_its_redis_waits_then_runs(tmp_path: Path) -> None:
    server = PrivateRedis(tmp_path / "redis")  # not started yet: the port is closed
    env = {**os.environ, "FAULT_URL": server.url, "PYTHONUNBUFFERED": "1"}
    worker = subprocess.Popen(
        [sys.executable, "-m", "fastmcp_tasks", "worker", "tests/fault_server.py", "--grace", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env=env,
        cwd=ROOT,
    )
    out, err = Lines(worker.stdout), Lines(worker.stderr)  # type: ignore[arg-type]

    async def scenario() -> None:
        said = await err.wait_for(lambda line: "unreachable" in line or "unavailable" in line)
        assert str(server.port) in said  # it says why it waits (the operator's log may)
        with anyio.move_on_after(3):  # Redis stays down 3 s more: the worker must not exit
            await anyio.to_thread.run_sync(worker.wait, abandon_on_cancel=True)
        assert worker.poll() is None, f"the worker exited: {err.text}"
        server.start()
        await server.ready()
        front, _, _ = fault_server(url=server.url, concurrency=0)
        async with memory_wire(front) as wire:
            with anyio.fail_after(20):
                task_id = (await retrying(lambda: wire.call_tool("quick", {"text": "w"})))["taskId"]
                done = await ended(wire, task_id)
            assert done["status"] == "completed", (done, err.text)
            assert done["result"]["content"][0]["text"] == "quick w"
        assert worker.poll() is None, err.text
        os.kill(worker.pid, signal.SIGTERM)
        assert await anyio.to_thread.run_sync(worker.wait, 20) == 0, err.text

    try:
        run(scenario, within=60)
    finally:
        end_process(worker)
        server.stop()
        print("worker stdout:", out.text, "\nworker stderr:", err.text[-3000:])


def test_startup_while_redis_is_black_holed_then_heals(tmp_path: Path) -> None:
    server = PrivateRedis(tmp_path / "redis")

    async def scenario() -> None:
        server.start()
        await server.ready()
        async with blackhole_proxy(server.port) as proxy:
            proxy.black_hole()  # connections are accepted, nothing answers
            mcp, tasks, _ = fault_server(url=proxy.url(), store_timeout=STORE_TIMEOUT)
            starting = anyio.current_time()
            async with memory_wire(mcp) as wire:
                assert anyio.current_time() - starting < 15  # the store's own connect bound
                assert (await wire.call_tool("plain", {"x": 1}))["content"][0]["text"] == "2"
                with anyio.fail_after(STORE_TIMEOUT.total_seconds() + 2):
                    with pytest.raises(WireError) as refused:
                        await wire.call_tool("quick", {"text": "early"})
                assert_unavailable(refused.value, tasks.store)
                assert (await health(tasks)).status in ("starting", "degraded")
                proxy.resume()
                with anyio.fail_after(30):
                    created = await retrying(lambda: wire.call_tool("quick", {"text": "late"}))
                    done = await ended(wire, created["taskId"])
                assert done["result"]["content"][0]["text"] == "quick late"
                assert healthy(await health_until(tasks, healthy, within=15))

    try:
        run(scenario, within=60)
    finally:
        server.stop()
