"""Where a task's run stands, as a field only the engine and the stores write (`phase`).

Recovery must know whether a task's run had begun: a task that never started goes
back to the queue, a started one of a tool that is not `idempotentHint=True` fails
rather than run twice. That is never read from text a tool can write (its status
message): it is `TaskRecord.phase`, with `TaskRecord.attempts` counting the runs.

- `queued`: waits for its first run (a free slot of this process, a gate, a worker).
- `retry`: waits to run again after a failed attempt (`retry_later`; `Retry`).
- `restart`: waits to run again after a run that was given up (`requeue` of a task
  whose run had begun: recovery of an idempotent tool, a worker shutting down).
- `running`: its run has begun (it may be parked in `input_required`).
- `None`: written before phases existed. An unleased task waits (nobody ever ran an
  unleased task); a leased one counts as started, so a crash fails it rather than
  running it twice (`has_begun`).

Who writes it: creation (`running` for a task this process starts at once, with
`attempts` 1; otherwise `queued`), `start_run` (the engine, just before the tool body
of a task that waited: `running`, `attempts` + 1, the status message it starts with),
`retry_later` (`retry`), `requeue` (`running` becomes `restart`). The ungated
`claim_queued` of every durable built-in store (SQLite, Redis, PostgreSQL) begins the
run of each task it hands out in the claim's own atomic step (transaction, script or
statement), as `start_run` would (so a worker writes nothing to start a task); a task
whose worker dies between that claim and the tool body counts as started. A gated
task's claim never begins its run (the engine's `start_run` does), nor does the memory
store's claim. A `claim` (a recovery taking a lease) changes neither field.

`start_run` is a method a store may offer; the four built-in stores do (memory,
SQLite, Redis, PostgreSQL, each atomically: compare-and-set on the lease). A store
without it gets `set_status_message` instead and keeps no phase: its leased tasks
count as started.
"""

from __future__ import annotations

from typing import Any

from fastmcp_tasks.stores.base import TaskPhase, TaskRecord, TaskStore

QUEUED: TaskPhase = "queued"
RETRY: TaskPhase = "retry"
RESTART: TaskPhase = "restart"
RUNNING: TaskPhase = "running"
#: The phases of a task that waits for a run.
WAITING_PHASES: frozenset[str] = frozenset({QUEUED, RETRY, RESTART})


def has_begun(record: TaskRecord) -> bool:
    """Whether the task's run has begun: `running`, or no phase and leased (a record
    written before phases: it may have been running, so it counts as started)."""
    if record.phase is None:
        return record.lease_owner is not None
    return record.phase == RUNNING


def start_message(record: TaskRecord) -> str | None:
    """The status message a waiting task's run starts with: a restart keeps the one
    recovery wrote (it says which attempt this is); any other wait's is cleared."""
    return record.status_message if record.phase == RESTART else None


async def start_run(
    store: TaskStore, task_id: str, owner: str, status_message: str | None
) -> TaskRecord | None:
    """Begin the run of a task leased to `owner` that waits: `phase` `running`,
    `attempts` + 1, `status_message` shown (a `message` change when it changes).

    The record, or `None` when the task is absent, not active, or leased to someone
    else (the run must not start). A task already `running` under `owner` is returned
    as it is (a resent call counts once). A store without `start_run` only sets the
    message (see the module doc).
    """
    begin: Any = getattr(store, "start_run", None)
    if begin is None:
        return await store.set_status_message(task_id, status_message)
    started: TaskRecord | None = await begin(task_id, owner, status_message)
    return started


__all__ = [
    "QUEUED",
    "RESTART",
    "RETRY",
    "RUNNING",
    "WAITING_PHASES",
    "has_begun",
    "start_message",
    "start_run",
]
