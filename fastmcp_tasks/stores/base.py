"""The store contract: the task record, the allowed transitions, the `TaskStore` protocol.

The store is the spine of the package. Request handlers and the runner never
talk to each other directly: handlers read and write the store, the runner
writes outcomes to it and learns of cancel requests and input answers from its
change feed. That keeps a front end and a worker in different processes (SQLite,
Redis) working exactly like one process (memory).

Rules every implementation keeps, checked by the shared contract tests:

- `create` makes the task readable by `get` before it returns (C10).
- `get` is O(1) in the number of retained tasks and never returns an expired task.
- Terminal states are immutable: `transition` is a compare-and-set that refuses
  to move a task out of `completed`, `failed` or `cancelled` (C21).
- `lastUpdatedAt` moves only when the task changes (status, message, inputs).
- A terminal task is kept for its `retention_ms`, then `purge_expired` drops it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from fastmcp_tasks.errors import TaskLimitExceeded
from fastmcp_tasks.stores.text import encode_json as encode_json
from fastmcp_tasks.stores.text import encode_result as encode_result
from fastmcp_tasks.stores.text import storable_text as storable_text
from fastmcp_tasks.wire.names import ACTIVE_STATUSES, TERMINAL_STATUSES, TaskStatus

#: The edges of the SEP-2663 state machine (C21).
ALLOWED_TRANSITIONS: dict[str, frozenset[str]] = {
    "working": frozenset({"input_required", "completed", "failed", "cancelled"}),
    "input_required": frozenset({"working", "completed", "failed", "cancelled"}),
    "completed": frozenset(),
    "failed": frozenset(),
    "cancelled": frozenset(),
}

#: `queued`: a task became claimable by any worker of its application (created without a
#: lease, or requeued); `details` carry `{"app": ...}`. Workers wake on it instead of polling.
ChangeKind = Literal["status", "message", "inputs", "cancel_requested", "answered", "queued"]

#: Where a task's run stands (`TaskRecord.phase`; the rules are `stores.phases`).
TaskPhase = Literal["queued", "retry", "restart", "running"]


class _Unchanged:
    """Sentinel type: leave a field as it is."""

    _instance: _Unchanged | None = None

    def __new__(cls) -> _Unchanged:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNCHANGED"


#: Pass as `status_message` to keep the current message.
UNCHANGED = _Unchanged()


@dataclass(slots=True)
class TaskRecord:
    """One task as a store keeps it. Times are epoch seconds (floats).

    Records returned by a store are snapshots for reading: callers never mutate
    them; every change goes through the store's methods. A completed result is
    kept as compact JSON text (`result_json`), the form every store persists:
    it is encoded once when the task ends and costs a fraction of the dict.

    `phase` and `attempts` are written by the engine and the stores only, never from
    text a tool or a client controls (`stores.phases` has the rules). `phase`: whether
    the task waits for a run (`queued` for its first, `retry` after a failed attempt,
    `restart` after an interrupted one) or a run has begun (`running`, which a parked
    task is too); `None` on a record written before phases existed (an unleased one
    waits, a leased one counts as started). `attempts`: how many runs of the tool body
    began, counted as the phase becomes `running` just before the body starts (at
    creation for a task that starts at once, by `start_run`, or by the ungated claim of
    a durable built-in store: SQLite, Redis, PostgreSQL).
    Only a process that dies or stops in that instant leaves a run counted whose body
    never began; a claim, a recovery or a requeue counts none.
    """

    task_id: str
    tool: str
    status: TaskStatus
    created_at: float
    updated_at: float
    arguments: dict[str, Any] | None = None
    status_message: str | None = None
    poll_interval_ms: int | None = None
    retention_ms: int | None = None
    terminal_at: float | None = None
    result_json: str | None = None
    error: dict[str, Any] | None = None
    input_requests: dict[str, Any] | None = None
    answers: dict[str, Any] | None = None
    cancel_requested: bool = False
    owner: str | None = None
    context: dict[str, Any] | None = None
    attempts: int = 0
    lease_owner: str | None = None
    lease_expires: float | None = None
    #: The application the task belongs to (by default the FastMCP server's name): on a
    #: store shared by several applications a process claims and recovers only its own.
    app: str | None = None
    #: Flow control (`stores.flow`): the concurrency group a task of a tool with
    #: `task_options(concurrency=N)` waits in (`gate_limit` = N leased at once, across
    #: every process), the earliest time a queued task may be claimed (a retry's
    #: backoff), how many times it was re-run after a failed attempt, and the key two
    #: identical calls share under `task_options(dedupe=...)`.
    gate: str | None = None
    gate_limit: int | None = None
    not_before: float | None = None
    retries: int = 0
    dedupe_key: str | None = None
    phase: TaskPhase | None = None

    @property
    def result(self) -> dict[str, Any] | None:
        """The completed `CallToolResult`, decoded from its stored JSON text."""
        return None if self.result_json is None else json.loads(self.result_json)

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE_STATUSES

    @property
    def expires_at(self) -> float | None:
        """When a terminal task may be purged; `None` while active or kept forever."""
        if self.terminal_at is None or self.retention_ms is None:
            return None
        return self.terminal_at + self.retention_ms / 1000


@dataclass(frozen=True, slots=True)
class ActiveCaps:
    """Caps on active tasks that a store checks atomically with `create` (`None`: none).

    `total` counts every active task in the store; `per_owner` counts the active
    tasks with the new record's `owner` and applies only to records that have one.
    A store refuses with `TaskLimitExceeded` naming `TOTAL` or `PER_OWNER`.
    """

    total: int | None = None
    per_owner: int | None = None

    TOTAL = "max_active_tasks"
    PER_OWNER = "max_active_per_principal"

    def refusal(self, active: int, owned: int, owner: str | None) -> TaskLimitExceeded | None:
        """The error for a store holding `active` active tasks, `owned` of them `owner`'s."""
        if self.total is not None and active >= self.total:
            return TaskLimitExceeded(self.TOTAL, self.total)
        if owner is not None and self.per_owner is not None and owned >= self.per_owner:
            return TaskLimitExceeded(self.PER_OWNER, self.per_owner)
        return None


