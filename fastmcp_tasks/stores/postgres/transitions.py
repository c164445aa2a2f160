"""Status changes of the PostgreSQL store, mixed into `PostgresTaskStore`.

`transition` is one statement (`Statements.transition`): the compare-and-set UPDATE,
its change rows, the active-task counters and the notification, answering the new
row. `settle` (`stores.settling`) is the same statement answering only that it was
applied: the final SELECT of the statement names no column of the task, so its
arguments and result are neither sent back nor decoded (`settling_statement`).
Both may ride in a batch (`postgres.batching`).
"""

from __future__ import annotations

import functools
import time
from typing import Any

from fastmcp_tasks.stores import rules
from fastmcp_tasks.stores.base import UNCHANGED, TaskRecord, _Unchanged, encode_result
from fastmcp_tasks.stores.postgres.connections import PostgresConnections
from fastmcp_tasks.stores.postgres.schema import COLUMNS, clean_text, dumps, from_row
from fastmcp_tasks.wire.names import TERMINAL_STATUSES, TaskStatus

_WIDTH = len(COLUMNS)
#: How `Statements.transition` ends: the new row and the notification count.
_ANSWER = "(SELECT count(*) FROM note) FROM u"


@functools.lru_cache(maxsize=16)
def settling_statement(transition: str) -> str:
    """`transition` answering `1` and the notification count instead of the row."""
    head, select, tail = transition.rpartition("\nSELECT ")
    if not select or not tail.endswith(_ANSWER):
        raise AssertionError("the transition statement must end with its row and the count")
    return f"{head}\nSELECT 1, {_ANSWER}"


class PostgresTransitions(PostgresConnections):
    """`transition` and `settle` of `PostgresTaskStore` (module doc)."""

    async def transition(
        self,
        task_id: str,
        status: TaskStatus,
        *,
        expect: frozenset[str] | None = None,
        status_message: str | _Unchanged | None = UNCHANGED,
        result: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
    ) -> TaskRecord | None:
        params = _params(task_id, status, expect, status_message, result, error)
        if params is None:
            return None
        rows = await self._query(self.sql.transition, params, batch=True)
        return from_row(rows[0][:_WIDTH]) if rows else None

    async def settle(
        self,
        task_id: str,
        status: TaskStatus,
        *,
        expect: frozenset[str] | None = None,
        status_message: str | _Unchanged | None = UNCHANGED,
        result: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
    ) -> bool:
        """`transition`, reading no record back (`stores.settling`)."""
        params = _params(task_id, status, expect, status_message, result, error)
        if params is None:
            return False
        query = settling_statement(self.sql.transition)
        return bool(await self._query(query, params, batch=True))


def _params(
    task_id: str,
    status: TaskStatus,
    expect: frozenset[str] | None,
    status_message: str | _Unchanged | None,
    result: dict[str, Any] | None,
    error: dict[str, Any] | None,
) -> dict[str, Any] | None:
    """The parameters of the transition statement; `None`: refused by the rules alone."""
    sources = rules.transition_sources(status, expect)
    if not sources:
        return None
    kept = result if status == "completed" else None
    keep = isinstance(status_message, _Unchanged)
    return {
        "id": task_id,
        "status": status,
        "sources": sources,
        "now": time.time(),
        "keep": keep,
        "message": None if isinstance(status_message, _Unchanged) else clean_text(status_message),
        "terminal": status in TERMINAL_STATUSES,
        "result": None if kept is None else encode_result(kept),
        "error": dumps(error) if status == "failed" else None,
    }


__all__ = ["PostgresTransitions", "settling_statement"]
