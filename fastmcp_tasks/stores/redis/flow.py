"""Flow control of the Redis store (`stores.flow`), mixed into `RedisTaskStore`.

This module owns the Python side of what `redis.flow_scripts` keeps atomically:
`create` (caps, the dedupe check and where a new task waits, one `create` script
call), `retry_later` (one `retry_later` call) and `tombstone` (one pipeline: the task
hash's liveness and the tombstone). Gates and retry waits need nothing here: the
scripts that create, lease, give back and end tasks keep them.

Tombstones. Redis evicts a finished task's hash itself (its TTL), so a task that
ends with a retention gets its tombstone at once, dated to its expiry (`reason`
`expired`, kept until `tombstone_retention` after that); `tombstone()` shows it only
once the task is gone and that date has passed. `purge_finished` rewrites it
(`purged`, dated to the purge). A task kept forever gets one only when purged.

Dedupe keys. `{P}:dedupe:<key>` points at the task holding the key; it gets the
task's retention as TTL when the task ends, and is deleted when the task is purged,
so it never outlives its task.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, TypeVar

from fastmcp_tasks.errors import DuplicateTask, TaskLimitExceeded
from fastmcp_tasks.stores.base import ActiveCaps, TaskRecord, storable_text
from fastmcp_tasks.stores.flow import Tombstone, tombstone_key
from fastmcp_tasks.stores.redis.keys import decode_task, dumps, encode_task, pairs

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from fastmcp_tasks.stores.redis.keys import RedisKeys

T = TypeVar("T")

_REASONS = ("expired", "purged")


def route(record: TaskRecord, now: float) -> str:
    """Where `create` puts a new task (the `create` script's route argument)."""
    if not record.is_active:
        return ""
    if record.lease_owner is not None:
        return "" if record.gate is None else "r"  # leased: holds a slot of its gate
    if record.gate is not None or (record.not_before is not None and record.not_before > now):
        return "f"  # to its gate or the delayed set
    return "q"


class RedisFlow:
    """`create`, `retry_later` and `tombstone` of `RedisTaskStore`."""

    #: This store keeps flow control (`stores.flow.FlowControlStore`).
    flow_control = True

    if TYPE_CHECKING:
        keys: RedisKeys
        max_tasks: int | None
        max_changes: int
        tombstone_retention: float | None

        def _require(self) -> aioredis.Redis: ...

        async def _guard(self, call: Awaitable[T]) -> T: ...

        async def _script(self, name: str, keys: list[str], args: list[Any]) -> Any: ...

        async def _record(self, name: str, task_id: str, *args: Any) -> TaskRecord | None: ...

    def _tomb_ms(self) -> str:
        """How long a tombstone is kept, in ms, as script text ('' keeps none)."""
        retention = self.tombstone_retention
        return "" if retention is None else str(max(1, math.ceil(retention * 1000)))

    def _tomb(self, task_id: str) -> str:
        """The tombstone hash of a task as script text ('' when none are kept)."""
        return "" if self.tombstone_retention is None else tombstone_key(task_id)

    async def create(
        self,
        record: TaskRecord,
        *,
        caps: ActiveCaps | None = None,
        dedupe_window: float | None = None,
    ) -> TaskRecord | None:
        now = time.time()
        expires_at = record.expires_at
        pexpire = None if expires_at is None else max(0, math.ceil((expires_at - now) * 1000))
        dedupe = record.dedupe_key if dedupe_window is not None else None
        terminal = record.is_terminal
        outcome = await self._script(
            "create",
            [
                self.keys.task(record.task_id),
                *self.keys.indexes(),
                self.keys.queued_for(record.app),
            ],
            [
                record.task_id,
                repr(now),
                self.max_changes,
                "" if self.max_tasks is None else self.max_tasks,
                self.keys.task_base,
                "terminal" if terminal else "active",
                repr(float(record.created_at)),
                route(record, now),
                "+inf" if expires_at is None else repr(expires_at),
                "" if pexpire is None else pexpire,
                "" if caps is None or caps.total is None else caps.total,
                "" if caps is None or caps.per_owner is None else caps.per_owner,
                "" if record.owner is None else self.keys.owner_active_base + record.owner,
                dumps({"app": record.app}),
                "" if dedupe is None else dedupe,
                "" if dedupe_window is None else repr(float(dedupe_window)),
                self._tomb(record.task_id) if terminal else "",
                self._tomb_ms(),
                *encode_task(record),
            ],
        )
        if isinstance(outcome, list):  # the task that answers this call instead
            task_id, flat = outcome
            return decode_task(task_id, pairs(flat))
        if outcome == "exists":
            raise DuplicateTask(f"task {record.task_id!r} already exists")
        if outcome == "limit" and self.max_tasks is not None:
            raise TaskLimitExceeded("max_tasks", self.max_tasks)
        if caps is not None and outcome == "limit_total" and caps.total is not None:
            raise TaskLimitExceeded(caps.TOTAL, caps.total)
        if caps is not None and outcome == "limit_owner" and caps.per_owner is not None:
            raise TaskLimitExceeded(caps.PER_OWNER, caps.per_owner)
        return None

    async def retry_later(
        self, task_id: str, owner: str, not_before: float, status_message: str | None
    ) -> TaskRecord | None:
        text = storable_text(status_message)
        mode = "clear" if text is None else "set"
        when = repr(float(not_before))
        return await self._record("retry_later", task_id, owner, when, mode, text or "")

    async def tombstone(self, task_id: str) -> Tombstone | None:
        retention = self.tombstone_retention
        if retention is None:
            return None
        client = self._require()
        async with client.pipeline(transaction=False) as pipe:
            pipe.hmget(self.keys.task(task_id), ["status", "terminal_at", "retention_ms"])
            pipe.hmget(self.keys.tomb(tombstone_key(task_id)), ["owner", "at", "reason"])
            (status, ended, kept), (owner, at, reason) = await self._guard(pipe.execute())
        now = time.time()
        if status is not None:  # a hash Redis has not evicted yet: gone once it expired
            if ended is None or kept is None or float(ended) + int(kept) / 1000 > now:
                return None
        if at is None or reason not in _REASONS:
            return None
        when = float(at)
        if when > now or when < now - retention:  # pre-dated and not due yet, or forgotten
            return None
        return Tombstone(owner, when, reason)


__all__ = ["RedisFlow", "route"]
