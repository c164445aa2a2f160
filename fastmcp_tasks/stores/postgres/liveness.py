"""Whether the PostgreSQL server answers, as the pool last found it, and whether an idle
pooled connection still works, both without a round trip; the per-connection options
that notice a dead peer and bound a statement the client gave up on.

Why. A pool with no idle connection makes a caller wait for a new one; when the server
refuses connections the pool only retries (with backoff) and the caller waits its whole
timeout for nothing. `Reach` remembers what the pool's last connection attempt found
(its connection class, `Reach.connection_class()`, records each attempt): while that
was a failure and nothing is idle, `postgres.connections` first makes one direct
connection attempt (refused at once when the server is down) instead of waiting, and
goes on to the pool only once that succeeds. Only the pool's own attempts clear the
mark, so a busy pool on a healthy server waits as before.

`lost(conn)`: a server that restarted or ended a backend leaves its FATAL message and
EOF on the idle socket; reading what is already there (libpq's sockets never block)
tells a dead connection from a live one before it is handed out, so after a restart
the first calls get fresh connections instead of failing on stale ones.

`session_defaults(url, timeout)`: TCP keepalives (a dead LISTEN or pooled connection
is noticed in about 25 s, not the OS's two hours) unless the URL sets them, and the
`statement_timeout` each pooled connection sets when it opens (`setter`: `timeout`
plus a margin, unless the URL's `options` set one), so a call abandoned at its timeout
never leaves its statement running on the server. None is set through a
transaction-mode pooler (`sessions=False`: the store's `prepare=false`), where a
session setting would land on a server connection other clients share.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, Self

import psycopg
from psycopg import AsyncConnection
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool

#: libpq keepalive settings used unless the URL sets its own (seconds, count).
KEEPALIVES = {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5}
KEEPALIVES["keepalives_count"] = 3
#: Seconds a statement may run on the server past the client's own `timeout`.
STATEMENT_MARGIN = 1.0


class Reach:
    """What the pool's last connection attempt found: `down` after a failed one."""

    def __init__(self) -> None:
        self.down = False

    def connection_class(self) -> type[AsyncConnection[Any]]:
        """An `AsyncConnection` subclass whose `connect` records its outcome here."""
        reach = self

        class Watched(AsyncConnection[Any]):
            @classmethod
            async def connect(cls, conninfo: str = "", **kwargs: Any) -> Self:
                try:
                    conn = await super().connect(conninfo, **kwargs)
                except psycopg.Error:
                    reach.down = True
                    raise
                reach.down = False
                return conn

        return Watched

    @asynccontextmanager
    async def checkout(
        self,
        pool: AsyncConnectionPool[AsyncConnection[Any]],
        probe: Callable[[], Awaitable[None]],
    ) -> AsyncIterator[AsyncConnection[Any]]:
        """A connection of `pool` that is not `lost` (the caller bounds the wait). While
        the server was last seen down and none is idle, `probe` (one direct connection
        attempt) first: its failure (refused: at once) is the caller's (module doc)."""
        suspect = self.down
        while True:
            if suspect and not pool.get_stats().get("pool_available"):
                try:
                    await probe()
                except psycopg.Error:
                    self.down = True  # before the pool's own attempt says so
                    raise
                suspect = False
            async with pool.connection() as conn:
                if not lost(conn):
                    yield conn
                    return
            suspect = True  # the server closed it: the others idle may be dead too


def lost(conn: AsyncConnection[Any]) -> bool:
    """Whether an idle connection's server has closed it (module doc); no round trip."""
    if conn.closed:
        return True
    try:
        for _ in range(2):  # a FATAL message may come first, the EOF with the next read
            conn.pgconn.consume_input()
    except psycopg.OperationalError:
        return True
    return conn.closed


def session_defaults(
    url: str, timeout: float, *, sessions: bool = True
) -> tuple[dict[str, Any], str | None]:
    """`(keepalive connect options the URL leaves unset, the statement_timeout SET or
    None)` for connections to `url` (module doc)."""
    given = conninfo_to_dict(url)
    options: dict[str, Any] = {key: v for key, v in KEEPALIVES.items() if key not in given}
    limit = None
    if sessions and "statement_timeout" not in str(given.get("options", "")):
        millis = math.ceil((timeout + STATEMENT_MARGIN) * 1000)
        limit = f"SET statement_timeout = {millis}"
    return options, limit


def setter(statement: str | None) -> Callable[[AsyncConnection[Any]], Awaitable[None]] | None:
    """The pool's `configure` callback running `statement` on each new connection."""
    if statement is None:
        return None
    query: str = statement

    async def configure(conn: AsyncConnection[Any]) -> None:
        await conn.execute(query)  # autocommit: the connection is left idle

    return configure


def returns_rows(cursor: psycopg.AsyncCursor[Any]) -> bool:
    """Whether the statement just run returned a result set. Read from the result's field
    count: `cursor.description` would build a `Column` object per column on every call
    (a fifth of the CPU of a `get`)."""
    result = cursor.pgresult
    return result is not None and result.nfields > 0


__all__ = [
    "KEEPALIVES",
    "STATEMENT_MARGIN",
    "Reach",
    "lost",
    "returns_rows",
    "session_defaults",
    "setter",
]
