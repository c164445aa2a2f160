"""Which statements the server plans each time they run, instead of from a cached plan.

The store prepares its statements on each connection (`connections`: psycopg's
`prepare`), and the server then keeps a generic plan of each until the table is analyzed
again. A plan made while the tasks table was small (a fresh store, the first minutes of a
deployment) may find rows by scanning the table or a partial index of every active task,
and keeps doing so as the table grows. The statements that find tasks by a list of ids
(`task_id = ANY(...)`) are therefore sent unprepared: each run is planned with its ids and
the table as it is, which finds them by primary key. They run per lease renewal, per gated
claim round, per listing and per chosen purge, not per task, so planning each (a fraction
of a millisecond) costs little. The history append, which every process makes every
fraction of a second, is written to find its tasks by primary key under any plan instead
(`operations_sql`).
"""

from __future__ import annotations

from fastmcp_tasks.stores.postgres.sql import Statements


def planned_each_time(sql: Statements) -> tuple[str, ...]:
    """The statements of `sql` (one store schema) never prepared (module doc)."""
    return (sql.get_many, sql.renew, sql.lease_many, sql.delete_finished)


def prepare_of(sql: Statements, query: str, prepare: bool | None) -> bool | None:
    """psycopg's `prepare` for `query`: `prepare` (the store's), but never for a statement
    the server must plan each time it runs."""
    return False if query in planned_each_time(sql) else prepare


__all__ = ["planned_each_time", "prepare_of"]
