"""The SQLite store's durable steps (`stores.steps`), mixed into `SQLiteTaskStore`.

This module owns the SQL of the `steps` table (schema version 7, `sqlite.schema`): one
row per recorded step, keyed by task then name, `seq` its place in the recording order
and `size` the UTF-8 bytes of its value.

`save_step` is one write transaction (`BEGIN IMMEDIATE`, the writer thread): the task
read (live and active, or nothing is written), the name looked up (present: the first
value stays), the task's step count and byte total read and checked by
`stores.steps.step_limit_error` (the bounds read when it runs, so a test can lower
them), then the row inserted. SQLite lets one writer into the file at a time, so two
processes saving at once cannot both take the last place. A task's steps are deleted
with it by the `tasks_forget_steps` trigger, whatever deletes the row (expiry,
`purge_finished`, `delete_finished`, the `max_tasks` sweep of `create`); `steps` reads
a live task's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from fastmcp_tasks.errors import StepLimitExceeded
from fastmcp_tasks.stores.sqlite.schema import ACTIVE
from fastmcp_tasks.stores.sqlite.tx import Tx
from fastmcp_tasks.stores.steps import StepRecord, step_limit_error

T = TypeVar("T")

_LIVE = "(expires_at IS NULL OR expires_at > ?)"
_TASK = f"SELECT {ACTIVE} FROM tasks WHERE task_id = ? AND {_LIVE}"
_HAS = "SELECT 1 FROM steps WHERE task_id = ? AND name = ?"
_TOTALS = (
    "SELECT COUNT(*), COALESCE(SUM(size), 0), COALESCE(MAX(seq) + 1, 0) "
    "FROM steps WHERE task_id = ?"
)
_INSERT = "INSERT INTO steps (task_id, seq, name, value, size, at) VALUES (?, ?, ?, ?, ?, ?)"
_STEPS = (
    "SELECT name, value, at FROM steps WHERE task_id = ? "
    f"AND EXISTS (SELECT 1 FROM tasks WHERE task_id = ? AND {_LIVE}) ORDER BY seq"
)


def save(tx: Tx, task_id: str, name: str, value: str, at: float) -> bool | StepLimitExceeded:
    """`save_step` in `tx`: the refusal is returned, not raised (the caller raises it)."""
    row = tx.conn.execute(_TASK, (task_id, time.time())).fetchone()
    if row is None or not row[0]:
        return False
    if tx.conn.execute(_HAS, (task_id, name)).fetchone() is not None:
        return True
    size = len(value.encode())
    count, total, seq = tx.conn.execute(_TOTALS, (task_id,)).fetchone()
    refusal = step_limit_error(count, total, size)
    if refusal is not None:
        return StepLimitExceeded(refusal)
    tx.conn.execute(_INSERT, (task_id, seq, name, value, size, at))
    return True


class SQLiteSteps:
    """The `StepStore` methods of `SQLiteTaskStore`."""

    if TYPE_CHECKING:

        async def _run(self, fn: Callable[[Tx], T], *, write: bool = True) -> T: ...

        async def _read(self, fn: Callable[[Tx], T]) -> T: ...

    async def save_step(self, task_id: str, name: str, value_json: str, at: float) -> bool:
        outcome = await self._run(lambda tx: save(tx, task_id, name, value_json, at))
        if isinstance(outcome, StepLimitExceeded):
            raise outcome
        return outcome

    async def steps(self, task_id: str) -> list[StepRecord]:
        params = (task_id, task_id, time.time())
        rows = await self._read(lambda tx: tx.conn.execute(_STEPS, params).fetchall())
        return [StepRecord(name, value, at) for name, value, at in rows]


__all__ = ["SQLiteSteps", "save"]
