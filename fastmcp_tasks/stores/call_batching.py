"""Group commit for a networked store: calls made while another is on its way go together.

`CallBatcher` is what the Redis and PostgreSQL stores put in front of their hot calls
(`redis.batching`, `postgres.batching`). A call made while none of them is on its way
first lets the event loop finish its turn (one `sleep(0)`, no timer): the calls made in
that turn go with it as one batch, as when a claim's tasks end together and each
settles. With no such company it goes by itself, exactly as it would without batching:
idle, nothing waits. A call made while one is on its way waits for it, then goes with
every other call made meanwhile as one batch, one round trip (a Redis pipeline, a
PostgreSQL pipeline). Under load, a front end serving many requests or a worker
finishing a round of tasks makes a round trip per batch instead of one per call, and
the server does less per call too. One batch is on its way at a time, so the batch
grows with the load.

Each call gets its own reply or its own error; the store's `send` says how a batch
maps to them. A call whose caller stopped waiting (cancelled, timed out) before its
batch was sent is not sent. A batch that fails as a whole fails each of its calls with
that error; `send` may instead answer a call `ALONE`, and its caller then makes it by
itself (the PostgreSQL store does so for the calls of a batch a failing statement
aborted). The batch is sent by a task of its own, so a caller that stops waiting never
stops a batch other calls ride in. Closing lets the batch on its way end (its callers
get their answers: their calls may have been applied) and fails what is still queued.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

Call = TypeVar("Call")
T = TypeVar("T")

#: Most calls sent in one batch; more wait for the next.
LARGEST_BATCH = 256


class _Alone:
    def __repr__(self) -> str:
        return "ALONE"


#: `send`'s answer for a call its caller should make by itself.
ALONE: Any = _Alone()


class CallBatcher(Generic[Call]):
    """Sends an idle call with the calls made in its turn of the event loop (alone when
    none is), else as the next batch (module doc).

    Args:
        send: sends a batch (two calls or more) as one round trip; one outcome per
            call, in order: a reply, an `Exception` for that call alone, or `ALONE`.
            Raising fails every call of the batch.
        closed: the error queued calls get when the store closes.
        admit: which calls of a batch may go in it (`True` each); the others are
            answered `ALONE` at once, before the batch is sent. Default: all.
    """

    def __init__(
        self,
        send: Callable[[list[Call]], Awaitable[list[Any]]],
        closed: Callable[[], Exception],
        admit: Callable[[list[Call]], list[bool]] | None = None,
    ) -> None:
        self._send = send
        self._admit = admit
        self._closed_error = closed
        self._queued: list[tuple[Call, asyncio.Future[Any]]] = []
        self._busy = False  # a call, or a batch, is on its way
        self._sender: asyncio.Task[None] | None = None
        self._closed = False

    async def call(self, call: Call, alone: Callable[[], Awaitable[T]]) -> T:
        """Make `call`: when nothing is on its way, with the calls made in this turn of the
        event loop (`alone()` when none is), else in the next batch."""
        if self._closed:
            raise self._closed_error()
        first = False
        if not self._busy:
            self._busy = True
            try:  # one turn of the loop: the calls made in it come along (module doc)
                await asyncio.sleep(0)
            except BaseException:
                self._busy = False
                self._start()
                raise
            if self._closed:  # closed in that turn: what queued behind it was failed
                self._busy = False
                raise self._closed_error()
            if not self._queued:
                try:
                    return await alone()
                finally:
                    self._busy = False
                    self._start()
            first = True
        reply: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if first:  # it leads the calls that came along
            self._queued.insert(0, (call, reply))
            self._busy = False
            self._start()
        else:
            self._queued.append((call, reply))
        outcome = await reply
        if outcome is ALONE:
            return await alone()
        return outcome  # type: ignore[no-any-return]

    def _start(self) -> None:
        """Send what is queued, unless something is already on its way."""
        if self._queued and not self._busy and not self._closed:
            self._busy = True
            self._sender = asyncio.ensure_future(self._drain())

    async def _drain(self) -> None:
        try:
            while self._queued and not self._closed:
                taken = self._queued[:LARGEST_BATCH]
                del self._queued[:LARGEST_BATCH]
                batch = [(call, reply) for call, reply in taken if not reply.done()]
                if self._admit is not None and len(batch) > 1:
                    try:
                        admitted = self._admit([call for call, _ in batch])
                    except Exception as exc:  # a bug: its calls fail, the batcher serves on
                        self._settle(batch, [exc] * len(batch))
                        continue
                    for (_, reply), admit in zip(batch, admitted, strict=True):
                        if not admit:  # its caller makes it alone, now
                            reply.set_result(ALONE)
                    batch = [each for each, admit in zip(batch, admitted, strict=True) if admit]
                if len(batch) == 1:  # by itself, its caller makes it
                    batch[0][1].set_result(ALONE)
                elif batch:
                    await self._deliver(batch)
        finally:
            self._busy = False
            self._sender = None
            self._start()

    async def _deliver(self, batch: list[tuple[Call, asyncio.Future[Any]]]) -> None:
        try:
            outcomes = await self._send([call for call, _ in batch])
            if len(outcomes) != len(batch):
                raise RuntimeError(f"{len(outcomes)} outcomes for a batch of {len(batch)}")
        except Exception as exc:  # the batch failed as a whole: so does each call
            outcomes = [exc] * len(batch)
        except BaseException:  # cancelled: the event loop is going away
            self._settle(batch, [self._closed_error()] * len(batch))
            raise
        self._settle(batch, outcomes)

    @staticmethod
    def _settle(batch: list[tuple[Call, asyncio.Future[Any]]], outcomes: list[Any]) -> None:
        for (_, reply), outcome in zip(batch, outcomes, strict=True):
            if reply.done():
                continue
            if isinstance(outcome, BaseException):
                reply.set_exception(outcome)
            else:
                reply.set_result(outcome)

    async def close(self) -> None:
        """Let the batch on its way end (its calls may have been applied: their callers
        get their answers), then fail what is still queued; later calls fail at once."""
        self._closed = True
        sender, self._sender = self._sender, None
        try:
            if sender is not None:  # bounded: `send` is bounded by the store's timeout
                await asyncio.gather(asyncio.shield(sender), return_exceptions=True)
        finally:  # even if closing is cancelled: nothing queued is left unanswered
            for _, reply in self._queued:
                if not reply.done():
                    reply.set_exception(self._closed_error())
            self._queued.clear()
