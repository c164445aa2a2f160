"""What a store keeps for operators beside its tasks: histories, workers, pauses, audit.

An optional capability (`OperableTaskStore`; all four built-in stores have it):

- **A task's history**: `TaskEvent`s the engine and the operator actions append
  (`add_events`, batched) and `events` reads, oldest first. Kept with the task and
  removed with it (expired or purged); an event for an absent task is not stored. At
  most `MAX_EVENTS` per task: beyond `MAX_EVENTS - 1` only a `finished` event is still
  stored, so a chatty task keeps its beginning and its end.
- **Workers**: every process that runs tasks upserts its `WorkerInfo` (`beat`) every
  `interval` seconds; `workers` lists them, the ones gone silent included, until
  `FORGET_AFTER` seconds after they were last seen.
- **Pauses**: `pause` stops a tool of an application from starting new runs in every
  process. A process that takes a task of a paused tool hands it back with
  `hold_paused` (atomic with the pause still being there, so a task is never held after
  `resume`); `resume` lifts the pause and makes every held task claimable at once,
  replacing the held task's "Paused" message with `RESUMED_MESSAGE` (a `message`
  change), so no stale pause message outlives the pause whichever way the run begins.
  A held task waits unleased with `not_before = PAUSED_UNTIL`.
- **An audit log** of operator actions (`add_audit`, `audit`), the newest
  `MAX_AUDIT` kept.
- **Purging a chosen set**: `delete_finished(ids)` removes those of the tasks that are
  terminal (the confirmation of a bulk purge acts on exactly the previewed tasks).

Every value here is written by the engine or an operator action, never read back from
text a tool or a client controls.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from fastmcp_tasks.stores.base import TaskRecord, TaskStore

#: Most events a task's history keeps (the first `MAX_EVENTS - 1` and a `finished`).
MAX_EVENTS = 100
#: Most audit entries a store keeps (older ones are dropped as new ones come).
MAX_AUDIT = 10_000
#: Seconds after its last heartbeat that a worker is no longer listed.
FORGET_AFTER = 3600.0
#: `not_before` of a task held because its tool is paused (9999-12-31, finite for JSON).
PAUSED_UNTIL = 253_402_300_799.0
#: The status message `resume` gives each task it releases (replacing the pause's).
RESUMED_MESSAGE = "Queued: resumed by an operator"

EventKind = Literal[
    "created",  # details: app, owner (principal key or null), by (creating process), queued
    "taken",  # a process leased it to run: worker
    "started",  # the tool body began: worker, attempt
    "resumed",  # a later run found recorded steps (`stores.steps`): steps (count), last (name)
    "message",  # a status message (coalesced): message
    "input_requested",  # keys
    "input_answered",  # keys
    "retry_scheduled",  # attempt, at (when due), reason
    "requeued",  # given back to the queue: worker, reason
    "recovered",  # taken over from a process that stopped renewing: worker, from
    "paused",  # held because its tool is paused: worker
    "cancel_requested",  # by: "client" | "operator", who
    "finished",  # outcome: completed | error | failed | cancelled, message
]


@dataclass(frozen=True, slots=True)
class TaskEvent:
    """One entry of a task's history. `details` are JSON values (see `EventKind`)."""

    at: float
    kind: str
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"at": self.at, "kind": self.kind, **self.details}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TaskEvent:
        rest = {k: v for k, v in data.items() if k not in ("at", "kind")}
        return cls(float(data["at"]), str(data["kind"]), rest)


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """A process that runs tasks, as its last heartbeat described it."""

    worker_id: str  # its lease owner id (`host:pid:token`)
    app: str | None
    host: str
    pid: int
    version: str
    concurrency: int
    tools: tuple[str, ...]
    running: int
    started_at: float
    last_seen: float
    interval: float  # seconds between its heartbeats
    stopped: bool = False  # it said goodbye (a clean shutdown)

    def gone_after(self) -> float:
        """When it counts as gone if no heartbeat comes: three missed beats (at least 15 s)."""
        return self.last_seen + max(3 * self.interval, 15.0)

    def alive(self, now: float) -> bool:
        return not self.stopped and now <= self.gone_after()

    def to_json(self) -> dict[str, Any]:
        return {
            "worker_id": self.worker_id,
            "app": self.app,
            "host": self.host,
            "pid": self.pid,
            "version": self.version,
            "concurrency": self.concurrency,
            "tools": list(self.tools),
            "running": self.running,
            "started_at": self.started_at,
            "last_seen": self.last_seen,
            "interval": self.interval,
            "stopped": self.stopped,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> WorkerInfo:
        return cls(
            str(data["worker_id"]),
            None if data.get("app") is None else str(data["app"]),
            str(data["host"]),
            int(data["pid"]),
            str(data["version"]),
            int(data["concurrency"]),
            tuple(str(t) for t in data.get("tools") or ()),
            int(data["running"]),
            float(data["started_at"]),
            float(data["last_seen"]),
            float(data["interval"]),
            bool(data.get("stopped", False)),
        )


@dataclass(frozen=True, slots=True)
class Pause:
    """A paused tool of an application (`app` "" for tasks created without one)."""

    app: str
    tool: str
    since: float
    by: str

    def to_json(self) -> dict[str, Any]:
        return {"app": self.app, "tool": self.tool, "since": self.since, "by": self.by}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Pause:
        return cls(str(data["app"]), str(data["tool"]), float(data["since"]), str(data["by"]))


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One operator action: who (a dashboard token's label, or "cli"), what, on how many."""

    at: float
    actor: str
    action: str  # cancel | purge | pause | resume
    count: int
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "actor": self.actor,
            "action": self.action,
            "count": self.count,
            "details": self.details,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AuditEntry:
        return cls(
            float(data["at"]),
            str(data["actor"]),
            str(data["action"]),
            int(data["count"]),
            dict(data.get("details") or {}),
        )


def pause_key(app: str | None) -> str:
    """The application a pause names for a task of `app` (`None`: "")."""
    return app or ""


def keeps_event(kind: str, stored: int) -> bool:
    """Whether a history already holding `stored` events takes one more of `kind`."""
    return stored < MAX_EVENTS - 1 or (kind == "finished" and stored < MAX_EVENTS)


@runtime_checkable
class OperableTaskStore(TaskStore, Protocol):
    """A store that keeps histories, workers, pauses and an audit log (module docstring)."""

    async def add_events(self, events: Sequence[tuple[str, TaskEvent]]) -> None:
        """Append `(task_id, event)`s in order; absent tasks' events are dropped, and a
        history holding `MAX_EVENTS - 1` takes only a `finished` (`keeps_event`)."""
        ...

    async def events(self, task_id: str) -> list[TaskEvent]:
        """The history of a live task, oldest first (`[]`: none, or the task is gone)."""
        ...

    async def beat(self, worker: WorkerInfo) -> None:
        """Upsert `worker` by `worker_id`; forget workers not seen for `FORGET_AFTER`."""
        ...

    async def workers(self) -> list[WorkerInfo]:
        """Every worker seen within `FORGET_AFTER`, in no particular order."""
        ...

    async def pause(self, pause: Pause) -> bool:
        """Pause `pause.tool` of `pause.app`; `False` when it already was (kept as it was)."""
        ...

    async def resume(self, app: str, tool: str) -> int | None:
        """Lift a pause and make its held tasks claimable now; how many were held, or
        `None` when the tool was not paused.

        Atomic with the pause's removal, each released task gets `status_message =
        RESUMED_MESSAGE` and a fresh `updated_at` (a `message` change), then a `queued`
        change for its app. The message is written, never inferred from the old text.
        """
        ...

    async def paused(self) -> list[Pause]:
        """Every pause in place."""
        ...

    async def hold_paused(
        self, task_id: str, owner: str, status_message: str | None
    ) -> TaskRecord | None:
        """Give back a task of a paused tool, held by `owner`, until `resume`.

        Compare-and-set: refused (`None`) when its tool is not paused (for
        `pause_key(record.app)`), the task is absent, terminal, leased to another, or a
        cancel was requested. Otherwise: unleased, `not_before = PAUSED_UNTIL`,
        `status_message` shown, a parked task stays parked. A task is held before its tool
        body starts, so a run its claim began (`phase` running) is taken back, one
        attempt less (`rules.hold_back`: `queued` again for a first run, else `restart`);
        a task without a phase waits to restart. The feed carries a `message` change.
        """
        ...

    async def add_audit(self, entry: AuditEntry) -> None:
        """Append an audit entry (the newest `MAX_AUDIT` are kept)."""
        ...

    async def audit(self, limit: int = 100) -> list[AuditEntry]:
        """The newest `limit` audit entries, newest first."""
        ...

    async def delete_finished(self, task_ids: Sequence[str]) -> int:
        """Delete those of `task_ids` that are terminal (as `purge_finished` does: a
        tombstone each, their histories too); how many were deleted."""
        ...


async def history_of(store: TaskStore, task_id: str) -> list[TaskEvent] | None:
    """A task's history in time order (`None`: the store keeps none). Each process writes
    its own batches, so a store holds them in the order they arrived (a front end's
    `created` may land after a worker's `started`); readers sort by `at` here."""
    ops = operable(store)
    if ops is None:
        return None
    return sorted(await ops.events(task_id), key=lambda event: event.at)


def operable(store: TaskStore) -> OperableTaskStore | None:
    """`store` when it keeps the operator records, else `None`."""
    return store if isinstance(store, OperableTaskStore) else None


__all__ = [
    "FORGET_AFTER",
    "MAX_AUDIT",
    "MAX_EVENTS",
    "PAUSED_UNTIL",
    "RESUMED_MESSAGE",
    "AuditEntry",
    "EventKind",
    "OperableTaskStore",
    "Pause",
    "TaskEvent",
    "WorkerInfo",
    "history_of",
    "keeps_event",
    "operable",
    "pause_key",
]
