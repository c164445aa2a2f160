"""Status changes of the PostgreSQL store, mixed into `PostgresTaskStore`.

`transition` is one statement (`Statements.transition`): the compare-and-set UPDATE,
its change rows, the active-task counters and the notification, answering the new
row. `settle` (`stores.settling`) is the same statement answering only that it was
applied: the final SELECT of the statement names no column of the task, so its
arguments and result are neither sent back nor decoded (`settling_statement`).
`set_status_message` is one statement too (`Statements.set_message`), its answer checked
against a change committed meanwhile (`_fresh`); `settle_message` is that statement
answering only the task's message (`message_statement`), checked the same way. All may
ride in a batch (`postgres.batching`).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

from fastmcp_tasks.stores import rules
from fastmcp_tasks.stores.base import UNCHANGED, TaskRecord, _Unchanged, encode_result
from fastmcp_tasks.stores.postgres.connections import PostgresConnections
from fastmcp_tasks.stores.postgres.schema import (
    COLUMNS,
    SELECT_COLUMNS,
    clean_text,
    dumps,
    from_row,
)
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


@functools.lru_cache(maxsize=16)
def message_statement(set_message: str) -> str:
    """`set_message` answering the task's message, not its row, in both its branches."""
    rows, lean = f"SELECT {SELECT_COLUMNS}, ", "SELECT status_message, "
    if set_message.count(rows) != 2:
        raise AssertionError("the set_message statement must answer the row twice")
    return set_message.replace(rows, lean)


class PostgresTransitions(PostgresConnections):
    """The status and message changes of `PostgresTaskStore` (module doc)."""

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

    async def set_status_message(self, task_id: str, message: str | None) -> TaskRecord | None:
        message = clean_text(message)
        return await self._fresh(
            self.sql.set_message,
            {"id": task_id, "message": message},
            lambda found: found.status_message == message,  # else a change ended it
        )

    async def settle_message(self, task_id: str, message: str | None) -> bool:
        """`set_status_message`, reading no record back (`stores.settling`). An unchanged
        message is read as of the statement's snapshot, which a change committed meanwhile
        (one that ended the task) may have outdated: then the next statement, with a newer
        snapshot, tells (as `_fresh` does for the row)."""
        message = clean_text(message)
        query = message_statement(self.sql.set_message)
        for _ in range(3):  # a terminal task stays terminal: the second read settles it
            params = {"id": task_id, "message": message, "now": time.time()}
            rows = await self._query(query, params, batch=True)
            if not rows:
                return False
            if rows[0][1] or rows[0][0] == message:
                return True
        return True

    async def _fresh(
        self, query: str, params: dict[str, Any], unchanged: Callable[[TaskRecord], bool]
    ) -> TaskRecord | None:
        """Run a change statement whose last column says whether it changed the task: the
        record it returns. Unchanged, its row is as of the statement's snapshot, which a
        transaction committed meanwhile (the UPDATE waited for it, then skipped the row it
        made terminal) may have outdated: `unchanged(record)` false says so, and the next
        statement, with a newer snapshot, returns the current record instead."""
        for _ in range(3):  # a terminal task stays terminal: the second read settles it
            rows = await self._query(query, {**params, "now": time.time()}, batch=True)
            if not rows:
                return None
            found = from_row(rows[0][:_WIDTH])
            if rows[0][_WIDTH] or unchanged(found):
                return found
        return found


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


__all__ = ["PostgresTransitions", "message_statement", "settling_statement"]
