"""Run leases and the queue for the PostgreSQL store, mixed into `PostgresTaskStore`.

A lease is two columns of the task row (`lease_owner`, `lease_expires`) changed by
one compare-and-set UPDATE (`claim`: the rules of `rules.lease` in its WHERE), so
two processes never both hold a task. `renew` is one UPDATE of all the owner's
tasks given. `requeue` and `start_run` (a waiting task's run begins, `stores.phases`)
are one statement each, with their change rows.

`claim_queued` takes unleased tasks oldest first with `FOR NO KEY UPDATE SKIP
LOCKED` (two claimers never wait for, nor take, each other's rows), through the partial
index of ungated queued tasks, skipping a retry whose `not_before` is ahead. The
same statement tells which gates have a claimable task and a free slot (a loose
index scan of the gated queued tasks, one probe per gate); only then does
the claim go through `postgres.gates` instead (serialised per gate, fair turns),
so a store whose tools have no `concurrency` claims in one statement. That statement
also begins the run of each task it hands out (`phase` running, one more attempt, the
waiting message cleared), so a worker writes nothing to start it; a gated claim leaves
that to `start_run`.
"""

from __future__ import annotations

import time

from fastmcp_tasks.stores.base import TaskRecord
from fastmcp_tasks.stores.postgres.connections import PostgresConnections
from fastmcp_tasks.stores.postgres.gates import claim_gated
from fastmcp_tasks.stores.postgres.schema import COLUMNS, clean_text, from_row

_WIDTH = len(COLUMNS)


class PostgresLeases(PostgresConnections):
    """The lease methods of `PostgresTaskStore` (`claim`, `renew`, `requeue`, ...)."""

    async def claim(
        self, task_id: str, owner: str, until: float, *, expect_owner: str | None = None
    ) -> TaskRecord | None:
        params = {
            "id": task_id,
            "owner": owner,
            "until": until,
            "expect": expect_owner,
            "now": time.time(),
        }
        rows = await self._query(self.sql.claim, params)
        return from_row(rows[0]) if rows else None

    async def renew(self, owner: str, task_ids: frozenset[str], until: float) -> None:
        if task_ids:
            params = {"owner": owner, "ids": sorted(task_ids), "until": until}
            await self._exec(self.sql.renew, params)

    async def requeue(self, task_id: str, owner: str) -> TaskRecord | None:
        params = {"id": task_id, "owner": owner, "now": time.time()}
        rows = await self._query(self.sql.requeue, params)
        return from_row(rows[0][:_WIDTH]) if rows else None

    async def start_run(
        self, task_id: str, owner: str, status_message: str | None
    ) -> TaskRecord | None:
        """Begin the run of a waiting task leased to `owner` (`stores.phases.start_run`)."""
        params = {
            "id": task_id,
            "owner": owner,
            "message": clean_text(status_message),
            "now": time.time(),
        }
        rows = await self._query(self.sql.start_run, params)
        return from_row(rows[0][:_WIDTH]) if rows else None

    async def active_tasks(self) -> list[TaskRecord]:
        return [from_row(row) for row in await self._query(self.sql.active_tasks, read=True)]

    async def active_leases(self, *, app: str | None = None) -> list[TaskRecord]:
        """The active tasks of `app` (all: `None`) as recovery scans them (`base.active_leases`).

        One narrow read: `task_id`, `tool`, `status`, `created_at`, `updated_at`,
        `status_message`, `attempts`, `phase`, `app`, `lease_owner`, `lease_expires` and
        `cancel_requested` are set; the payloads are left `None`.
        """
        if app is None:
            rows = await self._query(self.sql.active_leases, read=True)
        else:
            rows = await self._query(self.sql.active_leases_of, {"app": app}, read=True)
        return [
            TaskRecord(
                task_id=row[0],
                tool=row[1],
                status=row[2],
                created_at=row[3],
                updated_at=row[4],
                status_message=row[5],
                attempts=row[6],
                app=row[7],
                lease_owner=row[8],
                lease_expires=row[9],
                cancel_requested=bool(row[10]),
                phase=row[11],
            )
            for row in rows
        ]

    async def claim_queued(
        self, owner: str, until: float, limit: int, *, app: str | None = None
    ) -> list[TaskRecord]:
        if limit < 1:
            return []
        params = {"owner": owner, "until": until, "limit": limit, "app": app, "now": time.time()}
        query = (self.sql.of_app if app is not None else self.sql.any_app).claim_ready
        rows = await self._query(query, params, batch=True, skips_locked=True)
        gates = [gate for row in rows if row[0] for gate in row[0]]
        if gates:  # a gate has room: the fair, serialised path
            async with self._tx() as conn:
                return await claim_gated(self, conn, gates, owner, until, limit, app)
        taken = [from_row(row[1:]) for row in rows]
        taken.sort(key=lambda record: (record.created_at, record.task_id))
        return taken


__all__ = ["PostgresLeases"]
