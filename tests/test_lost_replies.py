"""A `tools/call` whose reply is lost: the caller still gets its one task.

A reverse proxy in front of a real server process forwards the first `tools/call` of
each connection to the server, reads the server's answer, and drops the connection
instead of passing the answer on: the task exists, but the caller never heard of it.
`call_tool_task()` and `fastmcp-tasks call` resend the call with the same idempotency
key; the server answers with the task the first send created, so the result arrives
and the tool body runs exactly once.
"""

from __future__ import annotations

import contextlib
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import anyio
import anyio.abc
import httpx2
import pytest
from fastmcp import Client

from fastmcp_tasks import call_tool_task
from tests.private_servers import tcp_relay
from tests.test_caller_survives import cli_call, finished, runs
from tests.test_durability import release, servers, started_in, wire_to

pytestmark = [pytest.mark.anyio, pytest.mark.bound(60)]

#: What a relayed connection may end with when one side goes away.
GONE = (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream, OSError)


class ReplyDropper:
    """A TCP proxy that swallows the answer to the first `drops` `tools/call` requests."""

    def __init__(self, upstream: str, drops: int, *, hold: bool = False) -> None:
        self.upstream = httpx2.URL(upstream)
        self.drops = drops
        self.hold = hold  # keep the connection open, silent, instead of dropping it
        self.dropped = 0

    def serving(self) -> AbstractAsyncContextManager[str]:
        """Serve the proxy; yield its URL."""
        return tcp_relay(self.upstream, self._relay)

    async def _relay(self, client: anyio.abc.SocketStream) -> None:
        upstream = await anyio.connect_tcp("127.0.0.1", self.upstream.port or 80)
        dropping = anyio.Event()
        async with client, upstream, anyio.create_task_group() as group:

            async def requests() -> None:
                with contextlib.suppress(*GONE):  # the client may reset a connection it gave up
                    async for chunk in client:
                        lost = b"mcp-method: tools/call" in chunk.lower()
                        if lost and self.dropped < self.drops:
                            self.dropped += 1
                            dropping.set()  # the server gets it; its answer goes nowhere
                        await upstream.send(chunk)
                group.cancel_scope.cancel()

            async def answers() -> None:
                with contextlib.suppress(*GONE):
                    async for chunk in upstream:
                        if dropping.is_set():
                            if self.hold:
                                await anyio.sleep_forever()  # until the caller gives up
                            break  # the server answered: drop the connection, answer unsent
                        await client.send(chunk)
                group.cancel_scope.cancel()

            group.start_soon(requests)
            group.start_soon(answers)


async def test_a_lost_tools_call_reply_is_resent_and_answered_with_the_same_task(
    tmp_path: Path,
) -> None:
    markers = tmp_path / "markers"
    with servers(tmp_path, 1) as (server,):
        async with wire_to(server):
            pass  # ready
        dropper = ReplyDropper(server.url, drops=2)
        async with dropper.serving() as proxied:
            cli = cli_call(proxied, "plain_job", "key=cli")
            async with Client(proxied) as client:
                task = await call_tool_task(client, "plain_job", {"key": "handle"})
                await started_in(markers, "handle")
                await started_in(markers, "cli")
                release(markers, "handle")
                release(markers, "cli")
                assert (await task.result()).data == "plain handle"
            code, out, err = await finished(cli, 30)
    assert code == 0, err
    assert out.strip().splitlines()[-1] == "plain cli"
    assert dropper.dropped == 2  # both first replies were lost
    assert runs(markers, "handle") == 1 and runs(markers, "cli") == 1  # no second run


async def test_a_transparent_call_whose_reply_is_lost_gets_its_one_task(tmp_path: Path) -> None:
    markers = tmp_path / "markers"
    with servers(tmp_path, 1) as (server,):
        async with wire_to(server):
            pass  # ready
        dropper = ReplyDropper(server.url, drops=1)
        async with dropper.serving() as proxied, Client(proxied) as client:

            async def released() -> None:
                await started_in(markers, "call")
                release(markers, "call")

            async with anyio.create_task_group() as group:
                group.start_soon(released)
                result = await client.call_tool("plain_job", {"key": "call"})
    assert result.data == "plain call"
    assert dropper.dropped == 1 and runs(markers, "call") == 1


async def test_an_abandoned_transparent_call_cancels_the_task_it_made(tmp_path: Path) -> None:
    """The caller gives up before the reply comes: the task it made is found and cancelled."""
    markers = tmp_path / "markers"
    with servers(tmp_path, 1) as (server,):
        async with wire_to(server):
            pass  # ready
        holder = ReplyDropper(server.url, drops=1, hold=True)
        async with holder.serving() as proxied, Client(proxied) as client:
            with anyio.move_on_after(2) as gave_up:
                await client.call_tool("plain_job", {"key": "orphan"})
            assert gave_up.cancelled_caught and holder.dropped == 1
            with anyio.fail_after(15):  # the tool was stopped by the task's cancellation
                while not cancelled(markers, "orphan"):  # noqa: ASYNC110 - a file signal
                    await anyio.sleep(0.05)
    assert runs(markers, "orphan") == 1


def cancelled(markers: Path, key: str) -> bool:
    """Whether the tool body of `key` was stopped by a cancellation."""
    return any(markers.glob(f"{key}.cancelled.*"))
