"""Listing and purging for the PostgreSQL store (`ListableTaskStore`), and `get_many`.

A listing walks the `(created_at, task_id)` index backwards from the page key
(a row comparison PostgreSQL keeps as an index bound), so a page costs about its
size plus the rows the filters skip; `purge_finished` deletes a range of the
`terminal_at` index in one statement, each purged task leaving a `purged`
tombstone in that statement (`stores.flow`) and the retained-task count moved
with it. `get_many` is one query: a primary-key lookup for each id (a lateral join). The
server caches a plan of each prepared statement on its connection, and `task_id =
ANY(...)` under a plan made while the table was small scans the whole table on every
call until the table is analyzed again; a lateral lookup by key (its `LIMIT 1`, one row
at most anyway, keeps the planner from turning it back into a join) is planned as one.
`subscriptions/listen` reads every batch of changed tasks this way.
"""

from __future__ import annotations

import time
from functools import cached_property
from typing import Any

from fastmcp_tasks.stores.base import TaskRecord
from fastmcp_tasks.stores.listing import ALL_STATUSES, PageKey, check_listing
from fastmcp_tasks.stores.postgres.connections import PostgresConnections
from fastmcp_tasks.stores.postgres.schema import SELECT_COLUMNS, from_row
from fastmcp_tasks.stores.postgres.sql import LIVE


class PostgresListing(PostgresConnections):
    """The `ListableTaskStore` methods of `PostgresTaskStore`, and `get_many`."""

    @cached_property
    def get_many_sql(self) -> str:
        """`get_many`'s statement: by primary key, whatever plan is cached (module doc)."""
        tasks = f"{self.sql.schema}.tasks"
        return (
            "SELECT k.* FROM (SELECT DISTINCT unnest(%(ids)b::text[]) AS id) AS d, LATERAL "
            f"(SELECT {SELECT_COLUMNS} FROM {tasks} WHERE task_id = d.id AND {LIVE} LIMIT 1) AS k"
        )

    async def get_many(self, task_ids: list[str]) -> dict[str, TaskRecord]:
        """The live tasks among `task_ids`, by id: one query (see `base.get_many`)."""
        if not task_ids:
            return {}
        params = {"ids": list(task_ids), "now": time.time()}
        rows = await self._query(self.get_many_sql, params, read=True)
        found = {record.task_id: record for record in map(from_row, rows)}
        return {task_id: found[task_id] for task_id in task_ids if task_id in found}

    async def list_tasks(
        self,
        *,
        status: frozenset[str] | None = None,
        owner: str | None = None,
        limit: int = 100,
        before: PageKey | None = None,
    ) -> list[TaskRecord]:
        statuses = check_listing(status, limit)
        where = [LIVE]
        params: dict[str, Any] = {"now": time.time(), "limit": limit}
        if statuses != ALL_STATUSES:
            where.append("status = ANY(%(statuses)b::text[])")
            params["statuses"] = sorted(statuses)
        if owner is not None:
            where.append("owner = %(owner)s")
            params["owner"] = owner
        if before is not None:
            where.append("(created_at, task_id) < (%(created)s::float8, %(task)s::text)")
            params.update(created=before[0], task=before[1])
        query = (
            f"SELECT {SELECT_COLUMNS} FROM {self.schema}.tasks WHERE {' AND '.join(where)} "
            "ORDER BY created_at DESC, task_id DESC LIMIT %(limit)s"
        )
        return [from_row(row) for row in await self._query(query, params, read=True)]

    async def purge_finished(self, before: float, *, dry_run: bool = False) -> int:
        if dry_run:
            rows = await self._query(self.sql.count_finished, {"before": before}, read=True)
            return int(rows[0][0])
        bury = self.tombstone_retention is not None
        params = {"before": before, "now": time.time(), "bury": bury}
        rows = await self._query(self.sql.purge_finished, params)
        return int(rows[0][0])


__all__ = ["PostgresListing"]
