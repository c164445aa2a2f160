"""The SQLite store (`sqlite:///path.db`): tasks survive restarts; processes share one file.

Connections (`sqlite.connections`). Each store keeps TWO connections, each owned
by one long-lived thread that drains its queue in batches (`sqlite.writer`):

- the read-write connection, whose writer thread batches queued writes into
  group commits. SQLite lets one writer at a time into a file whatever we do, so
  a pool would only add lock waits inside SQLite;
- a read-only connection, whose reader thread serves every read (`get`,
  `get_many`, listings, `active_tasks`, `active_leases`, the probe before
  `claim_queued`) and the change feed's polls. In WAL mode a reader never waits
  for a writer, so while another process holds the write lock for seconds (and
  our writer waits in `BEGIN IMMEDIATE`), `tasks/get` still answers at once. A
  read issued after an awaited write sees it. The reader is never left inside a
  read transaction, so checkpoints can always finish and the `-wal` file stays small.

Durability. WAL mode with `synchronous=NORMAL`: a committed change survives a
crash of any process; a power loss or OS crash may lose the last transactions
(never corrupt the file). Contention with other processes is absorbed by
`busy_timeout` plus a bounded exponential-backoff retry of the whole
transaction; past that bound the caller gets `StoreError`, never a failed task.
A caller that gives up on a write still waiting for the lock (a timeout) is
sure it never happens; one that gives up once it runs gets its outcome anyway.

Atomicity. Every read-modify-write runs in one `BEGIN IMMEDIATE` transaction;
`transition` is an `UPDATE ... WHERE status IN (...)` checked by row count.

Change feed (`sqlite.feed`). Each change is a row of the `changes` table, written
in the transaction that makes the change, so subscribers in other processes see it.
A subscriber reads rows past the highest `seq` at subscription time; an idle poll
is one `PRAGMA data_version`, every `poll_interval` seconds, backing off to
`idle_poll_interval` while nothing happens, and it is woken at once by writes made
through this store instance. `purge_expired` trims rows older than
`change_retention` seconds, keeping at most `max_changes`; a subscriber that falls
further behind than that misses the trimmed rows. A task that becomes claimable
(created unleased, requeued, or given back by `retry_later`) emits a `queued`
change naming its `app` (and, from `retry_later`, its `not_before`).

Idle cost. With nothing to do a process costs the file one feed poll a second
per subscription and one index probe per `claim_queued`; it takes the write lock
only to write. `stats` counts what the store does (`StoreStats`).

Leases (`sqlite.leases`), listing (`sqlite.listing`), flow control
(`sqlite.flow`, `sqlite.gates`: gates, retry waits, dedupe, tombstones) and the
operator records (`sqlite.operations`: histories, workers, pauses, audit) and the durable
steps (`sqlite.steps`) are mixed in.
A finished task keeps its arguments; its input state and context are dropped.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from fastmcp_tasks.errors import DuplicateTask, TaskLimitExceeded
from fastmcp_tasks.stores import rules
from fastmcp_tasks.stores.base import (
    UNCHANGED,
    ActiveCaps,
    TaskRecord,
    _Unchanged,
    encode_result,
    storable_text,
)
from fastmcp_tasks.stores.flow import dedupe_match
from fastmcp_tasks.stores.sqlite import flow, schema
from fastmcp_tasks.stores.sqlite.connections import DEFAULT_MAX_TASKS, SQLiteConnections
from fastmcp_tasks.stores.sqlite.flow import SQLiteFlow
from fastmcp_tasks.stores.sqlite.leases import SQLiteLeases
from fastmcp_tasks.stores.sqlite.listing import SQLiteListing
from fastmcp_tasks.stores.sqlite.operations import SQLiteOperations
from fastmcp_tasks.stores.sqlite.schema import path_from_url
from fastmcp_tasks.stores.sqlite.steps import SQLiteSteps
from fastmcp_tasks.stores.sqlite.tx import Tx
from fastmcp_tasks.wire.names import ACTIVE_STATUSES, TERMINAL_STATUSES, TaskStatus

#: A live task's status and message (`settle_message`, which reads no record back).
_MESSAGE = (
    "SELECT status, status_message FROM tasks WHERE task_id = ? "
    "AND (expires_at IS NULL OR expires_at > ?)"
)
#: A gated task's application and gate (`settle`, which reads no record back).
_GATE = "SELECT app, gate FROM tasks WHERE task_id = ? AND gate IS NOT NULL"


class SQLiteTaskStore(
    SQLiteSteps, SQLiteOperations, SQLiteFlow, SQLiteListing, SQLiteLeases, SQLiteConnections
):
    """A `TaskStore` in a SQLite file, shareable by processes on one host.

    Args:
        path: the database file; created with the schema when missing or empty.
        max_tasks: most tasks retained at once, as in `MemoryTaskStore`; `None`: no cap.
        poll_interval: seconds between change-feed polls for other processes' writes
            while changes arrive.
        idle_poll_interval: the longest wait between polls: with no changes the wait
            doubles from `poll_interval` up to this (never below `poll_interval`).
        busy_timeout: seconds SQLite waits for another process's write lock.
        busy_retries: further attempts (exponential backoff) before `StoreError`.
        change_retention: seconds a change-feed row is kept by `purge_expired`.
        max_changes: most change-feed rows kept by `purge_expired`.
        tombstone_retention: seconds a removed task's tombstone is kept, so its owner
            hears "expired" rather than "not found" (`stores.flow`); `None` keeps none.
    """

    scheme = "sqlite"
    durable = True

    # --- reads and creation -------------------------------------------------------

    async def create(
        self,
        record: TaskRecord,
        *,
        caps: ActiveCaps | None = None,
        dedupe_window: float | None = None,
    ) -> TaskRecord | None:
        key, bury = record.dedupe_key, self.tombstone_retention is not None

        def create(tx: Tx) -> TaskRecord | TaskLimitExceeded | None:
            if key is not None and dedupe_window is not None:  # in the insert's transaction
                now = time.time()
                found = flow.duplicate_of(tx, key, now)
                if found is not None and dedupe_match(found, now, dedupe_window):
                    return found
            if caps is not None and record.is_active:
                if (refused := tx.refusal(caps, record.owner)) is not None:
                    return refused
            if self.max_tasks is not None and tx.count() >= self.max_tasks:
                tx.purge(time.time(), bury=bury)
                if tx.count() >= self.max_tasks:
                    return TaskLimitExceeded("max_tasks", self.max_tasks)
            try:
                tx.conn.execute(schema.INSERT_TASK, schema.to_row(record))
            except sqlite3.IntegrityError:
                raise DuplicateTask(f"task {record.task_id!r} already exists") from None
            if record.is_active and record.lease_owner is None:  # for any worker to take
                tx.emit(record.task_id, "queued", record.status, {"app": record.app})
            return None

        outcome = await self._run(create)
        if isinstance(outcome, TaskLimitExceeded):
            raise outcome
        return outcome

    async def get(self, task_id: str) -> TaskRecord | None:
        return await self._point_read(lambda tx: tx.load(task_id))

    async def peek(self, task_id: str) -> TaskRecord | None:
        """`get` without `arguments` and `context` (`stores.peeking`)."""
        return await self._point_read(lambda tx: tx.load(task_id, lean=True))

    # --- changes ------------------------------------------------------------------

    async def set_status_message(self, task_id: str, message: str | None) -> TaskRecord | None:
        message = storable_text(message)

        def change(tx: Tx) -> TaskRecord | None:
            record = tx.load(task_id)
            if record is None or record.status not in ACTIVE_STATUSES:
                return None
            if record.status_message != message:
                record.status_message, record.updated_at = message, time.time()
                tx.save(record)
                tx.emit(task_id, "message", record.status)
            return record

        return await self._run(change)

    async def settle_message(self, task_id: str, message: str | None) -> bool:
        """`set_status_message`, reading no record back (`stores.settling`)."""
        message = storable_text(message)

        def change(tx: Tx) -> bool:
            now = time.time()
            found = tx.conn.execute(_MESSAGE, (task_id, now)).fetchone()
            if found is None or found[0] not in ACTIVE_STATUSES:
                return False
            if found[1] != message:
                query = "UPDATE tasks SET status_message = ?, updated_at = ? WHERE task_id = ?"
                tx.conn.execute(query, (message, now, task_id))
                tx.emit(task_id, "message", found[0])
            return True

        return await self._run(change)

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
        changed = await self._transition(
            task_id, status, expect, status_message, result, error, read_back=True
        )
        return changed if isinstance(changed, TaskRecord) else None

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
        changed = await self._transition(
            task_id, status, expect, status_message, result, error, read_back=False
        )
        return changed is not None

    async def _transition(
        self,
        task_id: str,
        status: TaskStatus,
        expect: frozenset[str] | None,
        status_message: str | _Unchanged | None,
        result: dict[str, Any] | None,
        error: dict[str, Any] | None,
        *,
        read_back: bool,
    ) -> TaskRecord | bool | None:
        """The change of `transition`: the new record (`read_back`), else `True`; `None`
        when refused."""
        sources = rules.transition_sources(status, expect)
        if not sources:
            return None

        def change(tx: Tx) -> TaskRecord | bool | None:
            now = time.time()
            columns: dict[str, Any] = {"status": status, "updated_at": now}
            if not isinstance(status_message, _Unchanged):
                columns["status_message"] = storable_text(status_message)
            if status in TERMINAL_STATUSES:
                kept = result if status == "completed" else None
                columns.update(
                    terminal_at=now,
                    result_json=None if kept is None else encode_result(kept),
                    error=schema.dumps(error) if status == "failed" else None,
                    input_requests=None,
                    answers=None,
                    context=None,
                )
            elif status == "working":
                columns["input_requests"] = None
            sets = ", ".join(f"{name} = ?" for name in columns)
            expiry = ", expires_at = ? + retention_ms / 1000.0" if "terminal_at" in columns else ""
            cursor = tx.conn.execute(
                f"UPDATE tasks SET {sets}{expiry} WHERE task_id = ? "
                f"AND status IN ({', '.join('?' * len(sources))})",
                (*columns.values(), *([now] if expiry else []), task_id, *sources),
            )
            if cursor.rowcount != 1:
                return None
            tx.emit(task_id, "status", status)
            record = tx.load(task_id, live=False) if read_back else None  # retention 0 too
            if status in TERMINAL_STATUSES:  # a gate's slot is free: its waiters claim at once
                if record is not None:
                    freed = [] if record.gate is None else [(record.app, record.gate)]
                else:
                    freed = tx.conn.execute(_GATE, (task_id,)).fetchall()
                for app, gate in freed:
                    tx.emit(task_id, "queued", status, {"app": app, "gate": gate})
            return record if read_back else True

        return await self._run(change)

    async def request_input(
        self, task_id: str, requests: dict[str, Any], *, status_message: str | None = None
    ) -> TaskRecord | None:
        def change(tx: Tx) -> TaskRecord | None:
            record = tx.load(task_id)
            if record is None or not rules.park(record, requests, status_message):
                return None
            tx.save(record)
            tx.emit(task_id, "inputs", "input_required", {"keys": list(requests)})
            return record

        return await self._run(change)

    async def answer_input(self, task_id: str, responses: dict[str, Any]) -> dict[str, Any] | None:
        def change(tx: Tx) -> dict[str, Any] | None:
            record = tx.load(task_id)
            if record is None:
                return None
            accepted = rules.accept_answers(record, responses)
            if accepted:
                tx.save(record)
                tx.emit(task_id, "answered", record.status, {"keys": list(accepted)})
            return accepted

        return await self._run(change)

    async def take_answers(self, task_id: str, keys: frozenset[str]) -> dict[str, Any]:
        def change(tx: Tx) -> dict[str, Any]:
            record = tx.load(task_id)
            if record is None:
                return {}
            taken = rules.take_answers(record, keys)
            if taken:
                tx.save(record)
            return taken

        return await self._run(change)

    async def withdraw_input(self, task_id: str, keys: frozenset[str]) -> TaskRecord | None:
        def change(tx: Tx) -> TaskRecord | None:
            record = tx.load(task_id)
            if record is None or record.status not in ACTIVE_STATUSES:
                return None
            if rules.withdraw(record, keys):
                tx.save(record)
                tx.emit(task_id, "inputs", record.status, {"withdrawn": sorted(keys)})
            return record

        return await self._run(change)

    async def request_cancel(self, task_id: str) -> TaskRecord | None:
        def change(tx: Tx) -> TaskRecord | None:
            record = tx.load(task_id)
            if record is None or record.status in TERMINAL_STATUSES:
                return record
            record.cancel_requested = True
            tx.save(record)
            tx.emit(task_id, "cancel_requested", record.status)
            return record

        return await self._run(change)

    # --- retention ----------------------------------------------------------------

    async def purge_expired(self, now: float) -> int:
        retention = self.tombstone_retention

        def purge(tx: Tx) -> int:
            removed = tx.purge(now, bury=retention is not None)
            flow.prune(tx, now, retention)
            tx.trim_changes(time.time() - self.change_retention, self.max_changes)
            return removed

        return await self._run(purge)

    def describe(self) -> str:
        """The URL of the file, `sqlite:///` and its absolute path (`stores.urls.describe`)."""
        return f"sqlite:///{self.path}"

    def __repr__(self) -> str:
        return f"SQLiteTaskStore({self.describe()})"


__all__ = ["DEFAULT_MAX_TASKS", "SQLiteTaskStore", "path_from_url"]
