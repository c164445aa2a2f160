"""Run leases for the SQLite store, mixed into `SQLiteTaskStore`.

A lease is two columns of the task row (`lease_owner`, `lease_expires`) changed
in one write transaction with the checks the contract asks for (`rules.lease`),
so two processes sharing the file never both hold a task. Queued tasks (no
lease owner) are taken oldest first through the partial indexes of queued tasks
(schema version 4), gated ones through their gates (`sqlite.gates`).
`claim_queued` first probes those indexes on the read-only connection and takes
the write lock only when there is something to take: workers calling it
periodically on an empty queue (or one whose gates are all full) never lock the file.
The scans (`active_tasks`, `active_leases`) are reads on that connection too.
`start_run` (the engine starting a waiting task's run, `stores.phases`) and `requeue`
change the `phase` column with the rules of `rules.begin` / `rules.give_back`; the
ungated `claim_queued` begins each task's run in its own transaction with `rules.begin`
too (`sqlite.gates`), so a worker writes nothing to start one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from fastmcp_tasks.stores import rules
from fastmcp_tasks.stores.base import TaskRecord
from fastmcp_tasks.stores.sqlite import gates
from fastmcp_tasks.stores.sqlite.tx import Tx
from fastmcp_tasks.wire.names import ACTIVE_STATUSES

T = TypeVar("T")


class SQLiteLeases:
    """The lease methods of `SQLiteTaskStore` (`claim`, `renew`, `requeue`, ...)."""

    if TYPE_CHECKING:

        async def _run(self, fn: Callable[[Tx], T], *, write: bool = True) -> T: ...

        async def _read(self, fn: Callable[[Tx], T]) -> T: ...

        async def _point_read(self, fn: Callable[[Tx], T]) -> T: ...

    async def claim(
        self, task_id: str, owner: str, until: float, *, expect_owner: str | None = None
    ) -> TaskRecord | None:
        def change(tx: Tx) -> TaskRecord | None:
            record = tx.load(task_id)
            if record is None or not rules.lease(record, owner, until, expect_owner):
                return None
            tx.save(record)
            return record

        return await self._run(change)

    async def renew(self, owner: str, task_ids: frozenset[str], until: float) -> None:
        def change(tx: Tx) -> None:
            tx.conn.executemany(
                "UPDATE tasks SET lease_expires = ? WHERE task_id = ? AND lease_owner = ? "
                "AND status IN ('working', 'input_required')",
                [(until, task_id, owner) for task_id in task_ids],
            )

        if task_ids:
            await self._run(change)

    async def active_tasks(self) -> list[TaskRecord]:
        return await self._read(Tx.active)

    async def active_leases(self, *, app: str | None = None) -> list[TaskRecord]:
        """The active tasks of `app` (all: `None`) as recovery scans them (`base.active_leases`).

        One narrow read: `task_id`, `tool`, `status`, `created_at`, `updated_at`,
        `status_message`, `attempts`, `phase`, `app`, `lease_owner`, `lease_expires` and
        `cancel_requested` are set; the payloads (arguments, context, result, inputs)
        are left `None`.
        """
        return await self._read(lambda tx: tx.leases(app))

    async def requeue(self, task_id: str, owner: str) -> TaskRecord | None:
        def give_back(tx: Tx) -> TaskRecord | None:
            record = tx.load(task_id)
            if record is None or record.status not in ACTIVE_STATUSES:
                return None
            if record.lease_owner != owner:
                return None
            rules.give_back(record)
            tx.save(record)
            tx.emit(task_id, "queued", record.status, {"app": record.app})
            return record

        return await self._run(give_back)

    async def start_run(
        self, task_id: str, owner: str, status_message: str | None
    ) -> TaskRecord | None:
        """Begin the run of a waiting task leased to `owner` (`stores.phases.start_run`)."""

        def begin(tx: Tx) -> TaskRecord | None:
            record = tx.load(task_id)
            if record is None or (kinds := rules.begin(record, owner, status_message)) is None:
                return None
            tx.save(record)
            for kind in kinds:
                tx.emit(task_id, kind, record.status)
            return record

        return await self._run(begin)

    async def claim_queued(
        self, owner: str, until: float, limit: int, *, app: str | None = None
    ) -> list[TaskRecord]:
        now = time.time()
        if limit < 1 or not await self._point_read(lambda tx: gates.probe(tx, app, now)):
            return []
        return await self._run(lambda tx: gates.claim(tx, owner, until, limit, app))


__all__ = ["SQLiteLeases"]
