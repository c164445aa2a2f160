"""The PostgreSQL store's batched statements: several callers' statements, one round trip.

`PostgresCalls` puts a `CallBatcher` (`stores.call_batching`) in front of the single
statements every task makes: its creation, `get`, a status change (`transition`), a
progress message and a worker's claim (`claim_queued`'s first statement). Made while
none of them is on its way, a statement goes with those made in the same turn of the
event loop, and by itself on a pooled connection, as it always did, when there are none;
made while one is, it goes with the others made meanwhile in one pipeline on one
connection: one send, one read, one commit.

The statements of a batch run in one transaction (BEGIN travels with the first, COMMIT
with the last: still one round trip; a batch of reads only needs none), so each sees
those before it, as it would have one after the other, and they commit together. That is the
saving on the server too: one commit, one WAL flush, for the batch, and one notification
for its creations (`postgres.created_notes`: a last statement sends it). Which they do not
share is failure: a statement the server refuses, or whose parameters psycopg cannot
send, rolls the batch back before anything commits, and then every call of it is made
again by its caller alone (`ALONE`), so only the statement at fault fails, with its own
error. A connection lost under a batch fails each of its writes as it would fail that
write alone (the store maps it to "unreachable"; the engine and the front end treat it
as they treat any lost reply), and its reads are made again alone, which retries them
on another connection (after a server restart each pooled connection may be a dead one).
Creates under the active-task caps ride only in a batch of reads, such creates and
claims (which skip locked rows), up to `BATCH_CREATES` in one (`_admitted`: the callers
of the others make them alone at once), so a batch holding the caps lock never waits for
a task's row meanwhile. In a batch the lock is only ever taken shared, and the database
itself bounds what batches add to the caps' shared-mode margin
(`postgres.caps_batched`): a create near a cap, past a transaction's `BATCH_CREATES` or
with no batch slot free inserts nothing there and is made again alone, where the check
is exact. A batch holds the rows it changed until it commits, so unlike single
statements it can meet another transaction in a lock cycle. Its writes run in task-id
order (`_lock_order`), the order in which lease renewal's statement over several tasks
normally locks them (an index scan over the sorted ids), which keeps the two apart; a
cycle PostgreSQL does find (two processes changing the same tasks at the same moment) is
a deadlock it breaks after `deadlock_timeout` by refusing one transaction: a refused
batch's calls go alone, a refused renewal is retried at the next one. A claim never waits
for a row (it skips locked ones). A statement waiting for a row lock holds the batch's
other calls meanwhile.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import AsyncConnection

from fastmcp_tasks.stores.call_batching import ALONE, CallBatcher
from fastmcp_tasks.stores.postgres.caps_batched import BATCH_CREATES, batched_create
from fastmcp_tasks.stores.postgres.created_notes import deferred, flush
from fastmcp_tasks.stores.postgres.liveness import returns_rows

if TYPE_CHECKING:
    from fastmcp_tasks.stores.postgres.sql import Statements

Row = tuple[Any, ...]
Params = Sequence[Any] | Mapping[str, Any]
#: One call: a statement, its parameters, whether it only reads, whether it is a create
#: that checks the active-task caps, and whether it is a write that never waits for a row
#: (a claim: it skips locked rows).
Statement = tuple[str, Params, bool, bool, bool]


class PostgresCalls:
    """The store's batched statements (module doc).

    Args:
        connection: a pooled connection, as the store checks one out (`_checkout`).
        timeout: the bound of one batch, seconds.
        prepare: psycopg's `prepare` for each statement.
        stats: the store's counters: each statement adds one to `"statements"`, and each
            statement that shared a round trip with another one to `"batched"` (a batch's
            creations' one notification is such a statement).
        sql: the store's statements: its schema (a capped create in a batch calls its
            `CAPS_CHECK_BATCHED`) and its channel (a batch's creations notify it once,
            `postgres.created_notes`).
    """

    def __init__(
        self,
        connection: Callable[[], AbstractAsyncContextManager[AsyncConnection[Any]]],
        timeout: float,
        prepare: bool | None,
        stats: dict[str, int],
        sql: Statements,
    ) -> None:
        self._connection = connection
        self._timeout = timeout
        self._prepare = prepare
        self._stats = stats
        self._schema = sql.schema
        self._channel = sql.channel
        self._batcher: CallBatcher[Statement] = CallBatcher(self._send, _closed, _admitted)

    async def query(
        self,
        query: str,
        params: Params,
        alone: Callable[[], Awaitable[list[Row]]],
        *,
        read: bool = False,
        capped: bool = False,
        skips_locked: bool = False,
    ) -> list[Row]:
        """The rows of one statement, batched (`alone()` when no other comes along).
        A `read` whose batch met a connection the server had closed is made again alone,
        on another connection, as a read made alone is (a write fails, as alone). A
        `capped` create rides only with reads, other capped creates and writes that
        `skips_locked` (which never wait for a row: module doc)."""
        return await self._batcher.call((query, params, read, capped, skips_locked), alone)

    async def _send(self, batch: list[Statement]) -> list[Any]:
        outcomes: list[Any] = [ALONE] * len(batch)
        sent = sorted(range(len(batch)), key=lambda i: _lock_order(batch[i]))
        texts, notify = self._texts([batch[i] for i in sent])
        statements = len(sent) + int(notify)  # the creations' notification is one more
        stats = self._stats
        stats["statements"] += statements  # sent, and made again if the batch is refused
        stats["batched"] = stats.get("batched", 0) + statements - 1  # one round trip
        writes = not all(batch[i][2] for i in sent)
        async with asyncio.timeout(self._timeout), self._connection() as conn:
            try:  # reads alone need no transaction of their own: nothing to commit
                async with conn.pipeline(), conn.transaction() if writes else nullcontext():
                    cursors = [
                        await conn.execute(text, batch[i][1], prepare=self._prepare)
                        for text, i in zip(texts, sent, strict=True)
                    ]
                    if notify:  # the creations' one notification, at commit
                        await conn.execute(flush(self._channel), prepare=self._prepare)
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

    def _texts(self, statements: list[Statement]) -> tuple[list[str], bool]:
        """The SQL each statement is sent as in a batch: a capped create's calls
        `CAPS_CHECK_BATCHED` (`postgres.caps_batched`); with more than one creation, each
        defers its notification to one at the batch's end (`postgres.created_notes`), and
        then whether that notification (`flush`) is due."""
        texts = [
            _batched(query, self._schema) if capped else query
            for query, _, _, capped, _ in statements
        ]
        deferrals = [deferred(text, self._channel) for text in texts]
        if sum(text is not None for text in deferrals) < 2:
            return texts, False
        return [
            text if later is None else later for text, later in zip(texts, deferrals, strict=True)
        ], True

    async def close(self) -> None:
        """Fail what is queued; the store closes."""
        await self._batcher.close()


def _closed() -> Exception:
    return psycopg.OperationalError("the store was closed")


def _admitted(batch: list[Statement]) -> list[bool]:
    """Which statements go in the batch: all, but capped creates only into a batch of
    reads, capped creates and writes that wait for no row, up to `BATCH_CREATES`; the
    callers of the others make them alone at once (module doc)."""
    writes = any(not (read or capped or skips) for _, _, read, capped, skips in batch)
    admitted: list[bool] = []
    taken = 0
    for _, _, _, capped, _ in batch:
        admitted.append(not capped or not (writes or taken >= BATCH_CREATES))
        taken += capped and not writes
    return admitted


@functools.lru_cache(maxsize=16)
def _batched(query: str, schema: str) -> str:
    return batched_create(query, schema)


def _lock_order(statement: Statement) -> tuple[int, str]:
    """Reads first, then the capped creates (beside no write that may wait: `_admitted`),
    then the writes by task id, then a claim (it locks rows it never waits for, and holds
    them only from there on, while no other statement of the batch waits for a row): the
    order a batch's statements run in (module doc). The sort is stable, so two calls for
    one task keep the order they were made in; concurrent calls have no order of their
    own."""
    _, params, read, capped, skips_locked = statement
    if read or not isinstance(params, Mapping):
        return (0, "")
    if capped:
        return (1, "")
    if skips_locked:
        return (3, "")
    return (2, str(params.get("id") or params.get("task_id") or ""))