#: A kind no change has: a subscriber that adds it to its `kinds` takes a `queued` change
#: with an empty `task_id` as "new tasks were queued" (a store may announce creations so,
#: and deliver their rows later; a worker's runner only runs a claim round on either).
NEW_TASKS_KIND = "new_tasks"


@dataclass(frozen=True, slots=True)
class TaskChange:
    """One entry of a store's change feed."""

    task_id: str
    kind: ChangeKind
    status: TaskStatus | None = None
    details: dict[str, Any] = field(default_factory=dict)


async def active_leases(store: TaskStore, app: str | None) -> list[TaskRecord]:
    """The active tasks of `app` as recovery scans them: lease fields, not payloads.

    A store may offer `active_leases(app=...)` (the built-in ones do: a narrow query
    returning records with `task_id`, `tool`, `status`, `status_message`, `attempts`,
    `phase`, `app`, `lease_owner`, `lease_expires` and the timestamps set and the payload fields
    (arguments, context, result, input requests and answers) left `None`);
    any other store is read with `active_tasks()` and filtered here.
    """
    narrow = getattr(store, "active_leases", None)
    if narrow is not None:
        found: list[TaskRecord] = await narrow(app=app)
        return found
    return [r for r in await store.active_tasks() if app is None or r.app == app]


async def get_many(store: TaskStore, task_ids: list[str]) -> dict[str, TaskRecord]:
    """The live tasks among `task_ids`, by id, in one round trip where the store can.

    A store may offer `get_many(task_ids)` (all three built-in stores do: a dict
    lookup, one `IN (...)` query, one Redis pipeline); any other store is read one
    `get` at a time. `subscriptions/listen` reads its acknowledged and changed
    tasks this way.
    """
    batch = getattr(store, "get_many", None)
    if batch is not None:
        found: dict[str, TaskRecord] = await batch(task_ids)
        return found
    records: dict[str, TaskRecord] = {}
    for task_id in task_ids:
        record = await store.get(task_id)
        if record is not None:
            records[task_id] = record
    return records


