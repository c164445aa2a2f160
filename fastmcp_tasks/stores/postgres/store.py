"""The PostgreSQL store (`postgresql://user@host:port/db`, `postgres://`): tasks shared by
every process that uses the same database and schema.

This module owns `PostgresTaskStore`: creation (with its caps, dedupe and
`max_tasks`), reads, every state change of a task but a status or message change
(`transition`, `settle`, `set_status_message`, `settle_message`: `postgres.transitions`),
and retention. Connections, options and errors are
`postgres.connections`, the tables `postgres.schema`, the statements `postgres.sql`,
the change feed `postgres.feed`; leases and the queue
`postgres.leases` (gated claims `postgres.gates`), flow control `postgres.flow`,
listing `postgres.listing`, the operator records (histories, workers, pauses, audit)
`postgres.operations`, the durable steps `postgres.steps`. A finished task keeps its
arguments; its input state and context are dropped.

Atomicity. Every change is one transaction with compare-and-set semantics: the
hot ones are one statement (an UPDATE whose WHERE is the compare, with its change
rows and `pg_notify` in the same CTE: `postgres.sql`), the others load the row
`FOR NO KEY UPDATE`, apply `stores.rules` and write it back. A terminal task is never
changed: every UPDATE requires an active status, re-checked by PostgreSQL on the
newest row version when a concurrent transaction changed it first.

Serialisation. `create` with `ActiveCaps` is one statement (one round trip, in
its own transaction unless it dedupes): its `caps` CTE calls `caps_check_8x8`
(`schema.CAPS_FUNCTION`), which takes this schema's advisory transaction lock
("caps") and then reads the active-task counters (`active_counts`: the total and
the owner's, `COUNT_SHARDS` shard rows each, moved by the statements that create and end tasks,
so a check costs the same with 10 or 10,000 tasks active) in a snapshot taken after
the lock is granted; the statement inserts only under the caps and commits at once.
A create far from every cap (more than `max_connections` + `max_prepared_transactions` +
what batches add, `caps_batched.BATCH_MARGIN`, below it) takes the lock shared, so
creates in any number of processes do not wait for each other; one nearer takes it
exclusive, waits for the shared holders, and checks exactly; one whose counters moved
into that margin between its unlocked look and its locked read inserts nothing and runs
again exclusive (inside a dedupe transaction the check is exclusive from the start).
Concurrent creates in any process never overshoot (the proof is at `CAPS_FUNCTION`; a
task ending meanwhile only makes the count high for a moment), and the lock is held for
no network round trip. A process of an earlier release takes the lock exclusive
(`caps_counts`), which the rule allows. A create without caps takes no lock and is one
statement. A dedupe create takes the advisory lock of its key ("dedupe:<key>") before it
looks for the key's holder, so of two concurrent creates with one key exactly one inserts. An
idempotency key (matched for the task's whole lifetime, `dedupe_window=inf`) without
is one statement on its first use, with or without caps: the insert, guarded by the
function `key_free`, which takes the same lock and then looks for a live holder
(`create_unheld`, `create_capped_unheld`); only a held key (a resend), a refused cap or
a full store go on to the general path, which reads the holder or raises.
`max_tasks` counts retained tasks in counter rows (`task_counts`, one per backend
shard, moved by the same statements that insert and delete tasks): cheap, and exact
except that creates racing at the very cap may overshoot it by the number racing (it
bounds memory, not a contract).

Expiry. A finished task's `expires_at` (indexed) is set when it ends; reads
never return a task past it; `purge_expired` deletes them (a range of the index),
leaving tombstones, and prunes tombstones, turns and old change rows.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import Any

from psycopg import AsyncConnection

from fastmcp_tasks.errors import DuplicateTask, TaskLimitExceeded
from fastmcp_tasks.stores import rules
from fastmcp_tasks.stores.base import (
    ActiveCaps,
    TaskChange,
    TaskRecord,
    encode_json,
)
from fastmcp_tasks.stores.flow import dedupe_match
from fastmcp_tasks.stores.postgres.connections import DEFAULT_MAX_TASKS, Emit
from fastmcp_tasks.stores.postgres.feed import WAKE_SPACING
from fastmcp_tasks.stores.postgres.flow import MAX_TOMBSTONES, PostgresFlow
from fastmcp_tasks.stores.postgres.leases import PostgresLeases
from fastmcp_tasks.stores.postgres.listing import PostgresListing
from fastmcp_tasks.stores.postgres.operations import PostgresOperations
from fastmcp_tasks.stores.postgres.schema import (
    COLUMNS,
    SELECT_COLUMNS,
    from_row,
    to_params,
)
from fastmcp_tasks.stores.postgres.steps import PostgresSteps
from fastmcp_tasks.stores.postgres.transitions import PostgresTransitions
from fastmcp_tasks.wire.names import ACTIVE_STATUSES

_WIDTH = len(COLUMNS)


@functools.lru_cache(maxsize=16)
def _peeking(get: str) -> str:
    """`Statements.get` reading neither `arguments` nor `context` (`peek`)."""
    lean = ", ".join("NULL" if c in ("arguments", "context") else c for c in COLUMNS)
    if not get.startswith(f"SELECT {SELECT_COLUMNS} FROM "):
        raise AssertionError("the get statement must select the task's columns")
    return get.replace(SELECT_COLUMNS, lean, 1)


class PostgresTaskStore(
    PostgresSteps,
    PostgresOperations,
    PostgresFlow,
    PostgresListing,
    PostgresLeases,
    PostgresTransitions,
):
    """A `TaskStore` in a PostgreSQL schema, shared by every process using it.

    Args:
        url: `postgresql://[user[:password]@]host[:port]/db` (or `postgres://`); the query
            may carry the options below (`schema`, `listen_url`, `pool_min`, `pool_max`,
            `timeout`, `prepare`) and any libpq option (`sslmode`, ...).
        schema: the schema holding the store's tables (default `fastmcp_tasks`; created
            when absent). Several stores share a database by using different schemas.
        listen_url: the URL of the change feed's LISTEN connection, when `url` goes
            through a transaction-mode pooler (LISTEN needs a session).
        max_tasks: most tasks retained at once; `None`: no cap.
        tombstone_retention: seconds a removed task's tombstone is kept (`stores.flow`);
            `None` keeps none.
        timeout: seconds any one call may take before `StoreTimeout` (pool wait,
            connecting and statements); also the connect timeout.
        pool_min: connections the pool keeps open.
        pool_max: connections the pool opens at most.
        prepare: prepare hot statements (default); off for a pooler that cannot.
        change_retention: seconds a change-feed row is kept by `purge_expired`.
        max_changes: most change-feed rows kept by `purge_expired`.
        gap_timeout: seconds the feed waits for a missing `seq` it cannot prove gone.

    Raises:
        ConfigurationError: a malformed URL or option.
    """

    scheme = "postgresql"
    durable = True

    # --- creation and reads -----------------------------------------------------------

    async def create(
        self,
        record: TaskRecord,
        *,
        caps: ActiveCaps | None = None,
        dedupe_window: float | None = None,
    ) -> TaskRecord | None:
        capped = (
            caps is not None
            and record.is_active
            and (caps.total is not None or (caps.per_owner is not None and record.owner))
        )
        key = record.dedupe_key if dedupe_window is not None else None
        if key is None:  # one statement, its own transaction (the caps lock's too)
            if await self._create_batched(record, caps if capped else None):
                return None
            async with self._connection() as conn:
                await self._insert(conn, record, caps if capped else None, own_transaction=True)
            return None
        lifetime = dedupe_window is not None and math.isinf(dedupe_window)
        if lifetime and await self._create_unheld(record, key, caps if capped else None):
            return None  # the usual case of an idempotency key: its first use, one round trip
        async with self._tx() as conn:
            if key is not None and dedupe_window is not None:
                await self._lock(conn, f"dedupe:{key}")
                now = time.time()
                rows = await self._on(conn, self.sql.holder, {"key": key, "now": now})
                if rows:
                    found = from_row(rows[0])
                    if dedupe_match(found, now, dedupe_window):
                        return found
            await self._insert(conn, record, caps if capped else None, own_transaction=False)
        return None

    async def _create_batched(self, record: TaskRecord, caps: ActiveCaps | None) -> bool:
        """Insert `record` in one statement, batched (`postgres.batching`: alone when no
        other statement comes along; capped creates ride only with reads, claims and
        each other, their caps checked far from every cap only,
        `postgres.caps_batched`). `False`: nothing was inserted (a duplicate, a cap or
        `max_tasks` refused, or in a batch near a cap, past its creates or with no batch
        slot free): the general path runs it again in a transaction of its own and
        decides what that means."""
        params = self._params(record)
        query = self.sql.create
        if caps is not None:
            query = self.sql.create_capped
            params.update(self._caps_params(caps, exclusive=False))
        rows = await self._query(query, params, batch=True, capped=caps is not None)
        return bool(rows[0][0])

    async def _create_unheld(self, record: TaskRecord, key: str, caps: ActiveCaps | None) -> bool:
        """Insert `record` unless a live task holds `key`, in one statement (`key_free` takes
        the key's lock, as the general path does; the caps as `_insert` checks them, in
        their shared mode while far from a cap). `False`: nothing was inserted (the key is
        held, a cap or `max_tasks` refused): the general path decides what that means."""
        params = {**self._params(record), "key_lock": f"{self.schema}:dedupe:{key}"}
        query = self.sql.create_unheld
        if caps is not None:
            query = self.sql.create_capped_unheld
            params.update(self._caps_params(caps, exclusive=False))
        async with self._connection() as conn:
            while True:
                row = (await self._on(conn, query, params))[0]
                if caps is not None and not row[0] and row[5] and not params["exclusive"]:
                    params["exclusive"] = True  # came near a cap meanwhile: check exactly
                    continue
                return bool(row[0])

    def _caps_params(self, caps: ActiveCaps, *, exclusive: bool) -> dict[str, Any]:
        """The parameters of the caps check (`CAPS_FUNCTION`) of a capped create."""
        lock = f"{self.schema}:caps"
        return {
            "total": caps.total,
            "per_owner": caps.per_owner,
            "lock": lock,
            "exclusive": exclusive,
        }

    def _params(self, record: TaskRecord) -> dict[str, Any]:
        """The parameters of `create` / `create_unheld` for `record`."""
        params = dict(zip((*COLUMNS, "expires_at"), to_params(record), strict=True))
        params.update(
            max=self.max_tasks,
            queued=record.is_active and record.lease_owner is None,
            details=encode_json({"app": record.app}),
            now=time.time(),
        )
        return params

    async def _insert(
        self,
        conn: AsyncConnection[Any],
        record: TaskRecord,
        caps: ActiveCaps | None,
        *,
        own_transaction: bool,
    ) -> None:
        params = self._params(record)
        query = self.sql.create
        if caps is not None:
            query = self.sql.create_capped
            # Inside a transaction (a dedupe create) the shared mode could not retry
            # exclusive without risking a deadlock: check exactly from the start.
            params.update(self._caps_params(caps, exclusive=not own_transaction))
        swept = False
        while True:
            row = (await self._on(conn, query, params))[0]
            if row[0]:
                return
            if caps is not None and row[5]:  # came near a cap meanwhile: check exactly
                params["exclusive"] = True
                continue
            if caps is not None and (refused := caps.refusal(row[3], row[4], record.owner)):
                raise refused
            if self.max_tasks is not None and row[1] >= self.max_tasks:
                if not swept:  # expired tasks make room
                    swept = True
                    await self._sweep(conn, time.time())
                    continue
                raise TaskLimitExceeded("max_tasks", self.max_tasks)
            raise DuplicateTask(f"task {record.task_id!r} already exists")

    async def get(self, task_id: str) -> TaskRecord | None:
        params = {"id": task_id, "now": time.time()}
        rows = await self._query(self.sql.get, params, read=True, batch=True)
        return from_row(rows[0]) if rows else None

    async def peek(self, task_id: str) -> TaskRecord | None:
        """`get` without `arguments` and `context` (`stores.peeking`)."""
        params = {"id": task_id, "now": time.time()}
        rows = await self._query(_peeking(self.sql.get), params, read=True, batch=True)
        return from_row(rows[0]) if rows else None

    # --- changes ----------------------------------------------------------------------

    async def request_input(
        self, task_id: str, requests: dict[str, Any], *, status_message: str | None = None
    ) -> TaskRecord | None:
        def apply(record: TaskRecord) -> tuple[TaskRecord | None, bool, list[Emit]]:
            if not rules.park(record, requests, status_message):
                return None, False, []
            return record, True, [("inputs", {"keys": list(requests)})]

        return await self._modify(task_id, apply, None)

    async def answer_input(self, task_id: str, responses: dict[str, Any]) -> dict[str, Any] | None:
        def apply(record: TaskRecord) -> tuple[dict[str, Any] | None, bool, list[Emit]]:
            accepted = rules.accept_answers(record, responses)
            if not accepted:
                return accepted, False, []
            return accepted, True, [("answered", {"keys": list(accepted)})]

        return await self._modify(task_id, apply, None)

    async def take_answers(self, task_id: str, keys: frozenset[str]) -> dict[str, Any]:
        def apply(record: TaskRecord) -> tuple[dict[str, Any], bool, list[Emit]]:
            taken = rules.take_answers(record, keys)
            return taken, bool(taken), []

        if not keys:
            return {}
        return await self._modify(task_id, apply, {})

    async def withdraw_input(self, task_id: str, keys: frozenset[str]) -> TaskRecord | None:
        def apply(record: TaskRecord) -> tuple[TaskRecord | None, bool, list[Emit]]:
            if record.status not in ACTIVE_STATUSES:
                return None, False, []
            if not rules.withdraw(record, keys):
                return record, False, []
            return record, True, [("inputs", {"withdrawn": sorted(keys)})]

        return await self._modify(task_id, apply, None)

    async def request_cancel(self, task_id: str) -> TaskRecord | None:
        return await self._fresh(
            self.sql.request_cancel,
            {"id": task_id},
            lambda found: found.status not in ACTIVE_STATUSES,  # else a change ended it
        )

    def changes(
        self, task_ids: frozenset[str] | None = None, kinds: frozenset[str] | None = None
    ) -> AbstractAsyncContextManager[AsyncIterator[TaskChange]]:
        self._require()
        return self._feed.subscribe(task_ids, kinds, self._newest_change)

    def space_wakes(self, seconds: float, runner: str = "") -> None:
        """Let the change feed wake `runner` (its lease owner id) once per `seconds` at most
        (never less than `feed.WAKE_SPACING`; the reader takes up to half off at random):
        its workers share a busy queue with others and it is not their primary
        (`server.engine.watcher`: peers). The store instance has one reader for all its
        runners, which wakes them at the shortest pace any of them asked for, so that a
        primary sharing the instance with a secondary keeps its own pace."""
        self._wake_paces[runner] = max(WAKE_SPACING, seconds)
        self._feed.pace.set(min(self._wake_paces.values()))

    @functools.cached_property
    def _wake_paces(self) -> dict[str, float]:
        """Each runner's last pace (`space_wakes`): one entry per runner of the instance."""
        return {}

    async def _newest_change(self) -> int:
        rows = await self._query(self.sql.last_seq, read=True)
        return int(rows[0][0])

    # --- retention --------------------------------------------------------------------

    async def _sweep(self, conn: AsyncConnection[Any], now: float) -> int:
        """Delete the expired tasks (each leaving a tombstone unless none are kept)."""
        bury = self.tombstone_retention is not None
        rows = await self._on(conn, self.sql.purge, {"now": now, "bury": bury})
        return int(rows[0][0])

    async def purge_expired(self, now: float) -> int:
        retention = self.tombstone_retention
        async with self._tx() as conn:
            removed = await self._sweep(conn, now)
            if retention is None:
                await self._on(conn, self.sql.forget_all_tombstones, fetch=False)
            else:
                await self._on(
                    conn, self.sql.forget_tombstones, {"before": now - retention}, fetch=False
                )
                await self._on(
                    conn, self.sql.trim_tombstones, {"keep": MAX_TOMBSTONES - 1}, fetch=False
                )
            await self._on(conn, self.sql.forget_turns, fetch=False)
            cut = {"before": time.time() - self.change_retention, "keep": self.max_changes}
            await self._on(conn, self.sql.trim_changes, cut, fetch=False)
        return removed

    def __repr__(self) -> str:
        return f"PostgresTaskStore({self.where})"


__all__ = ["DEFAULT_MAX_TASKS", "PostgresTaskStore"]
