"""Whether the PostgreSQL store's addresses keep a session: checked once, at `open`.

Why. Behind a transaction-mode pooler (PgBouncer `pool_mode = transaction`, or
statement mode) each transaction of a client connection may run on another server
connection, and a server connection is shared by many clients. Measured with a real
PgBouncer (`tests/test_postgres_pgbouncer.py`):

- LISTEN succeeds, but on whichever server connection ran it, which then goes back to
  the pooler; a NOTIFY reaches that backend later and is delivered to whichever client
  holds it then (often the very client that sent the NOTIFY), never to the listener.
  The change feed would LISTEN without error and hear nothing, ever: cancels,
  answers, queued work and completions made by other processes would go unnoticed.
- Prepared statements (psycopg names them `_pg3_0`, `_pg3_1`, ... per client
  connection) collide on a shared server connection: "prepared statement "_pg3_0"
  already exists" after a few calls; worse, a client can execute the statement another
  client prepared under the same name, with its own parameters.

Neither shows at connect time, and neither is an error PostgreSQL or the pooler
raises up front, so `check` proves a session the only way that matters: one LISTEN on
a fresh connection to `listen_url` (the feed's address) must hear a NOTIFY sent from
the store's own connection, within `wait` seconds. When prepared statements are on
and the pool's address differs from `listen_url`, a second listener on the pool's
address must hear it too. A miss is a `ConfigurationError` naming the option to set
(`listen_url=` for a session-mode address, `prepare=false`); on a direct server or a
session-mode pooler the notification arrives within milliseconds, so a healthy open
pays one more connection (two with the second listener) and two round trips.

The probe's channel is random and used once (`fastmcp_tasks_probe_<hex>`): a LISTEN
left behind on a pooled server connection hears nothing ever again.
"""

from __future__ import annotations

import uuid
from typing import Any, Protocol

import psycopg
from psycopg import AsyncConnection
from psycopg.conninfo import conninfo_to_dict

from fastmcp_tasks.errors import ConfigurationError, StoreError


class Store(Protocol):
    """What `check` reads of `postgres.connections.PostgresConnections`."""

    url: str
    listen_url: str
    timeout: float
    where: str
    _prepare: bool | None

    def _scrub(self, text: str) -> str: ...


#: What to do about an address that keeps no session, by the option that names it.
FIXES = {
    "listen_url": "give the change feed a session-mode address (PgBouncer's session-mode "
    "port, or the server itself) with listen_url= (in the URL: &listen_url=postgresql%3A%2F%2F...)",
    "prepare": "add prepare=false to the URL (prepared statements need a session)",
}


async def check(store: Store, notifier: AsyncConnection[Any]) -> None:
    """Raise unless `store.listen_url` (and, with prepared statements, `store.url`) keeps a
    session (module doc); `notifier` is an open connection to `store.url`. The wait is
    half the store's `timeout`.

    Raises:
        ConfigurationError: an address is a transaction-mode pooler (module doc).
        StoreError: `listen_url` is unreachable.
    """
    prepare = bool(store._prepare)
    addresses = {"listen_url": store.listen_url}
    if prepare and store.url != store.listen_url:
        addresses["url"] = store.url
    wait = store.timeout / 2
    channel = f"fastmcp_tasks_probe_{uuid.uuid4().hex}"
    listeners: dict[str, AsyncConnection[Any]] = {}
    try:
        for name, address in addresses.items():
            try:
                listeners[name] = await AsyncConnection.connect(
                    address, autocommit=True, connect_timeout=max(1, round(store.timeout))
                )
            except psycopg.OperationalError as exc:
                raise StoreError(
                    f"PostgreSQL task store {store.where}: the address {_shown(address)} is "
                    f"unreachable: {store._scrub(str(exc)).strip()}"
                ) from exc
            await listeners[name].execute(f'LISTEN "{channel}"')
        await notifier.execute("SELECT pg_notify(%s, 'probe')", (channel,), prepare=False)
        deaf = [name for name, conn in listeners.items() if not await _hears(conn, wait)]
    finally:
        for conn in listeners.values():
            await conn.close()
    if not deaf:
        return
    fixes = ["listen_url"] if "listen_url" in deaf else []
    if prepare and ("url" in deaf or store.url == store.listen_url):
        fixes.append("prepare")
    raise ConfigurationError(
        f"PostgreSQL task store {store.where}: a LISTEN through "
        f"{_shown(addresses[deaf[0]])} heard no NOTIFY within {wait:g} s, so that address "
        "keeps no session (a transaction-mode pooler, such as PgBouncer with "
        f"pool_mode=transaction?). Behind such a pooler, "
        f"{' and '.join(FIXES[fix] for fix in fixes)}."
    )


def _shown(address: str) -> str:
    """`host:port/dbname` of a libpq address, as messages show it (never a password)."""
    given = conninfo_to_dict(address)
    host, port = given.get("host", "localhost"), given.get("port", "5432")
    return f"{host}:{port}/{given.get('dbname', '')}"


async def _hears(conn: AsyncConnection[Any], wait: float) -> bool:
    async for _ in conn.notifies(timeout=wait, stop_after=1):
        return True
    return False


__all__ = ["FIXES", "Store", "check"]
