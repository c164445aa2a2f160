"""Flow control as every store keeps it: gates and fair turns, deduplication, retry waits,
tombstones.

The engine (`server.flow`) decides *what* a task is subject to; this module holds the
rules a store applies atomically, so every store (memory, SQLite, Redis, and any that
follows) means the same thing:

- **Gates.** A task with `record.gate` is created unleased and is handed out by
  `claim_queued` only while fewer than its `gate_limit` tasks of that gate are leased
  and active, across every process sharing the store. Among the gate's waiting tasks
  the next one goes to the principal served least recently in that gate (never
  served first, ties to the oldest waiting task), so one tenant's thousand queued
  tasks do not starve another's one (`plan_claims`). Turns are a per-store counter.
  A gated task that ends puts a `queued` entry `{"app": ..., "gate": ...}` on the
  change feed (its slot is free), so every process waiting on the gate claims at once.
- **Retry waits.** A queued task with `not_before` in the future is not claimable
  yet (`retry_later` sets it; the claim clears it).
- **Deduplication.** `create(record, dedupe_window=w)` with `record.dedupe_key` set
  returns the task holding that key instead of creating one when that task was created
  at most `w` seconds ago and is still active, or ended `completed`/`failed` within
  those `w` seconds (`dedupe_match`). A cancelled task never matches: calling again
  after a cancel starts again. `w = math.inf` (idempotency keys, `server.idempotency`)
  matches the task holding the key for its whole retained lifetime, whatever its
  status, cancelled included: only its removal (retention, purge) frees the key.
- **Phases.** A waiting task (queued behind a gate or a free slot, waiting for a retry)
  shows a status message saying why, for people; whether it waits or runs is its
  `phase` (`stores.phases`), which `retry_later` sets to `retry` and a run's start to
  `running`. A store may begin the runs of the tasks it hands out in `claim_queued`
  (the SQLite, Redis and PostgreSQL stores do in their ungated claim, in the same atomic
  step, with the `message` change a cleared message makes; never a gated task's); the
  engine then writes nothing to start them.
- **Tombstones.** A task removed by retention (`expired`) or an operator purge
  (`purged`) leaves a `Tombstone` (a hash of its id, its owner, when, why) for the
  store's `tombstone_retention` (default 24 h), so `tasks/get` can tell its owner
  "expired" instead of "never existed".
"""

from __future__ import annotations

import hashlib
import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from fastmcp_tasks.stores.base import TaskRecord, TaskStore

#: How long a store keeps a removed task's tombstone by default (seconds).
DEFAULT_TOMBSTONE_RETENTION = 24 * 3600.0

TombstoneReason = Literal["expired", "purged"]

#: The turn key of tasks without an owner (unauthenticated callers count as one).
ANONYMOUS = ""


@dataclass(frozen=True, slots=True)
class Tombstone:
    """What a store remembers of a removed task: enough to say "expired", nothing more."""

    owner: str | None
    at: float
    reason: TombstoneReason


