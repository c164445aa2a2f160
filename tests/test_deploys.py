"""What a rolling deploy does to tasks: SIGTERM to a real server process on a durable store.

The default `shutdown_grace` on a durable store is 30 s, like `fastmcp-tasks worker`:
once HTTP has stopped, the old replica's engine stops taking work, lets its running
and parked tasks finish (a parked one is answered through the new replica, over the
shared store), and gives its queued tasks back to the queue, where the new replica
takes them. Nothing is failed. The server runs as `mcp.run(transport="http")` does, so
this also covers uvicorn re-raising SIGTERM after its own shutdown (`termination`).
"""

from __future__ import annotations

import signal
from pathlib import Path

import anyio
import httpx
import pytest

from tests.private_servers import Lines
from tests.test_durability import answer, release, servers, started_in, store_at, wire_to

pytestmark = pytest.mark.anyio

__all__ = ["store_at"]  # the fixture, parametrized over SQLite and Redis


async def refused(url: str) -> None:
    """Wait (bounded) until the server stops accepting connections: shutdown has begun."""
    with anyio.fail_after(10):
        async with httpx.AsyncClient() as http:
            while True:
                try:
                    await http.get(url.replace("/mcp", "/"), timeout=0.5)
                except httpx.TransportError:
                    return
                await anyio.sleep(0.02)


async def test_a_rolling_deploy_finishes_running_and_parked_tasks_and_requeues_queued_ones(
    tmp_path: Path, store_at: str
) -> None:
    markers = tmp_path / "markers"
    with (
        servers(tmp_path, 1, concurrency=2, db=store_at) as (old,),
        servers(tmp_path, 1, db=store_at) as (new,),
    ):
        async with wire_to(old) as wire:
            running = (await wire.call_tool("plain_job", {"key": "deploy"}))["taskId"]
            await started_in(markers, "deploy", old.process.pid)
            parked = (await wire.call_tool("ask", {"question": "ship?"}))["taskId"]
            (key,) = (await wire.wait(parked, {"input_required"}))["inputRequests"]
            queued = (await wire.call_tool("idempotent_job", {"key": "later"}))["taskId"]
            assert (await wire.get(queued))["statusMessage"].startswith("Queued")
        assert old.process.stderr is not None
        log = Lines(old.process.stderr)
        old.process.send_signal(signal.SIGTERM)
        await refused(old.url)
        # HTTP has stopped; the task engine now stops taking work and waits for its tasks
        await log.wait_for(lambda line: "SIGTERM: finishing running tasks" in line)
        assert old.process.poll() is None
        async with wire_to(new) as wire:
            await wire.update(parked, answer(key))  # through the other replica
            release(markers, "deploy")
            release(markers, "later")
            with anyio.fail_after(20):
                while old.process.poll() is None:  # noqa: ASYNC110 - a process exit
                    await anyio.sleep(0.05)
            assert old.process.returncode is not None
            done = await wire.wait(running, within=15)
            assert done["status"] == "completed", done  # finished inside the grace
            assert done["result"]["content"][0]["text"] == "plain deploy"
            answered = await wire.wait(parked, within=15)
            assert answered["status"] == "completed", answered
            assert answered["result"]["content"][0]["text"] == "ship? -> accept:True"
            later = await wire.wait(queued, within=15)
            assert later["status"] == "completed", later  # given back, taken by the new one
            assert later["result"]["content"][0]["text"] == f"idempotent later in {new.process.pid}"
