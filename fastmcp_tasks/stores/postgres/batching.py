"""The PostgreSQL store's batched statements: several callers' statements, one round trip.

`PostgresCalls` puts a `CallBatcher` (`stores.call_batching`) in front of the single
statements every task makes: its creation, `get`, a status change (`transition`) and
a progress message. Made while none of them is on its way, a statement goes at once on
a pooled connection, as it always did; made while one is, it goes with the others made
meanwhile in one pipeline on one connection: one send, one read, one commit.

The statements of a batch run in one transaction (BEGIN travels with the first, COMMIT
with the last: still one round trip; a batch of reads only needs none), so each sees
those before it, as it would have one after the other, and they commit together. That is the
saving on the server too: one commit, one WAL flush, for the batch. Which they do not
share is failure: a statement the server refuses, or whose parameters psycopg cannot
send, rolls the batch back before anything commits, and then every call of it is made
again by its caller alone (`ALONE`), so only the statement at fault fails, with its own
error. A connection lost under a batch fails each of its writes as it would fail that
write alone (the store maps it to "unreachable"; the engine and the front end treat it
as they treat any lost reply), and its reads are made again alone, which retries them
on another connection (after a server restart each pooled connection may be a dead one).
A create under the active-task caps goes one to a batch, before the batch's other writes
(the caller of a second one makes it alone): the caps' shared-mode bound
(`schema.CAPS_FUNCTION`) counts one insert per transaction holding the caps lock. In a
batch the caps lock is only ever taken shared: a create near a cap inserts nothing there
and is made again alone, where the check is exact (`postgres.caps_batched`). A batch
holds the rows it changed until it commits, so unlike single statements it can meet
another transaction in a lock cycle. Its other writes run in task-id order
(`_lock_order`), the order in which lease renewal's statement over several tasks
normally locks them (an index scan over the sorted ids), which keeps the two apart; a
cycle PostgreSQL does find (two processes changing the same tasks at the same moment) is
a deadlock it breaks after `deadlock_timeout` by refusing one transaction: a refused
batch's calls go alone, a refused renewal is retried at the next one. A statement
waiting for a row lock holds the batch's other calls meanwhile.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import Any

import psycopg
from psycopg import AsyncConnection

from fastmcp_tasks.stores.call_batching import ALONE, CallBatcher
from fastmcp_tasks.stores.postgres.liveness import returns_rows

Row = tuple[Any, ...]
Params = Sequence[Any] | Mapping[str, Any]
#: One call: a statement, its parameters, whether it only reads, and whether it is a
#: create that checks the active-task caps.
Statement = tuple[str, Params, bool, bool]


class PostgresCalls:
    """The store's batched statements (module doc).

    Args:
        connection: a pooled connection, as the store checks one out (`_checkout`).
        timeout: the bound of one batch, seconds.
        prepare: psycopg's `prepare` for each statement.
        stats: the store's counters: each statement adds one to `"statements"`, and each
            statement that shared a round trip with another one to `"batched"`.
    """

    def __init__(
        self,
        connection: Callable[[], AbstractAsyncContextManager[AsyncConnection[Any]]],
        timeout: float,
        prepare: bool | None,
        stats: dict[str, int],
    ) -> None:
        self._connection = connection
        self._timeout = timeout
        self._prepare = prepare
        self._stats = stats
        self._batcher: CallBatcher[Statement] = CallBatcher(self._send, _closed, _one_capped)

    async def query(
        self,
        query: str,
        params: Params,
        alone: Callable[[], Awaitable[list[Row]]],
        *,
        read: bool = False,
        capped: bool = False,
    ) -> list[Row]:
        """The rows of one statement: `alone()` when nothing is on its way, else batched.
        A `read` whose batch met a connection the server had closed is made again alone,
        on another connection, as a read made alone is (a write fails, as alone). A
        `capped` create goes one to a batch (module doc)."""
        return await self._batcher.call((query, params, read, capped), alone)

    async def _send(self, batch: list[Statement]) -> list[Any]:
        outcomes: list[Any] = [ALONE] * len(batch)
        sent = sorted(range(len(batch)), key=lambda i: _lock_order(batch[i]))
        stats = self._stats
        stats["statements"] += len(sent)  # sent, and made again if the batch is refused
        stats["batched"] = stats.get("batched", 0) + len(sent) - 1  # one round trip
        writes = not all(batch[i][2] for i in sent)
        async with asyncio.timeout(self._timeout), self._connection() as conn:
            try:  # reads alone need no transaction of their own: nothing to commit
                async with conn.pipeline(), conn.transaction() if writes else nullcontext():
                    cursors = [
                        await conn.execute(batch[i][0], batch[i][1], prepare=self._prepare)
                        for i in sent
                    ]
            except psycopg.Error as exc:
                if conn.closed or conn.broken:  # the connection, not a statement
                    for i in sent:
                        outcomes[i] = ALONE if batch[i][2] else exc
                return outcomes  # else refused and rolled back: each caller alone
            except Exception:  # parameters that could not be encoded: nothing committed
                return outcomes
            for i, cur in zip(sent, cursors, strict=True):
                outcomes[i] = await cur.fetchall() if returns_rows(cur) else []
        return outcomes

    async def close(self) -> None:
        """Fail what is queued; the store closes."""
        await self._batcher.close()


def _closed() -> Exception:
    return psycopg.OperationalError("the store was closed")


def _one_capped(batch: list[Statement]) -> list[bool]:
    """Which statements go in the batch: all but a second capped create and later ones,
    whose callers make them alone at once (module doc)."""
    admitted: list[bool] = []
    capped = False
    for _, _, _, is_capped in batch:
        admitted.append(not (is_capped and capped))
        capped = capped or is_capped
    return admitted


def _lock_order(statement: Statement) -> tuple[int, str]:
    """Reads first, then a capped create, then the other writes by task id: the order a
    batch's statements run in (module doc). The sort is stable, so two calls for one task
    keep the order they were made in; concurrent calls have no order of their own."""
    _, params, read, capped = statement
    if read or not isinstance(params, Mapping):
        return (0, "")
    if capped:
        return (1, "")
    return (2, str(params.get("id") or params.get("task_id") or ""))
