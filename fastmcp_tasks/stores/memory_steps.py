"""The in-memory store's durable steps (`stores.steps`): a list per task beside it.

A task's steps go when the task does (`MemoryOperations._forget_history`, called
wherever `MemoryTaskStore` removes a task, forgets them too).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastmcp_tasks.errors import StepLimitExceeded
from fastmcp_tasks.stores.base import TaskRecord
from fastmcp_tasks.stores.steps import StepRecord, step_limit_error


class MemorySteps:
    """`StepStore` over a `MemoryTaskStore`'s dicts."""

    if TYPE_CHECKING:

        def _live(self, task_id: str) -> TaskRecord | None: ...

    def _steps_init(self) -> None:
        self._steps: dict[str, dict[str, StepRecord]] = {}
        self._step_bytes: dict[str, int] = {}

    def _forget_steps(self, task_id: str) -> None:
        self._steps.pop(task_id, None)
        self._step_bytes.pop(task_id, None)

    async def save_step(self, task_id: str, name: str, value_json: str, at: float) -> bool:
        record = self._live(task_id)
        if record is None or not record.is_active:
            return False
        steps = self._steps.setdefault(task_id, {})
        if name in steps:
            return True
        step = StepRecord(name, value_json, at)
        total = self._step_bytes.get(task_id, 0)
        refusal = step_limit_error(len(steps), total, step.size)
        if refusal is not None:
            raise StepLimitExceeded(refusal)
        steps[name] = step
        self._step_bytes[task_id] = total + step.size
        return True

    async def steps(self, task_id: str) -> list[StepRecord]:
        if self._live(task_id) is None:
            return []
        return list(self._steps.get(task_id, {}).values())
