"""The Redis store's batched calls: its scripts and `get`'s `HGETALL`, one pipeline a batch.

`RedisCalls` puts a `CallBatcher` (`stores.call_batching`) in front of the calls every
task makes: the scripts (`create`, `transition`, `claim_queued`, every read-modify-write)
and `get`. Made while none of them is on its way, a call goes with the calls made in the
same turn of the event loop, and by itself, as it always did, when there are none (a
script through redis-py's `AsyncScript`); made while one is, it goes with the others
made meanwhile as one pipeline (`transaction=False`): one send, one read.

What each call sees is what it would see alone: the pipeline's commands run in the
order they were made, each on its own (a script is atomic by itself; a pipeline is not a
transaction), and each gets its own reply or error, so a script that fails, fails only
its caller, and so does a call whose arguments redis-py cannot encode (packing a
pipeline fails before anything is sent: each call is then checked alone, and the others
are made again by their callers). A `NOSCRIPT` (Redis restarted with an empty
script cache) is answered as the unbatched path answers it: the caller calls that script
again by itself, through `AsyncScript`, which loads it. The caller's `_guard` bounds the
whole wait (queue and round trip) by the store's `timeout` and maps redis-py's errors; a
batch is bounded by it too, so a black-holed Redis fails the batch's callers instead of
holding the next.

A call made alone goes on one connection the store keeps for them (redis-py's own
single-connection client, on a pool of one connection with the store pool's options,
so `max_connections` still counts only the others), not on one taken from the pool and
given back each time, which costs about a quarter of such a call's CPU. Before each call
it is checked as the pool checks a connection it hands out (`ensure_connection`), so one
Redis closed (a restart, an idle timeout) is made again instead of failing the call. A script
call (every call but `get`'s `HGETALL`) is then sent and its reply read on that
connection directly (`send_packed_command`, `read_response`; redis-py parses no script's
reply further, in either protocol), without the client's per-command layers (a lock, a
retry wrapper with no retries, timing for redis-py's own metrics): a quarter less CPU
again. redis-py closes the connection when either step fails or is cancelled, as it
does under `execute_command`; a `NOSCRIPT` (Redis lost its scripts) makes the call
again through redis-py's script object, which loads it. `HGETALL` (whose reply redis-py
parses by protocol), the connection's first call, and a call made while that connection
is busy (one the batcher handed back to its caller, made beside another), go through
redis-py's client (the last on a pool connection) as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.connection import AbstractConnection
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import DataError, NoScriptError

from fastmcp_tasks.stores.call_batching import ALONE, CallBatcher

#: One call: the command, and the script it calls (`None` for a plain command).
Command = tuple[tuple[Any, ...], AsyncScript | None]


class RedisCalls:
    """The store's batched calls (module doc).

    Args:
        client: the store's client (its connection pool).
        timeout: the bound of one batch's round trip, seconds.
        stats: the store's counters: each round trip adds one to `"round_trips"`.
    """

    def __init__(self, client: aioredis.Redis, timeout: float, stats: dict[str, int]) -> None:
        self._client = client
        # the connection for calls made alone (module doc): a pool of its own, with the
        # store pool's options, so it never takes one of `max_connections`
        shared = client.connection_pool
        self._own_pool = aioredis.BlockingConnectionPool(
            connection_class=shared.connection_class,
            max_connections=1,
            timeout=getattr(shared, "timeout", timeout),
            **shared.connection_kwargs,
        )
        self._own = aioredis.Redis(connection_pool=self._own_pool, single_connection_client=True)
        self._own_busy = False
        self._closed = False
        self._timeout = timeout
        self._stats = stats
        self._batcher: CallBatcher[Command] = CallBatcher(self._send, _closed)

    async def script(self, script: AsyncScript, keys: list[str], args: list[Any]) -> Any:
        """Call `script` (`EVALSHA`; loaded when Redis lacks it)."""

        def through(client: aioredis.Redis) -> Awaitable[Any]:
            return script(keys=keys, args=args, client=client)

        command = ("EVALSHA", script.sha, len(keys), *keys, *args)

        async def alone() -> Any:
            return await self._alone(through, command)

        return await self._batcher.call((command, script), alone)

    async def command(self, *command: Any) -> Any:
        """Run one plain command (its reply parsed as redis-py parses it)."""

        def through(client: aioredis.Redis) -> Awaitable[Any]:
            return client.execute_command(*command)

        async def alone() -> Any:
            return await self._alone(through)

        return await self._batcher.call((command, None), alone)

    async def _alone(
        self,
        through: Callable[[aioredis.Redis], Awaitable[Any]],
        script: tuple[Any, ...] | None = None,
    ) -> Any:
        """One round trip by itself: on the store's own connection unless it is busy; a
        script call (`script`, its `EVALSHA` command) directly on it (module doc)."""
        if self._closed:
            raise _closed()
        self._stats["round_trips"] += 1
        if self._own_busy:
            return await through(self._client)
        self._own_busy = True
        try:
            held = self._own.connection
            if held is not None:  # checked as the pool checks a connection it hands out:
                await self._own_pool.ensure_connection(held)  # one Redis closed is made again
            if held is None or script is None:  # the first call makes the connection
                return await through(self._own)
            try:
                return await _round_trip(held, script)
            except NoScriptError:  # Redis lost its scripts: redis-py's call loads it
                return await through(self._own)
        finally:
            self._own_busy = False

    async def _send(self, batch: list[Command]) -> list[Any]:
        pipe = self._client.pipeline(transaction=False)
        for command, _ in batch:
            pipe.execute_command(*command)
        self._stats["round_trips"] += 1
        try:
            async with asyncio.timeout(self._timeout):
                replies = await pipe.execute(raise_on_error=False)
        except (DataError, UnicodeEncodeError):  # packing failed: nothing was sent
            self._stats["round_trips"] -= 1
            return [self._unsendable(command) or ALONE for command, _ in batch]
        return [
            ALONE if isinstance(reply, NoScriptError) and script is not None else reply
            for (_, script), reply in zip(batch, replies, strict=True)
        ]

    def _unsendable(self, command: tuple[Any, ...]) -> Exception | None:
        """Why redis-py cannot encode `command`'s arguments, if it cannot."""
        encode = self._client.connection_pool.get_encoder().encode
        try:
            for arg in command[1:]:
                encode(arg)
        except Exception as exc:
            return exc
        return None

    async def close(self) -> None:
        """Fail what is queued and close the own connection; the store closes. A call on it
        still in flight fails with a connection error (the connection is closed under it,
        never given back while in use). The own client then holds no connection, so the
        garbage collector finds no client left open to warn of ("Unclosed client"); a call
        still on it through the client gives the closed connection back to the pool itself,
        once (a script sent on the connection directly gives nothing back)."""
        self._closed = True
        await self._batcher.close()
        await self._own_pool.disconnect()
        self._own.connection = None


async def _round_trip(connection: AbstractConnection, command: tuple[Any, ...]) -> Any:
    """Send `command` on `connection` and read its reply (module doc: a call made alone).
    The connection is closed by redis-py when either fails or is cancelled, so no reply
    is ever left on it for the next call; an error reply is raised as redis-py raises it."""
    await connection.send_packed_command(connection.pack_command(*command), check_health=False)
    return await connection.read_response()


def _closed() -> Exception:
    return RedisConnectionError("the store was closed")