@runtime_checkable
class TaskStore(Protocol):
    """What the extension needs from a backend. Every method is safe to call concurrently."""

    #: The URL scheme this store is selected by (`memory`, `sqlite`, `redis`).
    scheme: str

    #: Whether tasks outlive this process (another process or a restart can pick them up).
    durable: bool

    async def open(self) -> None:
        """Acquire connections and background resources (called from the server lifespan)."""
        ...

    async def close(self) -> None:
        """Release everything `open` acquired. Idempotent."""
        ...

    async def create(
        self,
        record: TaskRecord,
        *,
        caps: ActiveCaps | None = None,
        dedupe_window: float | None = None,
    ) -> TaskRecord | None:
        """Persist a new task so `get` finds it on return; `None` once it is stored.

        `caps` are checked atomically with the insert (no two concurrent creates,
        in any process, both take the last place). With `dedupe_window` (seconds)
        and `record.dedupe_key` set, the task already holding that key is returned
        instead, and nothing is created, when `stores.flow.dedupe_match` says it
        answers the call; otherwise the key moves to the new task. Atomic: of two
        concurrent creates with one key, in any processes, exactly one creates.
        `dedupe_window=math.inf` matches the holder for as long as it is retained,
        whatever its status (cancelled included).

        Raises:
            TaskLimitExceeded: `max_tasks` or one of `caps` refuses the task;
                nothing was stored.
        """
        ...

    async def get(self, task_id: str) -> TaskRecord | None:
        """The task, or `None` when it never existed, has expired or was purged."""
        ...

    async def set_status_message(self, task_id: str, message: str | None) -> TaskRecord | None:
        """Change `statusMessage` of an active task; `None` when absent or terminal.

        Setting the message it already has is not a change (no `lastUpdatedAt` bump).
        """
        ...

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
        """Compare-and-set the status; the new record, or `None` when refused.

        Refused when the task is absent, when its current status is not in
        `expect` (default: any active status), or when the state machine has no
        such edge. A terminal task is never changed. `status_message` replaces the
        message (`None` clears it, `UNCHANGED` keeps it); `result`/`error` are
        stored with `completed`/`failed`.
        """
        ...

    async def request_input(
        self, task_id: str, requests: dict[str, Any], *, status_message: str | None = None
    ) -> TaskRecord | None:
        """Add outstanding input requests and park the task in `input_required`.

        Keys must be new for the task (the caller mints them). `None` when the
        task is absent or not active.
        """
        ...

    async def answer_input(self, task_id: str, responses: dict[str, Any]) -> dict[str, Any] | None:
        """Accept answers for outstanding keys; return the accepted subset.

        Keys that are not outstanding are ignored (C35). Accepted keys leave
        `input_requests` and wait in `answers` until `take_answers`. When no
        request remains outstanding the task goes back to `working`. `None`
        when the task is absent.
        """
        ...

    async def take_answers(self, task_id: str, keys: frozenset[str]) -> dict[str, Any]:
        """Remove and return the stored answers among `keys` (for the waiting run)."""
        ...

    async def withdraw_input(self, task_id: str, keys: frozenset[str]) -> TaskRecord | None:
        """Drop outstanding requests that the run no longer waits for (superseded)."""
        ...

    async def request_cancel(self, task_id: str) -> TaskRecord | None:
        """Record a cancel request for an active task and announce it on the feed.

        A terminal task is returned unchanged (cancel is an idempotent ack).
        `None` when the task is absent.
        """
        ...

    def changes(
        self, task_ids: frozenset[str] | None = None, kinds: frozenset[str] | None = None
    ) -> AbstractAsyncContextManager[AsyncIterator[TaskChange]]:
        """Subscribe to the change feed: the changes of these kinds to these tasks (default: all).

        Changes made after the context is entered are delivered in order; the
        subscription never blocks the writer (a slow reader only delays itself). Only a
        subscriber whose `kinds` include `NEW_TASKS_KIND` may also get `queued` changes
        without a task id, ahead of the rows they announce.
        """
        ...

    async def purge_expired(self, now: float) -> int:
        """Delete terminal tasks whose retention has run out; return how many."""
        ...

    async def claim(
        self, task_id: str, owner: str, until: float, *, expect_owner: str | None = None
    ) -> TaskRecord | None:
        """Take the run lease of an active task for `owner` until `until`.

        Granted when the task is active and its lease is free, expired, already
        `owner`'s, or held by `expect_owner` (a recovery taking over a dead
        owner's task). `None` when refused: absent, terminal, or leased to another.
        Neither `phase` nor `attempts` changes: a lease is not a run.
        """
        ...

    async def renew(self, owner: str, task_ids: frozenset[str], until: float) -> None:
        """Extend `owner`'s leases on these tasks (the heartbeat of a live runner)."""
        ...

    async def active_tasks(self) -> list[TaskRecord]:
        """Every task in `working` or `input_required` (operators; see `active_leases`)."""
        ...

    async def requeue(self, task_id: str, owner: str) -> TaskRecord | None:
        """Give an active task held by `owner` back to the queue (`lease_owner` unset).

        A task whose run had begun (`phase` `running`, or `None`) waits to `restart`;
        a waiting phase stays. `None` when the task is absent, terminal or leased to
        someone else.
        """
        ...

    async def claim_queued(
        self, owner: str, until: float, limit: int, *, app: str | None = None
    ) -> list[TaskRecord]:
        """Lease up to `limit` tasks nobody has taken yet (`lease_owner` unset), oldest first.

        Front ends that run nothing themselves (`concurrency=0`) create tasks
        unleased; worker processes take them here. Each task is handed to exactly
        one caller; its `not_before` is cleared (a store may also begin its run, as
        `start_run` does: the ungated claim of SQLite, Redis and PostgreSQL, `stores.phases`).
        With `app`, only tasks whose `record.app` equals it are taken (`None`: any
        application's). A task whose `not_before` is still ahead is skipped; a gated
        task is taken only while its gate has a free slot, in the gate's fair order,
        and the turn it used is recorded (`stores.flow.plan_claims`), all in the same
        atomic step as the lease.
        """
        ...
