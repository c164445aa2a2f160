"""The in-memory store's flow-control bookkeeping (`stores.flow`), kept beside its dict.

`MemoryFlow` indexes what `claim_queued`, deduplication and tombstones need so none of
them scans every retained task: the unleased active tasks (the queue), the leased
active tasks of each gate, each gate's turns, the dedupe keys and the tombstones.
`MemoryTaskStore` calls it from the same event-loop turn as each change, so every
flow decision is atomic with the write it belongs to.
"""

from __future__ import annotations

import math

from fastmcp_tasks.stores.base import TaskRecord
from fastmcp_tasks.stores.flow import (
    ANONYMOUS,
    Candidate,
    Tombstone,
    TombstoneReason,
    claimable,
    dedupe_match,
    plan_claims,
    tombstone_key,
)

#: Most tombstones kept at once (each a few hundred bytes); the oldest go first.
MAX_TOMBSTONES = 100_000


class MemoryFlow:
    """Queue, gate, turn, dedupe and tombstone indexes of one `MemoryTaskStore`."""

    def __init__(self, tombstone_retention: float | None) -> None:
        self.tombstone_retention = tombstone_retention
        self.queued: dict[str, None] = {}  # unleased active task ids, in order of queueing
        self.running: dict[str, int] = {}  # gate -> leased active tasks
        self.turns: dict[tuple[str, str], int] = {}
        self.next_turn = 0
        self.dedupe: dict[str, str] = {}  # key -> task id
        self.tombstones: dict[str, Tombstone] = {}  # oldest first

    # --- the queue and the gates ---------------------------------------------------

    def leased(self, record: TaskRecord, before: str | None) -> None:
        """`record`'s lease owner changed from `before` (it is still active)."""
        if before is None and record.lease_owner is not None:
            self.queued.pop(record.task_id, None)
            self._count(record.gate, 1)
        elif before is not None and record.lease_owner is None:
            self.queued[record.task_id] = None
            self._count(record.gate, -1)

    def added(self, record: TaskRecord) -> None:
        """A new active task."""
        if record.lease_owner is None:
            self.queued[record.task_id] = None
        else:
            self._count(record.gate, 1)

    def ended(self, record: TaskRecord) -> None:
        """`record` became terminal (its lease, if any, no longer counts)."""
        if self.queued.pop(record.task_id, None) is None and record.lease_owner is not None:
            self._count(record.gate, -1)

    def plan(
        self, tasks: dict[str, TaskRecord], limit: int, now: float, app: str | None
    ) -> list[str]:
        """The ids `claim_queued` takes now; their turns are recorded."""
        candidates = sorted(
            (
                Candidate.of(record)
                for task_id in self.queued
                if (record := tasks.get(task_id)) is not None and claimable(record, now, app)
            ),
            key=lambda c: c.created_at,
        )
        chosen, used = plan_claims(candidates, limit, self.running, self.turns, self.next_turn)
        if used:
            self.turns.update(used)
            self.next_turn = max(used.values()) + 1
        return chosen

    def _count(self, gate: str | None, delta: int) -> None:
        if gate is None:
            return
        left = self.running.get(gate, 0) + delta
        if left > 0:
            self.running[gate] = left
        else:
            self.running.pop(gate, None)

    def forget_turns(self, tasks: dict[str, TaskRecord]) -> None:
        """Drop the turns of gates no active task waits in or holds (after a sweep)."""
        if not self.turns:
            return
        live = {
            (r.gate, r.owner if r.owner is not None else ANONYMOUS)
            for task_id in self.queued
            if (r := tasks.get(task_id)) is not None and r.gate is not None
        }
        live_gates = set(self.running) | {gate for gate, _ in live}
        self.turns = {k: v for k, v in self.turns.items() if k[0] in live_gates}

    # --- deduplication ---------------------------------------------------------------

    def duplicate_of(
        self, record: TaskRecord, tasks: dict[str, TaskRecord], now: float, window: float | None
    ) -> TaskRecord | None:
        """The task that answers `record`'s call instead, if any (`dedupe_match`)."""
        key = record.dedupe_key
        if key is None or window is None:
            return None
        held = self.dedupe.get(key)
        existing = tasks.get(held) if held is not None else None
        if existing is None or (existing.expires_at or math.inf) <= now:
            return None  # gone, or expired and not swept yet
        return existing if dedupe_match(existing, now, window) else None

    def keyed(self, record: TaskRecord) -> None:
        if record.dedupe_key is not None:
            self.dedupe[record.dedupe_key] = record.task_id

    # --- tombstones ------------------------------------------------------------------

    def bury(self, record: TaskRecord, reason: TombstoneReason, at: float) -> None:
        """`record` was removed: remember that, and drop its dedupe key."""
        key = record.dedupe_key
        if key is not None and self.dedupe.get(key) == record.task_id:
            del self.dedupe[key]
        if self.tombstone_retention is None:
            return
        stones = self.tombstones
        stones[tombstone_key(record.task_id)] = Tombstone(record.owner, at, reason)
        while len(stones) > MAX_TOMBSTONES:
            del stones[next(iter(stones))]

    def tombstone(self, task_id: str, now: float) -> Tombstone | None:
        stone = self.tombstones.get(tombstone_key(task_id))
        if stone is None or self.tombstone_retention is None:
            return None
        return stone if stone.at >= now - self.tombstone_retention else None

    def prune(self, now: float) -> None:
        """Forget tombstones older than the retention (they are kept oldest first)."""
        if self.tombstone_retention is None:
            self.tombstones.clear()
            return
        horizon = now - self.tombstone_retention
        stones = self.tombstones
        while stones:
            key = next(iter(stones))
            if stones[key].at >= horizon:
                break
            del stones[key]
