"""The PostgreSQL store's connections: options, the pool, running SQL, errors.

`PostgresConnections` owns what `open` acquires and `close` releases: a
`psycopg_pool.AsyncConnectionPool` of autocommit connections (a statement is its own
transaction; `_tx` opens an explicit one where a read must come before the write),
the change feed (`postgres.feed`, its own LISTEN connection), and the checks at open
(`postgres.refusals`: a server that refuses the database, role or privileges is a
`ConfigurationError`; `postgres.sessions`: no transaction-mode pooler where a session
is needed; then `schema.prepare`). Hot statements are prepared on each connection
(`prepare=True`; the URL option `prepare=false` turns that off, for a transaction-mode
pooler).

Failures. Every call is bounded as a whole by `timeout` (waiting for a pooled
connection, connecting, the statements): past it the caller gets `StoreTimeout`.
A psycopg connection or operational error (refused, reset, the server shutting
down, a black-holed host that `connect_timeout` or TCP keepalives give up on) is a
`StoreError` saying the store is unreachable; any other psycopg error a
`StoreError` with the server's message. No message carries the password
(`where` is the URL without it, and messages are scrubbed). While the server
refuses connections a call fails at once, not after a wait for the pool
(`postgres.liveness`). The pool replaces a dead connection when it is handed back
and one found dead (`liveness.lost`) before it is handed out, so once the server
answers again calls work without reopening the store; a read that met a connection
the server had closed meanwhile is retried on another.

`stats["statements"]` counts statements sent through the pool (the feed's are
counted as `stats["feed_statements"]`; `stats["batched"]` those that shared a round
trip with another, `postgres.batching`): plain counters, for benchmarks and tests.
"""

from __future__ import annotations

import asyncio
import functools
import re
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, TypeVar

import psycopg
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from fastmcp_tasks.errors import ConfigurationError, StoreError, StoreTimeout
from fastmcp_tasks.stores.base import TaskRecord
from fastmcp_tasks.stores.flow import DEFAULT_TOMBSTONE_RETENTION
from fastmcp_tasks.stores.postgres import refusals, sessions
from fastmcp_tasks.stores.postgres import schema as tables
from fastmcp_tasks.stores.postgres.batching import PostgresCalls
from fastmcp_tasks.stores.postgres.feed import QUIET_LAG, PostgresChangeFeed
from fastmcp_tasks.stores.postgres.liveness import Reach, returns_rows, session_defaults, setter
from fastmcp_tasks.stores.postgres.sql import Statements, save_params
from fastmcp_tasks.stores.postgres.urls import parse_store_url, redact, secrets

DEFAULT_MAX_TASKS = 100_000
DEFAULT_SCHEMA = "fastmcp_tasks"

_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
#: Seconds the pool keeps retrying one failed connection before it gives up (a caller
#: that needs one starts a new attempt): short, so a restarted server is used at once.
RECONNECT_TIMEOUT = 2.0

Row = tuple[Any, ...]
Params = Sequence[Any] | Mapping[str, Any]
#: A change-feed row a modification appends: its kind and details.
Emit = tuple[str, dict[str, Any]]
T = TypeVar("T")


