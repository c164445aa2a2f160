"""The PostgreSQL store's operator records (`stores.operations`), mixed into
`PostgresTaskStore`: histories, workers, pauses, the audit log, purging a chosen set.

Each method is one statement (its own transaction, one round trip) of
`postgres.operations_sql` on the tables of schema version 3
(`postgres.operations_schema`), except `resume`: the pause's DELETE, then the release
of its held tasks (`RESUMED_MESSAGE` as their message, their `message` and `queued`
change rows and the notify), in one transaction. Histories go with their tasks by the
trigger on `tasks`, whatever deletes them. Nothing here needs a session: no
session-level lock or setting, so it works behind a transaction-mode pooler
(`postgres.sessions`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import cached_property

from fastmcp_tasks.stores.base import TaskRecord, encode_json
from fastmcp_tasks.stores.operations import (
    FORGET_AFTER,
    PAUSED_UNTIL,
    RESUMED_MESSAGE,
    AuditEntry,
    Pause,
    TaskEvent,
    WorkerInfo,
)
from fastmcp_tasks.stores.postgres.connections import PostgresConnections
from fastmcp_tasks.stores.postgres.operations_sql import OperationStatements
from fastmcp_tasks.stores.postgres.schema import COLUMNS, clean_text, from_row

_WIDTH = len(COLUMNS)


class PostgresOperations(PostgresConnections):
    """The `OperableTaskStore` methods of `PostgresTaskStore`."""

    @cached_property
    def ops_sql(self) -> OperationStatements:
        """The statements of this schema's operator records."""
        return OperationStatements(self.sql)

    async def add_events(self, events: Sequence[tuple[str, TaskEvent]]) -> None:
        if not events:
            return
        params = {
            "ids": [task_id for task_id, _ in events],
            "ats": [event.at for _, event in events],
            "kinds": [event.kind for _, event in events],
            "details": [encode_json(event.details) for _, event in events],
            "now": time.time(),
        }
        await self._exec(self.ops_sql.add_events, params)

    async def events(self, task_id: str) -> list[TaskEvent]:
        params = {"id": task_id, "now": time.time()}
        rows = await self._query(self.ops_sql.events, params, read=True)
        return [TaskEvent(float(at), str(kind), dict(details)) for at, kind, details in rows]

    async def beat(self, worker: WorkerInfo) -> None:
        params = {
            "id": worker.worker_id,
            "last_seen": worker.last_seen,
            "info": encode_json(worker.to_json()),
            "horizon": time.time() - FORGET_AFTER,
        }
        await self._exec(self.ops_sql.beat, params)

    async def workers(self) -> list[WorkerInfo]:
        params = {"horizon": time.time() - FORGET_AFTER}
        rows = await self._query(self.ops_sql.workers, params, read=True)
        return [WorkerInfo.from_json(row[0]) for row in rows]

    async def pause(self, pause: Pause) -> bool:
        params = {"app": pause.app, "tool": pause.tool, "since": pause.since, "by": pause.by}
        return bool(await self._query(self.ops_sql.pause, params))

    async def resume(self, app: str, tool: str) -> int | None:
        params = {"app": app, "tool": tool}
        async with self._tx() as conn:
            if not await self._on(conn, self.ops_sql.unpause, params):
                return None
            more = {**params, "held": PAUSED_UNTIL, "message": RESUMED_MESSAGE, "now": time.time()}
            rows = await self._on(conn, self.ops_sql.release, more)
        return int(rows[0][0])

    async def paused(self) -> list[Pause]:
        rows = await self._query(self.ops_sql.paused, read=True)
        return [Pause(app, tool, float(since), by) for app, tool, since, by in rows]

    async def hold_paused(
        self, task_id: str, owner: str, status_message: str | None
    ) -> TaskRecord | None:
        params = {
            "id": task_id,
            "owner": owner,
            "message": clean_text(status_message),
            "held": PAUSED_UNTIL,
            "now": time.time(),
        }
        rows = await self._query(self.ops_sql.hold, params)
        return from_row(rows[0][:_WIDTH]) if rows else None

    async def add_audit(self, entry: AuditEntry) -> None:
        params = {
            "at": entry.at,
            "actor": entry.actor,
            "action": entry.action,
            "count": entry.count,
            "details": encode_json(entry.details),
        }
        await self._exec(self.ops_sql.add_audit, params)

    async def audit(self, limit: int = 100) -> list[AuditEntry]:
        rows = await self._query(self.ops_sql.audit, {"limit": max(0, limit)}, read=True)
        return [
            AuditEntry(float(at), actor, action, int(count), dict(details))
            for at, actor, action, count, details in rows
        ]

    async def delete_finished(self, task_ids: Sequence[str]) -> int:
        chosen = list(dict.fromkeys(task_ids))
        if not chosen:
            return 0
        bury = self.tombstone_retention is not None
        params = {"ids": chosen, "now": time.time(), "bury": bury}
        rows = await self._query(self.sql.delete_finished, params)
        return int(rows[0][0])


__all__ = ["PostgresOperations"]
