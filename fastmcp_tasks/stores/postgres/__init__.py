"""The PostgreSQL task store: durable, shared by every process that reaches the database.

`store` owns `PostgresTaskStore`; `connections` the pool, options and errors, `urls`
the URL (our options, libpq's, refusing any other), `refusals` a server that answers
"no such database / role / permission denied" at open (a misconfiguration, not an
outage: `ConfigurationError`), `liveness` failing fast while the
server refuses and per-connection settings, `schema` the tables, version marker,
migrations and row mapping, `sql` the statements, `feed` the change feed
(LISTEN/NOTIFY and the `changes` table),
`leases` and `listing` those parts of the store API, `flow` and `gates` flow
control (`stores.flow`: retry waits, tombstones; `claim_queued` through gates).
Imported lazily by `stores.store_from_url` (psycopg is the optional `postgres` extra).
"""

from __future__ import annotations

from fastmcp_tasks.stores.postgres.connections import DEFAULT_MAX_TASKS, DEFAULT_SCHEMA
from fastmcp_tasks.stores.postgres.store import PostgresTaskStore

__all__ = ["DEFAULT_MAX_TASKS", "DEFAULT_SCHEMA", "PostgresTaskStore"]
