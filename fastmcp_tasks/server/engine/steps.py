"""One run's durable steps (`fastmcp_tasks.step`): what was recorded before, what ran now.

`StepRun` lives on the `RunningTask` of one run of a task (`context.RunningTask.steps`).
It reads the task's recorded steps (`stores.steps`) once, at the first `step()` call or,
for a run that is not the task's first (`resume`), as the run begins, into a dict; a
step found there is replayed from it, a new one is recorded through the engine's store
(the `MonitoredStore`, so `store_timeout` and health apply, and the `SealedStore`
under `seal="all"`, so step values are sealed at rest) and added to it. A task with
thousands of recorded steps resumes with one read.

`resume` is what a resumed run shows: when a run that is not the task's first (its
`attempts`, which only the engine and the stores write, is above 1: recovered after a
crash, taken over by another worker, retried) finds recorded steps, its status message
becomes "Resuming after 3 completed steps (last: copy:users)" and its history gets a
`resumed` event (`steps`, `last`).

Names are checked per round of the tool body: the same name twice in one round is a
mistake (`ValueError`); a guard round (`call.run_rounds`) runs the body again, and
replays the steps the round before recorded.
"""

from __future__ import annotations

import logging
from typing import Protocol

import anyio

from fastmcp_tasks.server.engine.history import HistoryWriter
from fastmcp_tasks.server.monitored_store import innermost
from fastmcp_tasks.stores.base import TaskStore
from fastmcp_tasks.stores.steps import StepRecord, StepStore, stepped

logger = logging.getLogger("fastmcp_tasks.steps")

#: Longest step name shown in the resume status message.
SHOWN_NAME = 80

_warned = False


def step_store(store: TaskStore) -> StepStore | None:
    """`store` when it keeps durable steps, else `None` (logged once per process).

    A wrapper (`MonitoredStore`, `SealedStore`) is asked about the store it wraps (a
    runtime protocol check does not see the methods it forwards) and returned itself, so
    the calls stay bounded, reported and sealed (`seal="all"` seals step values).
    """
    global _warned
    inner = innermost(store)
    if stepped(inner) is not None:
        return store  # type: ignore[return-value]
    if not _warned:
        _warned = True
        logger.warning(
            "The task store %s keeps no durable steps (stores.steps): step() runs its "
            "function every time and records nothing, so a resumed task runs every step again",
            type(inner).__name__,
        )
    return None


class StepRun:
    """The recorded steps of one run of a task, read once, and the names used so far."""

    def __init__(self) -> None:
        self._recorded: dict[str, StepRecord] | None = None
        self._seen: set[str] = set()
        self._lock = anyio.Lock()
        self._store: tuple[StepStore | None] | None = None

    def store(self, store: TaskStore) -> StepStore | None:
        """`step_store(store)`, asked once per run (a protocol check is not free)."""
        if self._store is None:
            self._store = (step_store(store),)
        return self._store[0]

    def claim(self, name: str) -> None:
        """Note that this round uses `name`; `ValueError` when it did already."""
        if name in self._seen:
            raise ValueError(
                f"step name {name!r} is used twice in one run of the task; each step "
                "needs its own name (e.g. f'copy:{table}')"
            )
        self._seen.add(name)

    def release(self, name: str) -> None:
        """`name` recorded nothing (its function raised): this round may use it again."""
        self._seen.discard(name)

    def new_round(self) -> None:
        """The tool body runs again (a guard round): its names may be used again."""
        self._seen.clear()

    async def recorded(self, store: StepStore, task_id: str) -> dict[str, StepRecord]:
        """The task's recorded steps by name: read from the store the first time only."""
        if self._recorded is None:
            async with self._lock:
                if self._recorded is None:
                    found = await store.steps(task_id)
                    self._recorded = {record.name: record for record in found}
        return self._recorded

    def add(self, record: StepRecord) -> None:
        """A step this run recorded."""
        if self._recorded is not None:
            self._recorded.setdefault(record.name, record)


class Resumable(Protocol):
    """What `resume` needs of a running task (`context.RunningTask`)."""

    store: TaskStore
    task_id: str
    steps: StepRun
    history: HistoryWriter | None

    async def status(self, message: str | None) -> None: ...


def resume_message(count: int, last: str) -> str:
    """The status message of a run that resumes after `count` recorded steps."""
    shown = last if len(last) <= SHOWN_NAME else last[: SHOWN_NAME - 1] + "…"
    noun = "step" if count == 1 else "steps"
    return f"Resuming after {count} completed {noun} (last: {shown})"


async def resume(running: Resumable, attempt: int) -> None:
    """As run number `attempt` begins: when it is not the first and the task has recorded
    steps, read them now and say so (status message, `resumed` event). Never raises for
    the store: a failed read is left to the first `step()`, which reads again."""
    if attempt <= 1:
        return
    if stepped(innermost(running.store)) is None:
        return
    store: StepStore = running.store  # type: ignore[assignment]
    try:
        recorded = await running.steps.recorded(store, running.task_id)
    except Exception as exc:  # a store error: the first step() reads again
        logger.debug("Reading the steps of task %s failed (%s)", running.task_id, exc)
        return
    if not recorded:
        return
    last = next(reversed(recorded))
    if running.history is not None:
        running.history.note(running.task_id, "resumed", steps=len(recorded), last=last)
    await running.status(resume_message(len(recorded), last))


__all__ = ["StepRun", "resume", "resume_message", "step_store"]
