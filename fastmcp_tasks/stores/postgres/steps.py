"""The PostgreSQL store's durable steps (`stores.steps`): their statements and the
`StepStore` methods mixed into `PostgresTaskStore`, on the `steps` table of schema
version 4 (`postgres.steps_schema`, which says how steps go with their task).

`save_step` is one transaction of two statements (two round trips):

1. `lock`: the task, live and active, locked `FOR NO KEY UPDATE` (no row: `False`).
   Two saves to one task, a save and the task's end, and a save and a DELETE of the
   task (which needs a stronger lock) wait for each other here; a waiting save
   re-checks the task's status once the holder commits.
2. `save`: a new statement, so in READ COMMITTED a new snapshot, taken after the lock
   was granted: it sees every step the previous holder inserted. It counts the task's
   steps and bytes, and inserts the step only when the name is new and the bounds
   (parameters, read from `stores.steps` at each call, so a test can lower them)
   allow it; it answers the count, total and whether it inserted.

So the bounds are exact under concurrency: two processes saving at once cannot both
take the last place. `steps` is one read of a live task's rows in `seq` order.
"""

from __future__ import annotations

import time
from functools import cached_property

from fastmcp_tasks.errors import StepLimitExceeded
from fastmcp_tasks.stores import steps as limits
from fastmcp_tasks.stores.postgres.connections import PostgresConnections
from fastmcp_tasks.stores.postgres.schema import ACTIVE
from fastmcp_tasks.stores.postgres.sql import LIVE
from fastmcp_tasks.stores.steps import StepRecord, step_limit_error


class StepStatements:
    """The statements of the durable steps of one store schema (module doc)."""

    def __init__(self, schema: str) -> None:
        t, steps = f"{schema}.tasks", f"{schema}.steps"
        self.lock = (
            f"SELECT 1 FROM {t} WHERE task_id = %(id)s AND {ACTIVE} AND {LIVE} FOR NO KEY UPDATE"
        )
        self.save = f"""
WITH have AS (
    SELECT count(*) AS n, COALESCE(sum(size), 0) AS total,
        COALESCE(bool_or(name = %(name)s), false) AS dup
    FROM {steps} WHERE task_id = %(id)s
),
put AS (
    INSERT INTO {steps} (task_id, name, value, size, at)
    SELECT %(id)s, %(name)s, %(value)s, %(size)s, %(at)s FROM have
    WHERE NOT dup AND %(size)s <= %(most_bytes)s AND n < %(most)s
        AND total + %(size)s <= %(most_total)s
    RETURNING 1
)
SELECT n, total, dup, EXISTS (SELECT 1 FROM put) FROM have"""
        self.steps = (
            f"SELECT name, value, at FROM {steps} WHERE task_id = %(id)s "
            f"AND EXISTS (SELECT 1 FROM {t} WHERE task_id = %(id)s AND {LIVE}) ORDER BY seq"
        )


class PostgresSteps(PostgresConnections):
    """The `StepStore` methods of `PostgresTaskStore`."""

    @cached_property
    def steps_sql(self) -> StepStatements:
        """The statements of this schema's durable steps."""
        return StepStatements(self.schema)

    async def save_step(self, task_id: str, name: str, value_json: str, at: float) -> bool:
        size = len(value_json.encode())
        params = {
            "id": task_id,
            "name": name,
            "value": value_json,
            "size": size,
            "at": at,
            "now": time.time(),
            "most": limits.MAX_STEPS,
            "most_bytes": limits.MAX_STEP_BYTES,
            "most_total": limits.MAX_STEPS_BYTES,
        }
        async with self._tx() as conn:
            if not await self._on(conn, self.steps_sql.lock, params):
                return False
            ((count, total, dup, inserted),) = await self._on(conn, self.steps_sql.save, params)
        if dup or inserted:
            return True
        refusal = step_limit_error(int(count), int(total), size)
        raise StepLimitExceeded(refusal or "the task's recorded steps are at a bound")

    async def steps(self, task_id: str) -> list[StepRecord]:
        params = {"id": task_id, "now": time.time()}
        rows = await self._query(self.steps_sql.steps, params, read=True)
        return [StepRecord(str(name), str(value), float(at)) for name, value, at in rows]


__all__ = ["PostgresSteps", "StepStatements"]
