"""The SQLite task store: durable, shared by the processes of one host.

`store` owns `SQLiteTaskStore`; `connections` the per-thread connections and
the writer lock, `writer` the single writer, `tx` transactions and retries on
`SQLITE_BUSY`, `schema` the tables and row mapping (and `path_from_url`),
`feed` the change feed, `leases` and `listing` those parts of the store API,
`flow` and `gates` flow control (`stores.flow`: dedupe, retry waits, tombstones;
`claim_queued` through concurrency gates).
"""

from __future__ import annotations

from fastmcp_tasks.stores.sqlite.schema import path_from_url
from fastmcp_tasks.stores.sqlite.store import DEFAULT_MAX_TASKS, SQLiteTaskStore

__all__ = ["DEFAULT_MAX_TASKS", "SQLiteTaskStore", "path_from_url"]
