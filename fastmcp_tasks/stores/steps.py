"""Durable steps a store keeps with a task: the recorded results a resumed run replays.

An optional capability (`StepStore`; the four built-in stores have it). A tool that
calls `fastmcp_tasks.step(name, fn, ...)` inside a task records each completed step's
result (JSON text) under its name; when the task runs again (recovered after a crash,
taken over by another worker, retried) the steps already recorded are read once and
replayed instead of being run again.

Rules every implementation keeps (checked by `fastmcp_tasks.testing.StepsContract`):

- `save_step` records only for an active task; the first value recorded under a name
  stays (a second `save_step` with that name changes nothing and answers `True`).
- Bounded per task: at most `MAX_STEPS` steps, each value at most `MAX_STEP_BYTES`
  (UTF-8 bytes of its JSON text), all values together at most `MAX_STEPS_BYTES`; past a
  bound `StepLimitExceeded` is raised and nothing is recorded. Checked atomically with
  the insert (two processes saving at once cannot both take the last place).
- `steps` returns them in the order they were recorded.
- Steps stay with the task until it is deleted (expired, purged, deleted by an
  operator) and are removed with it on every path.

Names and values are written by the tool's code through `step()`, never by a client.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from fastmcp_tasks.stores.base import TaskStore

#: Most steps one task records.
MAX_STEPS = 10_000
#: Largest value of one step: UTF-8 bytes of its JSON text.
MAX_STEP_BYTES = 1024 * 1024
#: Largest total of one task's step values.
MAX_STEPS_BYTES = 16 * 1024 * 1024
#: Longest step name (characters).
MAX_STEP_NAME = 200


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One recorded step: its name, its result as JSON text, when it was recorded."""

    name: str
    value_json: str
    at: float

    @property
    def size(self) -> int:
        """Bytes of the stored value (UTF-8)."""
        return len(self.value_json.encode())


@runtime_checkable
class StepStore(TaskStore, Protocol):
    """A store that keeps durable steps with its tasks (module docstring)."""

    async def save_step(self, task_id: str, name: str, value_json: str, at: float) -> bool:
        """Record step `name` of an active task with `value_json`, recorded at `at`.

        `True` when it is recorded now or was already (the first value stays); `False`
        when the task is absent or terminal.

        Raises:
            StepLimitExceeded: the task has `MAX_STEPS` steps already, or the value
                exceeds `MAX_STEP_BYTES`, or the total would exceed `MAX_STEPS_BYTES`.
        """
        ...

    async def steps(self, task_id: str) -> list[StepRecord]:
        """The steps recorded for a live task, in recording order (`[]`: none, or gone)."""
        ...


def stepped(store: TaskStore) -> StepStore | None:
    """`store` when it keeps durable steps, else `None`."""
    return store if isinstance(store, StepStore) else None


def step_limit_error(count: int, total: int, size: int) -> str | None:
    """Why a step of `size` bytes cannot join `count` steps of `total` bytes (`None`: it can)."""
    if size > MAX_STEP_BYTES:
        return f"a step's result is {size} bytes; the most is {MAX_STEP_BYTES}"
    if count >= MAX_STEPS:
        return f"the task has {count} recorded steps; the most is {MAX_STEPS}"
    if total + size > MAX_STEPS_BYTES:
        return f"the task's steps would hold {total + size} bytes; the most is {MAX_STEPS_BYTES}"
    return None


__all__ = [
    "MAX_STEPS",
    "MAX_STEPS_BYTES",
    "MAX_STEP_BYTES",
    "MAX_STEP_NAME",
    "StepRecord",
    "StepStore",
    "step_limit_error",
    "stepped",
]
