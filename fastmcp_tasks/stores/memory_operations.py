"""The in-memory store's operator records (`stores.operations`): histories, workers,
pauses, the audit log and purging a chosen set of tasks.

Kept in dicts beside the tasks (a history as compact JSON per event, as the other
stores keep it, which also makes every read a copy); a task's history goes when the task does
(`MemoryTaskStore` calls `_forget_history` wherever it removes a task).
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING

from fastmcp_tasks.stores import rules
from fastmcp_tasks.stores.base import TaskChange, TaskRecord, storable_text
from fastmcp_tasks.stores.memory_listing import _snapshot
from fastmcp_tasks.stores.operations import (
    FORGET_AFTER,
    MAX_AUDIT,
    PAUSED_UNTIL,
    RESUMED_MESSAGE,
    AuditEntry,
    Pause,
    TaskEvent,
    WorkerInfo,
    keeps_event,
    pause_key,
)
from fastmcp_tasks.wire.names import ACTIVE_STATUSES

if TYPE_CHECKING:
    from fastmcp_tasks.stores.memory_flow import MemoryFlow


def _encoded(event: TaskEvent) -> bytes:
    return json.dumps([event.at, event.kind, event.details], separators=(",", ":")).encode()


def _decoded(raw: bytes) -> TaskEvent:
    at, kind, details = json.loads(raw)
    return TaskEvent(at, kind, details)


class MemoryOperations:
    """`OperableTaskStore` over a `MemoryTaskStore`'s dicts."""

    _tasks: dict[str, TaskRecord]
    _flow: MemoryFlow

    if TYPE_CHECKING:

        def _live(self, task_id: str) -> TaskRecord | None: ...
        def _emit(self, change: TaskChange) -> None: ...
        def _forget_steps(self, task_id: str) -> None: ...

    def _operations_init(self) -> None:
        # each event as compact JSON bytes: a third of the memory of the objects
        self._histories: dict[str, list[bytes]] = {}
        self._workers: dict[str, WorkerInfo] = {}
        self._pauses: dict[tuple[str, str], Pause] = {}
        self._audit: deque[AuditEntry] = deque(maxlen=MAX_AUDIT)

    def _forget_history(self, task_id: str) -> None:
        """Forget what is kept beside a removed task: its history and its steps."""
        self._histories.pop(task_id, None)
        self._forget_steps(task_id)

    async def add_events(self, events: Sequence[tuple[str, TaskEvent]]) -> None:
        for task_id, event in events:
            if self._live(task_id) is None:
                continue
            history = self._histories.setdefault(task_id, [])
            if keeps_event(event.kind, len(history)):
                history.append(_encoded(event))

    async def events(self, task_id: str) -> list[TaskEvent]:
        if self._live(task_id) is None:
            return []
        return [_decoded(raw) for raw in self._histories.get(task_id, ())]

    async def beat(self, worker: WorkerInfo) -> None:
        self._workers[worker.worker_id] = worker
        horizon = time.time() - FORGET_AFTER
        for worker_id in [w for w, info in self._workers.items() if info.last_seen < horizon]:
            del self._workers[worker_id]

    async def workers(self) -> list[WorkerInfo]:
        horizon = time.time() - FORGET_AFTER
        return [w for w in self._workers.values() if w.last_seen >= horizon]

    async def pause(self, pause: Pause) -> bool:
        key = (pause.app, pause.tool)
        if key in self._pauses:
            return False
        self._pauses[key] = pause
        return True

    async def resume(self, app: str, tool: str) -> int | None:
        if self._pauses.pop((app, tool), None) is None:
            return None
        released, now = 0, time.time()
        for task_id in list(self._flow.queued):
            record = self._tasks.get(task_id)
            if (
                record is not None
                and record.not_before == PAUSED_UNTIL
                and record.tool == tool
                and pause_key(record.app) == app
            ):
                record.not_before = None
                record.status_message, record.updated_at = RESUMED_MESSAGE, now
                released += 1
                self._emit(TaskChange(task_id, "message", record.status))
                self._emit(TaskChange(task_id, "queued", record.status, {"app": record.app}))
        return released

    async def paused(self) -> list[Pause]:
        return list(self._pauses.values())

    async def hold_paused(
        self, task_id: str, owner: str, status_message: str | None
    ) -> TaskRecord | None:
        record = self._live(task_id)
        if (
            record is None
            or record.status not in ACTIVE_STATUSES
            or record.lease_owner != owner
            or record.cancel_requested
            or (pause_key(record.app), record.tool) not in self._pauses
        ):
            return None
        rules.hold_back(record)
        record.not_before = PAUSED_UNTIL
        self._flow.leased(record, owner)
        if record.gate is not None:  # its slot is free while it waits: waiters claim now
            freed = {"app": record.app, "gate": record.gate}
            self._emit(TaskChange(task_id, "queued", record.status, freed))
        message = storable_text(status_message)
        if record.status_message != message:
            record.status_message = message
            record.updated_at = time.time()
            self._emit(TaskChange(task_id, "message", record.status))
        return _snapshot(record)

    async def add_audit(self, entry: AuditEntry) -> None:
        self._audit.append(entry)

    async def audit(self, limit: int = 100) -> list[AuditEntry]:
        newest = list(reversed(self._audit))
        return newest[: max(0, limit)]

    async def delete_finished(self, task_ids: Sequence[str]) -> int:
        now, removed = time.time(), 0
        for task_id in dict.fromkeys(task_ids):
            record = self._live(task_id)
            if record is not None and record.is_terminal:
                del self._tasks[task_id]
                self._forget_history(task_id)
                self._flow.bury(record, "purged", now)
                removed += 1
        return removed


__all__ = ["MemoryOperations"]
