"""Flow control for the PostgreSQL store (`stores.flow`), mixed into `PostgresTaskStore`.

This module owns the flow-control methods outside creation and the claim
(`postgres.store` dedupes in `create`; `postgres.gates` has the gated claim):

- retry waits: `retry_later`, one transaction applying `rules.retry` to the row
  loaded `FOR NO KEY UPDATE`, with its change rows (the message or status change, then
  `queued` with `{"app": ..., "not_before": ...}`);
- tombstones: `tombstone` answers from the `tombstones` table (written by the
  statements that remove tasks, `purge_expired` and `purge_finished`, in the same
  statement) or from a row that expired but is not swept yet, in one query.
  `purge_expired` forgets those past `tombstone_retention` and all but the newest
  `MAX_TOMBSTONES`.
"""

from __future__ import annotations

import time
from typing import cast

from fastmcp_tasks.stores import rules
from fastmcp_tasks.stores.base import TaskRecord
from fastmcp_tasks.stores.flow import Tombstone, TombstoneReason, tombstone_key
from fastmcp_tasks.stores.postgres.connections import Emit, PostgresConnections

#: Most tombstones kept at once, as in the SQLite store; beyond it the oldest go first.
MAX_TOMBSTONES = 100_000


class PostgresFlow(PostgresConnections):
    """The `FlowControlStore` methods of `PostgresTaskStore` (`retry_later`, `tombstone`)."""

    flow_control = True

    async def retry_later(
        self, task_id: str, owner: str, not_before: float, status_message: str | None
    ) -> TaskRecord | None:
        def apply(record: TaskRecord) -> tuple[TaskRecord | None, bool, list[Emit]]:
            kinds = rules.retry(record, owner, not_before, status_message)
            if kinds is None:
                return None, False, []
            emits: list[Emit] = [(kind, {}) for kind in kinds]
            emits.append(("queued", {"app": record.app, "not_before": not_before}))
            if record.gate is not None:  # its slot is free while it waits: waiters claim now
                emits.append(("queued", {"app": record.app, "gate": record.gate}))
            return record, True, emits

        return await self._modify(task_id, apply, None)

    async def tombstone(self, task_id: str) -> Tombstone | None:
        retention = self.tombstone_retention
        if retention is None:
            return None
        now = time.time()
        params = {"id": task_id, "key": tombstone_key(task_id)}
        rows = await self._query(self.sql.tombstone, params, read=True)
        for owner, at, reason, live_row in rows:
            if live_row and (at is None or at > now):
                return None  # live: `get` reads it
            if at < now - retention:
                return None
            return Tombstone(owner, at, cast("TombstoneReason", reason))
        return None


__all__ = ["MAX_TOMBSTONES", "PostgresFlow"]