def tombstone_key(task_id: str) -> str:
    """The key a tombstone is kept under: 128 bits of SHA-256 of the task id (hex)."""
    return hashlib.sha256(task_id.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def dedupe_match(record: TaskRecord, now: float, window: float) -> bool:
    """Whether an existing (retained, unexpired) task answers a new call with the same
    dedupe key. `window = math.inf`: always, whatever its status or age."""
    if window == math.inf:
        return True
    if record.created_at < now - window:
        return False  # created before the window: a new call starts new work
    if record.is_active:
        return True
    if record.status == "cancelled" or record.terminal_at is None:
        return False
    return record.terminal_at >= now - window


def claimable(record: TaskRecord, now: float, app: str | None) -> bool:
    """Whether `claim_queued` may consider `record` now (gates aside)."""
    return (
        record.lease_owner is None
        and record.is_active
        and (app is None or record.app == app)
        and (record.not_before is None or record.not_before <= now)
    )


@dataclass(frozen=True, slots=True)
class Candidate:
    """A claimable task as `plan_claims` sees it (a store may load only these fields)."""

    task_id: str
    created_at: float
    owner: str | None = None
    gate: str | None = None
    gate_limit: int | None = None

    @classmethod
    def of(cls, record: TaskRecord) -> Candidate:
        return cls(record.task_id, record.created_at, record.owner, record.gate, record.gate_limit)


def plan_claims(
    candidates: Iterable[Candidate],
    limit: int,
    running: dict[str, int],
    turns: dict[tuple[str, str], int],
    next_turn: int,
) -> tuple[list[str], dict[tuple[str, str], int]]:
    """Which candidates one `claim_queued` takes, in order, and the turns it uses.

    `candidates` are claimable tasks oldest first (ungated ones beyond `limit` are
    never needed); `running` counts the leased active tasks of each gate; `turns`
    maps `(gate, owner or ANONYMOUS)` to the turn that owner was last served in the
    gate (absent: never); `next_turn` is the first unused turn number. Returns the
    chosen ids and the `(gate, owner)` turns to store (each a new, increasing number).
    """
    ungated: deque[Candidate] = deque()
    waiting: dict[str, dict[str, deque[Candidate]]] = {}
    caps: dict[str, int] = {}
    for candidate in candidates:
        gate = candidate.gate
        if gate is None:
            ungated.append(candidate)
            continue
        caps.setdefault(gate, candidate.gate_limit or 1)
        owner = candidate.owner if candidate.owner is not None else ANONYMOUS
        waiting.setdefault(gate, {}).setdefault(owner, deque()).append(candidate)
    free = {gate: caps[gate] - running.get(gate, 0) for gate in waiting}
    used: dict[tuple[str, str], int] = {}
    chosen: list[str] = []
    while len(chosen) < limit:
        heads = [_fair_head(gate, owners, turns, used) for gate, owners in waiting.items()]
        picks = [h for h in heads if h is not None and free[h[0]] > 0]
        best = min(picks, key=lambda h: h[2].created_at, default=None)
        if ungated and (best is None or ungated[0].created_at <= best[2].created_at):
            chosen.append(ungated.popleft().task_id)
            continue
        if best is None:
            break
        gate, owner, candidate = best
        waiting[gate][owner].popleft()
        if not waiting[gate][owner]:
            del waiting[gate][owner]
        free[gate] -= 1
        used[(gate, owner)] = next_turn
        next_turn += 1
        chosen.append(candidate.task_id)
    return chosen, used


def _fair_head(
    gate: str,
    owners: dict[str, deque[Candidate]],
    turns: dict[tuple[str, str], int],
    used: dict[tuple[str, str], int],
) -> tuple[str, str, Candidate] | None:
    """The gate's next task: the least recently served owner's oldest (ties: oldest)."""
    best: tuple[int, float, str] | None = None
    for owner, queue in owners.items():
        if not queue:
            continue
        turn = used.get((gate, owner), turns.get((gate, owner), -1))
        key = (turn, queue[0].created_at, owner)
        if best is None or key < best:
            best = key
    if best is None:
        return None
    owner = best[2]
    return gate, owner, owners[owner][0]


def gates_of(records: Sequence[TaskRecord]) -> dict[str, int]:
    """Leased active tasks per gate among `records` (the `running` of `plan_claims`)."""
    running: dict[str, int] = {}
    for record in records:
        if record.gate is not None and record.lease_owner is not None and record.is_active:
            running[record.gate] = running.get(record.gate, 0) + 1
    return running


@runtime_checkable
class FlowControlStore(TaskStore, Protocol):
    """A store that keeps flow control (`stores.flow`): gates, retry waits, dedupe, tombstones.

    The built-in stores set `flow_control = True`. A tool with `concurrency`, `dedupe`
    or `retry` options needs one; on any other store its calls are refused with a
    clear error instead of running without the guarantee.
    """

    flow_control: bool

    async def retry_later(
        self, task_id: str, owner: str, not_before: float, status_message: str | None
    ) -> TaskRecord | None:
        """Give a task held by `owner` back to the queue for a retry after a failed attempt.

        Compare-and-set: refused (`None`) when the task is absent, terminal, leased to
        someone else, or a cancel was requested. Otherwise the lease is dropped,
        `not_before` set, `retries` counted up by one, `phase` set to `retry` and
        `status_message` shown; a
        parked task returns to `working` with its requests dropped. The feed carries
        the message change and a `queued` entry with `{"app": ..., "not_before": ...}`.
        """
        ...

    async def tombstone(self, task_id: str) -> Tombstone | None:
        """The `Tombstone` of a task removed within `tombstone_retention`
        (expired or purged), or `None`: unknown, still live, or forgotten."""
        ...


def keeps_flow_control(store: TaskStore) -> bool:
    """Whether `store` keeps flow control (`FlowControlStore`)."""
    return bool(getattr(store, "flow_control", False))


async def tombstone_of(store: TaskStore, task_id: str) -> Tombstone | None:
    """The `Tombstone` a removed task left, or `None` (unknown, or a store
    that keeps none: see `FlowControlStore`)."""
    look = getattr(store, "tombstone", None) if keeps_flow_control(store) else None
    return None if look is None else await look(task_id)
