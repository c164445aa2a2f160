"""Run leases for the SQLite store, mixed into `SQLiteTaskStore`.

A lease is two columns of the task row (`lease_owner`, `lease_expires`) changed
in one write transaction with the checks the contract asks for (`rules.lease`),
so two processes sharing the file never both hold a task. Queued tasks (no
lease owner) are taken oldest first through the partial index of active tasks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from fastmcp_tasks.stores import rules
from fastmcp_tasks.stores.base import TaskRecord
from fastmcp_tasks.stores.sqlite_schema import Tx
from fastmcp_tasks.wire import ACTIVE_STATUSES

T = TypeVar("T")


class SQLiteLeases:
    """The lease methods of `SQLiteTaskStore` (`claim`, `renew`, `requeue`, ...)."""

    if TYPE_CHECKING:

        async def _run(self, fn: Callable[[Tx], T], *, write: bool = True) -> T: ...

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
        return await self._run(Tx.active, write=False)

    async def requeue(self, task_id: str, owner: str) -> TaskRecord | None:
        def give_back(tx: Tx) -> TaskRecord | None:
            record = tx.load(task_id)
            if record is None or record.status not in ACTIVE_STATUSES:
                return None
            if record.lease_owner != owner:
                return None
            record.lease_owner, record.lease_expires = None, None
            tx.save(record)
            return record

        return await self._run(give_back)

    async def claim_queued(self, owner: str, until: float, limit: int) -> list[TaskRecord]:
        def take(tx: Tx) -> list[TaskRecord]:
            taken = []
            for record in tx.unclaimed(limit):
                record.lease_owner, record.lease_expires = owner, until
                record.attempts += 1
                tx.save(record)
                taken.append(record)
            return taken

        return await self._run(take)


__all__ = ["SQLiteLeases"]