class PostgresConnections:
    """The pool, options and feed of `PostgresTaskStore` (see its Args)."""

    def __init__(
        self,
        url: str = "postgresql://localhost/postgres",
        *,
        schema: str | None = None,
        listen_url: str | None = None,
        max_tasks: int | None = DEFAULT_MAX_TASKS,
        tombstone_retention: float | None = DEFAULT_TOMBSTONE_RETENTION,
        timeout: float | None = None,
        pool_min: int | None = None,
        pool_max: int | None = None,
        prepare: bool | None = None,
        change_retention: float = 300.0,
        max_changes: int = 100_000,
        gap_timeout: float = 10.0,
    ) -> None:
        libpq, own = parse_store_url(url)
        try:
            schema = schema or own.get("schema") or DEFAULT_SCHEMA
            listen = listen_url or own.get("listen_url")
            timeout = float(own.get("timeout", 5.0)) if timeout is None else timeout
            pool_min = int(own.get("pool_min", 1)) if pool_min is None else pool_min
            pool_max = int(own.get("pool_max", 10)) if pool_max is None else pool_max
            if prepare is None:
                prepare = own.get("prepare", "true").lower() not in ("0", "false", "no", "off")
        except ValueError as exc:
            raise ConfigurationError(f"PostgreSQL task store URL {redact(url)!r}: {exc}") from exc
        if not _SCHEMA_NAME.fullmatch(schema):
            raise ConfigurationError(
                f"PostgreSQL task store schema must be a lower-case identifier "
                f"([a-z_][a-z0-9_]*, at most 63 characters), got {schema!r}"
            )
        if max_tasks is not None and max_tasks < 1:
            raise ConfigurationError(f"max_tasks must be at least 1, got {max_tasks}")
        if tombstone_retention is not None and tombstone_retention < 0:
            raise ConfigurationError(
                f"tombstone_retention must not be negative, got {tombstone_retention}"
            )
        if not timeout > 0 or pool_min < 0 or pool_max < max(pool_min, 1) or max_changes < 1:
            raise ConfigurationError(
                "PostgreSQL task store needs timeout > 0, 0 <= pool_min <= pool_max, "
                "pool_max >= 1 and max_changes >= 1"
            )
        if listen is not None:
            listen = parse_store_url(listen)[0]
        self.url = libpq
        self.listen_url = listen or libpq
        self.schema = schema
        self.where = f"{redact(libpq)} (schema {schema})"
        self.max_tasks = max_tasks
        self.tombstone_retention = tombstone_retention
        self.timeout = timeout
        self.pool_min = pool_min
        self.pool_max = pool_max
        self.change_retention = change_retention
        self.max_changes = max_changes
        self._prepare: bool | None = True if prepare else None
        self._secrets = [*secrets(libpq), *secrets(self.listen_url)]
        self.sql = Statements(schema)
        self.stats: dict[str, int] = {"statements": 0, "feed_statements": 0, "feed_reads": 0}
        self._pool: AsyncConnectionPool[AsyncConnection[Any]] | None = None
        self._calls: PostgresCalls | None = None
        self._reach = Reach()
        self._session, self._limit = session_defaults(libpq, timeout, sessions=prepare)
        self._feed = PostgresChangeFeed(
            url=self.listen_url,
            options=session_defaults(self.listen_url, timeout)[0],
            sql=self.sql,
            connect_timeout=timeout,
            application_name=f"fastmcp-tasks-feed:{schema}"[:63],
            label=self.where,
            gap_timeout=gap_timeout,
            quiet_lag=min(QUIET_LAG, change_retention / 2),  # read before the trim
            keep_up=change_retention / 4,
            stats=self.stats,
            scrub=self._scrub,
            pooled=self._exec,
        )

    # --- lifecycle ----------------------------------------------------------------

    def _conninfo_kwargs(self) -> dict[str, Any]:
        return {
            "autocommit": True,
            "prepare_threshold": 5 if self._prepare else None,
            "connect_timeout": max(1, round(self.timeout)),
            "application_name": f"fastmcp-tasks:{self.schema}"[:63],
            **self._session,
        }

    async def open(self) -> None:
        """Open the pool and check (create, migrate) the schema.

        Raises:
            StoreError: the server is unreachable (nothing is kept open).
            ConfigurationError: the schema is another program's, or newer; an address
                keeps no session where one is needed (`postgres.sessions`); or the server
                refuses the database, role or privileges (`postgres.refusals`).
        """
        if self._pool is not None:
            return
        try:
            async with self._guard():  # one direct connection: a clear error when unreachable
                conn = await AsyncConnection.connect(self.url, **self._conninfo_kwargs())
                async with conn:
                    await sessions.check(self, conn)  # before the schema: a pooler first
                    await tables.prepare(conn, self.schema, self.where)
        except StoreError as failure:
            refusals.check(failure, self.where, self._scrub)  # misconfigured, not down
            raise
        pool: AsyncConnectionPool[AsyncConnection[Any]] = AsyncConnectionPool(
            self.url,
            min_size=self.pool_min,
            max_size=self.pool_max,
            kwargs=self._conninfo_kwargs(),
            timeout=self.timeout,
            open=False,
            name=f"fastmcp-tasks:{self.schema}",
            connection_class=self._reach.connection_class(),
            configure=setter(self._limit),
            reconnect_timeout=RECONNECT_TIMEOUT,
        )
        await pool.open(wait=False)
        self._calls = PostgresCalls(
            lambda: self._checkout(pool), self.timeout, self._prepare, self.stats, self.sql
        )
        self._pool = pool

    async def close(self) -> None:
        """End every subscription, stop the feed and close the pool. Idempotent."""
        await self._feed.close()
        calls, self._calls = self._calls, None
        if calls is not None:
            await calls.close()
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    async def clear(self) -> None:
        """Delete every task, change, turn, tombstone, operator record and step of this
        schema (tests)."""
        s = self.schema
        await self._exec(
            f"TRUNCATE {s}.tasks, {s}.changes, {s}.task_counts, {s}.active_counts, "
            f"{s}.gate_turns, {s}.tombstones, {s}.task_events, {s}.workers, {s}.pauses, "
            f"{s}.audit, {s}.steps"
        )

    # --- running SQL ----------------------------------------------------------------

    def _require(self) -> AsyncConnectionPool[AsyncConnection[Any]]:
        if self._pool is None:
            raise StoreError(f"PostgreSQL task store {self.where} is not open")
        return self._pool

    def _scrub(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def _mapped(self, exc: BaseException) -> StoreError | None:
        """The `StoreError` a failure of a call is reported as (module doc); `None`: as is."""
        if isinstance(exc, TimeoutError):
            return StoreTimeout(
                f"PostgreSQL task store {self.where}: no answer within {self.timeout:g} s"
            )
        if isinstance(exc, PoolTimeout):
            return StoreError(
                f"PostgreSQL task store {self.where} is unreachable: no connection within "
                f"{self.timeout:g} s"
            )
        if isinstance(exc, psycopg.OperationalError):
            return StoreError(
                f"PostgreSQL task store {self.where} is unreachable: {self._scrub(str(exc))}"
            )
        if isinstance(exc, psycopg.Error):
            return StoreError(f"PostgreSQL task store {self.where}: {self._scrub(str(exc))}")
        return None

    def describe(self) -> str:
        """The masked URL and the schema (`stores.urls.describe`)."""
        return self.where

    @asynccontextmanager
    async def _guard(self) -> AsyncIterator[None]:
        """Bound the body by `timeout`; psycopg failures as `StoreError` (module doc)."""
        try:
            async with asyncio.timeout(self.timeout):
                yield
        except (TimeoutError, psycopg.Error) as exc:
            mapped = self._mapped(exc)
            if mapped is None:
                raise
            raise mapped from exc

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[AsyncConnection[Any]]:
        """A pooled autocommit connection, under `_guard`."""
        pool = self._require()
        async with self._guard(), self._checkout(pool) as conn:
            yield conn

    def _checkout(
        self, pool: AsyncConnectionPool[AsyncConnection[Any]]
    ) -> AbstractAsyncContextManager[AsyncConnection[Any]]:
        """A pooled connection, failing at once while the server refuses (`liveness`)."""
        return self._reach.checkout(pool, self._probe)

    async def _probe(self) -> None:
        conn = await AsyncConnection.connect(self.url, **self._conninfo_kwargs())
        await conn.close()

    @asynccontextmanager
    async def _tx(self) -> AsyncIterator[AsyncConnection[Any]]:
        """A pooled connection inside one transaction (committed when the body ends), in
        pipeline mode: statements whose rows are not fetched (`_on(..., fetch=False)`)
        travel with the next one that is, and BEGIN with the first, so a transaction of
        a read and a write costs two round trips, not four."""
        async with self._connection() as conn, conn.pipeline(), conn.transaction():
            yield conn

    async def _on(
        self, conn: AsyncConnection[Any], query: str, params: Params = (), *, fetch: bool = True
    ) -> list[Row]:
        """One statement on `conn` (in whatever transaction it is in): its rows (`fetch`:
        it has rows to fetch; without, in a pipeline, nothing waits for its answer)."""
        self.stats["statements"] += 1
        cur = await conn.execute(query, params, prepare=self._prepare)
        return await cur.fetchall() if fetch else []

    async def send_statement(
        self, conn: AsyncConnection[Any], query: str, params: Params = ()
    ) -> psycopg.AsyncCursor[Row]:
        """One statement on `conn`, its rows to be fetched from the cursor returned (in a
        pipeline, several sent this way travel together)."""
        self.stats["statements"] += 1
        return await conn.execute(query, params, prepare=self._prepare)

    async def _query(
        self,
        query: str,
        params: Params = (),
        *,
        read: bool = False,
        batch: bool = False,
        capped: bool = False,
        skips_locked: bool = False,
    ) -> list[Row]:
        """One statement on a pooled connection: its rows. A `read` that met a connection
        the server had closed (a restart since it was last used) runs again on another
        (each pooled connection may be such a one). `batch`: it goes with the batched
        statements made in its turn or, while one is on its way, in the next batch
        (`postgres.batching`); a `capped` one (a create under the active-task caps) only
        with reads, such creates and writes that `skips_locked` (a claim)."""
        calls = self._calls
        if not batch or calls is None:
            return await self._alone(query, params, read=read)
        try:
            async with asyncio.timeout(self.timeout):
                alone = functools.partial(self._alone, query, params, read=read)
                return await calls.query(
                    query, params, alone, read=read, capped=capped, skips_locked=skips_locked
                )
        except (TimeoutError, psycopg.Error) as exc:
            mapped = self._mapped(exc)
            if mapped is None:
                raise
            raise mapped from exc

    async def _alone(self, query: str, params: Params, *, read: bool) -> list[Row]:
        pool = self._require()
        for attempt in range(self.pool_max + 1):
            try:
                async with asyncio.timeout(self.timeout), self._checkout(pool) as conn:
                    self.stats["statements"] += 1
                    try:
                        cur = await conn.execute(query, params, prepare=self._prepare)
                        return await cur.fetchall() if returns_rows(cur) else []
                    except psycopg.OperationalError:
                        if not (read and attempt < self.pool_max and conn.closed):
                            raise
            except (TimeoutError, psycopg.Error) as exc:
                mapped = self._mapped(exc)
                if mapped is None:
                    raise
                raise mapped from exc
        raise AssertionError("unreachable")

    async def _exec(self, query: str, params: Params = ()) -> None:
        await self._query(query, params)

    async def _lock(self, conn: AsyncConnection[Any], key: str) -> None:
        """Take the transaction-level advisory lock named `key` (within this schema)."""
        await self._on(conn, self.sql.lock, {"key": f"{self.schema}:{key}"}, fetch=False)

    async def _modify(
        self,
        task_id: str,
        apply: Callable[[TaskRecord], tuple[T, bool, list[Emit]]],
        missing: T,
    ) -> T:
        """Load the live task `FOR NO KEY UPDATE`, `apply` the rules to it, write it back with
        its change rows (when `apply` says so), in one transaction; `missing` when absent.

        `apply(record)` returns `(value, save, emits)`; `value` is returned.
        """
        now = time.time()
        async with self._tx() as conn:
            rows = await self._on(conn, self.sql.load, {"id": task_id, "now": now})
            if not rows:
                return missing
            record = tables.from_row(rows[0])
            value, save, emits = apply(record)
            if save or emits:
                params = save_params(record, emits, now)
                await self._on(conn, self.sql.save_emit, params, fetch=False)
            return value


__all__ = [
    "DEFAULT_MAX_TASKS",
    "DEFAULT_SCHEMA",
    "PostgresConnections",
    "parse_store_url",
    "redact",
]
