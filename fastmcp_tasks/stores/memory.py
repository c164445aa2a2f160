"""The in-memory store (`memory://`): one process, nothing survives a restart.

Tasks live in a dict (O(1) `get`), terminal tasks are indexed in a heap by
expiry so a sweep costs only what it removes, and `max_tasks` caps how many
are retained so memory cannot grow without bound. Active tasks are counted (in
all and per owner) as they are created and end, so active caps cost O(1).
Every method runs without an await between its read and its write, so on one
event loop each is atomic: that is the compare-and-set the contract asks for.
Finished tasks drop their input state and keep their arguments (operators read
them to understand or rerun a task). Histories, workers, pauses and the audit log
are `memory_operations.MemoryOperations`.

Records go in and out as copies (`_snapshot`, one positional constructor call):
mutating a record passed to `create` or returned by any method never changes
what the store holds. The copies are shallow; the nested dicts are never
changed in place here (`take_answers` rebinds `answers` before popping).
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectSendStream

from fastmcp_tasks.errors import ConfigurationError, DuplicateTask, TaskLimitExceeded
from fastmcp_tasks.stores import rules
from fastmcp_tasks.stores.base import (
    ALLOWED_TRANSITIONS,
    UNCHANGED,
    ActiveCaps,
    TaskChange,
    TaskRecord,
    _Unchanged,
    encode_result,
    storable_text,
)
from fastmcp_tasks.stores.flow import DEFAULT_TOMBSTONE_RETENTION, Tombstone
from fastmcp_tasks.stores.memory_flow import MemoryFlow
from fastmcp_tasks.stores.memory_listing import MemoryListing, _snapshot
from fastmcp_tasks.stores.memory_operations import MemoryOperations
from fastmcp_tasks.stores.memory_steps import MemorySteps
from fastmcp_tasks.wire.names import ACTIVE_STATUSES, TERMINAL_STATUSES, TaskStatus

DEFAULT_MAX_TASKS = 100_000


class MemoryTaskStore(MemoryListing, MemoryOperations, MemorySteps):
    """A `TaskStore` held in this process's memory.

    Args:
        max_tasks: most tasks retained at once (active and finished); a new task
            beyond it is refused with `TaskLimitExceeded` after expired tasks are
            swept. `None` removes the cap.
        tombstone_retention: seconds a removed task's tombstone is kept, so its
            owner hears "expired" rather than "not found" (`stores.flow`); `None`
            keeps none.
    """

    scheme = "memory"
    durable = False
    flow_control = True

    def __init__(
        self,
        *,
        max_tasks: int | None = DEFAULT_MAX_TASKS,
        tombstone_retention: float | None = DEFAULT_TOMBSTONE_RETENTION,
    ) -> None:
        if max_tasks is not None and max_tasks < 1:
            raise ConfigurationError(f"max_tasks must be at least 1, got {max_tasks}")
        self.max_tasks = max_tasks
        self._flow = MemoryFlow(tombstone_retention)
        self._tasks: dict[str, TaskRecord] = {}
        self._expiry: list[tuple[float, str]] = []
        self._active = 0
        self._active_by_owner: dict[str, int] = {}
        self._operations_init()
        self._steps_init()
        # each feed subscriber, with the task ids and change kinds it follows (None: all)
        self._subscribers: dict[
            MemoryObjectSendStream[TaskChange], tuple[frozenset[str] | None, frozenset[str] | None]
        ] = {}

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        for stream in list(self._subscribers):
            stream.close()
        self._subscribers.clear()

    def __len__(self) -> int:
        return len(self._tasks)

    def describe(self) -> str:
        """`memory://` (`stores.urls.describe`)."""
        return "memory://"

    def __repr__(self) -> str:
        return f"MemoryTaskStore({self.describe()})"

    # --- reads and creation -------------------------------------------------------

    async def create(
        self,
        record: TaskRecord,
        *,
        caps: ActiveCaps | None = None,
        dedupe_window: float | None = None,
    ) -> TaskRecord | None:
        if record.task_id in self._tasks:
            raise DuplicateTask(f"task {record.task_id!r} already exists")
        found = self._flow.duplicate_of(record, self._tasks, time.time(), dedupe_window)
        if found is not None:
            return _snapshot(found)
        owner = record.owner
        if caps is not None and record.is_active:
            owned = 0 if owner is None else self._active_by_owner.get(owner, 0)
            if (refused := caps.refusal(self._active, owned, owner)) is not None:
                raise refused
        if self.max_tasks is not None and len(self._tasks) >= self.max_tasks:
            self._purge(time.time())
            if len(self._tasks) >= self.max_tasks:
                raise TaskLimitExceeded("max_tasks", self.max_tasks)
        record = _snapshot(record)  # the caller's object stays the caller's
        self._tasks[record.task_id] = record
        if dedupe_window is not None:
            self._flow.keyed(record)
        if record.is_terminal:
            self._index_expiry(record)
        else:
            self._count_active(owner, 1)
            self._flow.added(record)
            if record.lease_owner is None:  # for any worker to take
                self._emit(TaskChange(record.task_id, "queued", record.status, {"app": record.app}))
        return None

    async def get(self, task_id: str) -> TaskRecord | None:
        record = self._live(task_id)
        return None if record is None else _snapshot(record)

    def _live(self, task_id: str) -> TaskRecord | None:
        """The stored record itself (never handed out), or `None` when absent or expired."""
        record = self._tasks.get(task_id)
        if record is None:
            return None
        expires_at = record.expires_at
        if expires_at is not None and expires_at <= time.time():
            del self._tasks[task_id]
            self._forget_history(task_id)
            self._flow.bury(record, "expired", expires_at)
            return None
        return record

    # --- changes ------------------------------------------------------------------

    async def set_status_message(self, task_id: str, message: str | None) -> TaskRecord | None:
        record = self._tasks.get(task_id)
        if record is None or record.status not in ACTIVE_STATUSES:
            return None
        message = storable_text(message)
        if record.status_message != message:
            record.status_message = message
            record.updated_at = time.time()
            self._emit(TaskChange(task_id, "message", record.status))
        return _snapshot(record)

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
        record = self._tasks.get(task_id)
        if record is None:
            return None
        current = record.status
        if status not in ALLOWED_TRANSITIONS[current]:
            return None
        if expect is not None and current not in expect:
            return None
        now = time.time()
        record.status = status
        record.updated_at = now
        if not isinstance(status_message, _Unchanged):
            record.status_message = storable_text(status_message)
        if status in TERMINAL_STATUSES:
            self._count_active(record.owner, -1)
            self._flow.ended(record)
            record.terminal_at = now
            completed = status == "completed" and result is not None
            record.result_json = encode_result(result) if completed else None
            record.error = error if status == "failed" else None
            record.input_requests = None
            record.answers = None
            record.context = None
            self._index_expiry(record)
        elif status == "working":
            record.input_requests = None
        self._emit(TaskChange(task_id, "status", status))
        if status in TERMINAL_STATUSES and record.gate is not None:
            self._emit(
                TaskChange(task_id, "queued", status, {"app": record.app, "gate": record.gate})
            )
        return _snapshot(record)

    async def request_input(
        self, task_id: str, requests: dict[str, Any], *, status_message: str | None = None
    ) -> TaskRecord | None:
        record = self._tasks.get(task_id)
        if record is None or not rules.park(record, requests, status_message):
            return None
        self._emit(TaskChange(task_id, "inputs", "input_required", {"keys": list(requests)}))
        return _snapshot(record)

    async def answer_input(self, task_id: str, responses: dict[str, Any]) -> dict[str, Any] | None:
        record = self._tasks.get(task_id)
        if record is None:
            return None
        accepted = rules.accept_answers(record, responses)
        if accepted:
            self._emit(TaskChange(task_id, "answered", record.status, {"keys": list(accepted)}))
        return accepted

    async def take_answers(self, task_id: str, keys: frozenset[str]) -> dict[str, Any]:
        record = self._tasks.get(task_id)
        if record is None or not record.answers:
            return {}
        record.answers = dict(record.answers)  # snapshots share the old dict: never pop it
        return rules.take_answers(record, keys)

    async def withdraw_input(self, task_id: str, keys: frozenset[str]) -> TaskRecord | None:
        record = self._tasks.get(task_id)
        if record is None or record.status not in ACTIVE_STATUSES:
            return None
        if rules.withdraw(record, keys):
            self._emit(TaskChange(task_id, "inputs", record.status, {"withdrawn": sorted(keys)}))
        return _snapshot(record)

    async def request_cancel(self, task_id: str) -> TaskRecord | None:
        record = self._live(task_id)
        if record is None:
            return None
        if record.status not in TERMINAL_STATUSES:
            record.cancel_requested = True
            self._emit(TaskChange(task_id, "cancel_requested", record.status))
        return _snapshot(record)

    @asynccontextmanager
    async def changes(
        self, task_ids: frozenset[str] | None = None, kinds: frozenset[str] | None = None
    ) -> AsyncIterator[AsyncIterator[TaskChange]]:
        send, receive = anyio.create_memory_object_stream[TaskChange](math.inf)
        self._subscribers[send] = (task_ids, kinds)
        try:
            async with receive:
                yield receive
        finally:
            self._subscribers.pop(send, None)
            send.close()

    # --- leases (one process: a formality, kept for the shared contract) ----------

    async def claim(
        self, task_id: str, owner: str, until: float, *, expect_owner: str | None = None
    ) -> TaskRecord | None:
        record = self._live(task_id)
        before = None if record is None else record.lease_owner
        if record is None or not rules.lease(record, owner, until, expect_owner):
            return None
        self._flow.leased(record, before)
        return _snapshot(record)

    async def renew(self, owner: str, task_ids: frozenset[str], until: float) -> None:
        for task_id in task_ids:
            record = self._tasks.get(task_id)
            if record is not None and record.lease_owner == owner and record.is_active:
                record.lease_expires = until

    async def requeue(self, task_id: str, owner: str) -> TaskRecord | None:
        record = self._live(task_id)
        if record is None or record.status not in ACTIVE_STATUSES or record.lease_owner != owner:
            return None
        rules.give_back(record)
        self._flow.leased(record, owner)
        self._emit(TaskChange(task_id, "queued", record.status, {"app": record.app}))
        return _snapshot(record)

    async def start_run(
        self, task_id: str, owner: str, status_message: str | None
    ) -> TaskRecord | None:
        """Begin the run of a waiting task leased to `owner` (`stores.phases.start_run`)."""
        record = self._live(task_id)
        if record is None or (kinds := rules.begin(record, owner, status_message)) is None:
            return None
        for kind in kinds:
            self._emit(TaskChange(task_id, kind, record.status))
        return _snapshot(record)

    async def retry_later(
        self, task_id: str, owner: str, not_before: float, status_message: str | None
    ) -> TaskRecord | None:
        record = self._live(task_id)
        if (
            record is None
            or (kinds := rules.retry(record, owner, not_before, status_message)) is None
        ):
            return None
        self._flow.leased(record, owner)
        for kind in kinds:
            self._emit(TaskChange(task_id, kind, "working"))
        details = {"app": record.app, "not_before": not_before}
        self._emit(TaskChange(task_id, "queued", "working", details))
        if record.gate is not None:  # its slot is free while it waits: waiters claim now
            freed = {"app": record.app, "gate": record.gate}
            self._emit(TaskChange(task_id, "queued", "working", freed))
        return _snapshot(record)

    async def tombstone(self, task_id: str) -> Tombstone | None:
        if self._live(task_id) is not None:
            return None
        return self._flow.tombstone(task_id, time.time())

    async def claim_queued(
        self, owner: str, until: float, limit: int, *, app: str | None = None
    ) -> list[TaskRecord]:
        taken: list[TaskRecord] = []
        for task_id in self._flow.plan(self._tasks, limit, time.time(), app):
            record = self._tasks[task_id]
            record.lease_owner = owner
            record.lease_expires = until
            record.not_before = None
            self._flow.leased(record, None)
            taken.append(_snapshot(record))
        return taken

    # --- retention ----------------------------------------------------------------

    async def purge_expired(self, now: float) -> int:
        return self._purge(now)

    def _purge(self, now: float) -> int:
        removed = 0
        heap = self._expiry
        while heap and heap[0][0] <= now:
            expires_at, task_id = heapq.heappop(heap)
            record = self._tasks.get(task_id)
            if record is not None and record.expires_at == expires_at:
                del self._tasks[task_id]
                self._forget_history(task_id)
                self._flow.bury(record, "expired", expires_at)
                removed += 1
        self._flow.prune(now)
        self._flow.forget_turns(self._tasks)
        return removed

    def _count_active(self, owner: str | None, delta: int) -> None:
        self._active += delta
        if owner is not None:
            left = self._active_by_owner.get(owner, 0) + delta
            if left > 0:
                self._active_by_owner[owner] = left
            else:
                self._active_by_owner.pop(owner, None)

    def _index_expiry(self, record: TaskRecord) -> None:
        expires_at = record.expires_at
        if expires_at is not None:
            heapq.heappush(self._expiry, (expires_at, record.task_id))

    def _emit(self, change: TaskChange) -> None:
        if not self._subscribers:
            return
        for stream, (wanted, kinds) in list(self._subscribers.items()):
            if wanted is not None and change.task_id not in wanted:
                continue
            if kinds is not None and change.kind not in kinds:
                continue
            try:
                stream.send_nowait(change)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                self._subscribers.pop(stream, None)
