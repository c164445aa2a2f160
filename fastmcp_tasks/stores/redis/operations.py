"""The Redis store's operator records (`stores.operations.OperableTaskStore`), mixed
into `RedisTaskStore`: histories, workers, pauses, the audit log, purging a chosen set.

Where each lives is `redis.keys` (`{P}:events:<id>`, `{P}:pauses`, `{P}:workers`,
`{P}:workers-seen`, `{P}:audit`); what changes tasks or needs a check and a write
together is one script of `redis.operations_lua`. Every call is one round trip:

- `add_events`: one `add_events` script call for the whole batch (a batch over
  `EVENT_BATCH` events is split, one call per part). A history lives and dies with its
  task: the script drops events of absent or expired tasks and gives a history its
  task's TTL; the scripts that end a task give it the same TTL, and every script that
  deletes a task hash deletes its history (`redis.flow_lua.forget_task`).
- `events`: a `MULTI` of the task's liveness fields and the list, so a history is
  never shown for an expired task that Redis has not evicted yet.
- `beat`: one script (upsert, forget the workers not seen for `FORGET_AFTER`);
  `workers`: one `HGETALL`.
- `pause`: `HSETNX`; `paused`: `HVALS`; `hold_paused` and `resume`: one script each.
- `add_audit`: a `MULTI` of `LPUSH` and `LTRIM` (the newest `MAX_AUDIT`); `audit`:
  `LRANGE`.
- `delete_finished`: the `delete_finished` script, per `BATCH` ids.

JSON is written by Python (`encode_json`) and read by Python: the scripts move it as
opaque text, never through Lua's cjson.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

from fastmcp_tasks.stores.base import TaskRecord, storable_text
from fastmcp_tasks.stores.operations import (
    FORGET_AFTER,
    MAX_AUDIT,
    MAX_EVENTS,
    PAUSED_UNTIL,
    RESUMED_MESSAGE,
    AuditEntry,
    Pause,
    TaskEvent,
    WorkerInfo,
)
from fastmcp_tasks.stores.redis.feed import BATCH
from fastmcp_tasks.stores.redis.keys import decode_task, dumps, pairs

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from fastmcp_tasks.stores.redis.keys import RedisKeys

T = TypeVar("T")

#: Most events one `add_events` script call appends (a longer batch takes more calls).
EVENT_BATCH = 1000


def pause_field(app: str, tool: str) -> str:
    """The `{P}:pauses` field of a paused tool (the scripts build it the same way)."""
    return f"{app}\t{tool}"


class RedisOperations:
    """The `OperableTaskStore` methods of `RedisTaskStore`."""

    if TYPE_CHECKING:
        keys: RedisKeys
        max_changes: int

        def _require(self) -> aioredis.Redis: ...

        async def _guard(self, call: Awaitable[T]) -> T: ...

        async def _script(self, name: str, keys: list[str], args: list[Any]) -> Any: ...

        def _tomb_ms(self) -> str: ...

        def _tomb(self, task_id: str) -> str: ...

    # --- histories ----------------------------------------------------------------

    async def add_events(self, events: Sequence[tuple[str, TaskEvent]]) -> None:
        for start in range(0, len(events), EVENT_BATCH):
            part = events[start : start + EVENT_BATCH]
            numbers: dict[str, int] = {}
            keys: list[str] = []
            args: list[Any] = [repr(time.time()), MAX_EVENTS]
            for task_id, event in part:
                number = numbers.get(task_id)
                if number is None:
                    number = numbers[task_id] = len(numbers) + 1
                    keys += [self.keys.task(task_id), self.keys.events(task_id)]
                args += [number, event.kind, dumps(event.to_json())]
            if part:
                await self._script("add_events", keys, args)

    async def events(self, task_id: str) -> list[TaskEvent]:
        entries = await self._live_list(task_id, self.keys.events(task_id))
        return [TaskEvent.from_json(json.loads(entry)) for entry in entries]

    async def _live_list(self, task_id: str, key: str) -> list[Any]:
        """The entries of a list kept beside a task (its history, its steps), read in one
        transaction with the task; `[]` when the task is absent or expired."""
        async with self._require().pipeline(transaction=True) as pipe:
            pipe.hmget(self.keys.task(task_id), ["status", "terminal_at", "retention_ms"])
            pipe.lrange(key, 0, -1)
            (status, ended, kept), entries = await self._guard(pipe.execute())
        if status is None:
            return []
        if (
            ended is not None
            and kept is not None
            and float(ended) + int(kept) / 1000 <= time.time()
        ):
            return []
        return list(entries)

    # --- workers ------------------------------------------------------------------

    async def beat(self, worker: WorkerInfo) -> None:
        horizon = time.time() - FORGET_AFTER
        keys = [self.keys.workers, self.keys.workers_seen]
        args = [worker.worker_id, dumps(worker.to_json()), repr(float(worker.last_seen))]
        await self._script("beat", keys, [*args, repr(horizon)])

    async def workers(self) -> list[WorkerInfo]:
        found = await self._guard(self._require().hvals(self.keys.workers))
        horizon = time.time() - FORGET_AFTER
        infos = (WorkerInfo.from_json(json.loads(text)) for text in cast("list[str]", found))
        return [info for info in infos if info.last_seen >= horizon]

    # --- pauses -------------------------------------------------------------------

    async def pause(self, pause: Pause) -> bool:
        field = pause_field(pause.app, pause.tool)
        call = self._require().hsetnx(self.keys.pauses, field, dumps(pause.to_json()))
        return bool(await self._guard(call))

    async def resume(self, app: str, tool: str) -> int | None:
        keys = [self.keys.pauses, self.keys.queued, self.keys.changes]
        args: list[Any] = [app, tool, repr(time.time()), self.max_changes, self.keys.task_base]
        args += [repr(PAUSED_UNTIL), RESUMED_MESSAGE]
        released = await self._script("resume", keys, args)
        return None if released is None else int(released)

    async def paused(self) -> list[Pause]:
        found = await self._guard(self._require().hvals(self.keys.pauses))
        return [Pause.from_json(json.loads(text)) for text in cast("list[str]", found)]

    async def hold_paused(
        self, task_id: str, owner: str, status_message: str | None
    ) -> TaskRecord | None:
        text = storable_text(status_message)
        mode = "clear" if text is None else "set"
        keys = [self.keys.task(task_id), *self.keys.indexes(), self.keys.pauses]
        args = [task_id, repr(time.time()), self.max_changes, owner, mode, text or ""]
        flat = await self._script("hold_paused", keys, [*args, repr(PAUSED_UNTIL)])
        return None if not flat else decode_task(task_id, pairs(flat))

    # --- the audit log ------------------------------------------------------------

    async def add_audit(self, entry: AuditEntry) -> None:
        async with self._require().pipeline(transaction=True) as pipe:
            pipe.lpush(self.keys.audit, dumps(entry.to_json()))
            pipe.ltrim(self.keys.audit, 0, MAX_AUDIT - 1)
            await self._guard(pipe.execute())

    async def audit(self, limit: int = 100) -> list[AuditEntry]:
        if limit <= 0:
            return []
        found = await self._guard(self._require().lrange(self.keys.audit, 0, limit - 1))
        return [AuditEntry.from_json(json.loads(text)) for text in cast("list[str]", found)]

    # --- purging a chosen set -----------------------------------------------------

    async def delete_finished(self, task_ids: Sequence[str]) -> int:
        ids = list(dict.fromkeys(task_ids))
        removed = 0
        for start in range(0, len(ids), BATCH):
            args: list[Any] = [self.keys.task_base, repr(time.time()), self._tomb_ms()]
            args += [
                x for task_id in ids[start : start + BATCH] for x in (task_id, self._tomb(task_id))
            ]
            removed += await self._script("delete_finished", [self.keys.terminal], args)
        return removed


__all__ = ["EVENT_BATCH", "RedisOperations", "pause_field"]
