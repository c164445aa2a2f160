"""Status changes of the Redis store, mixed into `RedisTaskStore`.

`transition` and `settle` (`stores.settling`) run the `transition` script
(`redis.flow_scripts`); `settle` asks it to answer 1 instead of the task hash, so the
task's arguments and result are neither sent back nor decoded. Both go in the store's
batches (`redis.batching`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastmcp_tasks.stores import rules
from fastmcp_tasks.stores.base import (
    UNCHANGED,
    TaskRecord,
    _Unchanged,
    encode_result,
    storable_text,
)
from fastmcp_tasks.stores.redis.keys import RedisKeys, dumps
from fastmcp_tasks.wire.names import TERMINAL_STATUSES, TaskStatus


class RedisTransitions:
    """`transition` and `settle` of `RedisTaskStore` (module doc)."""

    if TYPE_CHECKING:
        keys: RedisKeys

        async def _record(self, name: str, task_id: str, *args: Any) -> TaskRecord | None: ...

        async def _task_script(self, name: str, task_id: str, *args: Any) -> Any: ...

        def _tomb_ms(self) -> str: ...

        def _tomb(self, task_id: str) -> str: ...

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
        args = self._transition_args(task_id, status, expect, status_message, result, error)
        return None if args is None else await self._record("transition", task_id, *args, "0")

    async def settle(
        self,
        task_id: str,
        status: TaskStatus,
        *,
        expect: frozenset[str] | None = None,
        status_message: str | _Unchanged | None = UNCHANGED,
        result: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
    ) -> bool:
        """`transition`, reading no record back (`stores.settling`)."""
        args = self._transition_args(task_id, status, expect, status_message, result, error)
        return args is not None and bool(await self._task_script("transition", task_id, *args, "1"))

    def _transition_args(
        self,
        task_id: str,
        status: TaskStatus,
        expect: frozenset[str] | None,
        status_message: str | _Unchanged | None,
        result: dict[str, Any] | None,
        error: dict[str, Any] | None,
    ) -> list[str] | None:
        """The `transition` script's arguments after the task id (`None`: refused)."""
        sources = rules.transition_sources(status, expect)
        if not sources:
            return None
        if isinstance(status_message, _Unchanged):
            mode, message = "keep", ""
        else:
            text = storable_text(status_message)
            mode, message = ("clear", "") if text is None else ("set", text)
        kept = result if status == "completed" else None
        failure = error if status == "failed" else None
        terminal = status in TERMINAL_STATUSES
        return [
            status,
            " ".join(sources),
            mode,
            message,
            "1" if terminal else "0",
            "0" if kept is None else "1",
            "" if kept is None else encode_result(kept),
            "0" if failure is None else "1",
            "" if failure is None else dumps(failure),
            self.keys.owner_active_base,
            self._tomb(task_id) if terminal else "",
            self._tomb_ms(),
        ]


__all__ = ["RedisTransitions"]
