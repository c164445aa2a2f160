"""A `tools/call` whose reply is lost: the caller still gets its one task.

A reverse proxy in front of a real server process forwards the first `tools/call` of
each connection to the server, reads the server's answer, and drops the connection
instead of passing the answer on: the task exists, but the caller never heard of it.
`call_tool_task()` and `fastmcp-tasks call` resend the call with the same idempotency
key; the server answers with the task the first send created, so the result arrives
and the tool body runs exactly once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.abc
import httpx2
import pytest
from fastmcp import Client

from fastmcp_tasks import call_tool_task
from tests.test_caller_survives import cli_call, finished, runs
from tests.test_durability import release, servers, started_in, wire_to

pytestmark = [pytest.mark.anyio, pytest.mark.bound(60)]


class ReplyDropper:
    """A TCP proxy that swallows the answer to the first `drops` `tools/call` requests."""

    def __init__(self, upstream: str, drops: int) -> None:
        self.upstream = httpx2.URL(upstream)
        self.drops = drops
        self.dropped = 0

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[str]:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        async with listener, anyio.create_task_group() as group:
            group.start_soon(listener.serve, self._relay)
            yield str(self.upstream.copy_with(port=port))
            group.cancel_scope.cancel()

    async def _relay(self, client: anyio.abc.SocketStream) -> None:
        upstream = await anyio.connect_tcp("127.0.0.1", self.upstream.port or 80)
        dropping = anyio.Event()
        async with client, upstream, anyio.create_task_group() as group:

            async def requests() -> None:
                async for chunk in client:
                    if b"mcp-method: tools/call" in chunk.lower() and self.dropped < self.drops:
                        self.dropped += 1
                        dropping.set()  # the server gets it; its answer goes nowhere
                    await upstream.send(chunk)
                group.cancel_scope.cancel()

            async def answers() -> None:
                async for chunk in upstream:
                    if dropping.is_set():
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
