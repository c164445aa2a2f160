"""Run leases and the queue of the Redis store, mixed into `RedisTaskStore`.

A lease is two fields of the task hash (`lease_owner`, `lease_expires`), taken and
given back by the `claim`, `requeue` and `claim_queued` scripts of `redis.flow_scripts`
(`renew`, and `start_run`, a waiting task's run beginning (`stores.phases`):
`redis.scripts`), which keep the queued sets of `redis.keys` in step: an active task
nobody holds is in `{P}:queued` and, when it has an `app`, in `{P}:queued:<app>`,
unless it is gated or waits out a retry (`redis.flow_lua`). The ungated
`claim_queued` begins each task's run in the same script (`redis.claim_lua`), as
PostgreSQL's and SQLite's claims do, so a worker writes nothing to start one.

Reads for recovery are narrow: `active_leases` walks `{P}:active` and reads only
the lease fields of each task (pipelined `HMGET`s, `BATCH` per round trip), never
the arguments, context or input payloads that `active_tasks` returns.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from fastmcp_tasks.stores.base import TaskRecord, storable_text
from fastmcp_tasks.stores.redis.feed import BATCH
from fastmcp_tasks.stores.redis.keys import decode_task, pairs
from fastmcp_tasks.wire.names import ACTIVE_STATUSES

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from fastmcp_tasks.stores.redis.keys import RedisKeys

T = TypeVar("T")

#: The task hash fields `active_leases` reads (what recovery decides on).
LEASE_FIELDS = (
    "tool",
    "status",
    "status_message",
    "attempts",
    "app",
    "lease_owner",
    "lease_expires",
    "created_at",
    "updated_at",
    "phase",
)


def lease_record(task_id: str, values: list[str | None]) -> TaskRecord | None:
    """The narrow record of one `HMGET` of `LEASE_FIELDS`; `None` unless an active task."""
    tool, status, message, attempts, app, holder, expires, created, updated, phase = values
    if tool is None or status not in ACTIVE_STATUSES or created is None or updated is None:
        return None
    return TaskRecord(
        task_id=task_id,
        tool=tool,
        status=status,  # type: ignore[arg-type]
        created_at=float(created),
        updated_at=float(updated),
        status_message=message,
        attempts=0 if attempts is None else int(attempts),
        app=app,
        lease_owner=holder,
        lease_expires=None if expires is None else float(expires),
        phase=phase,  # type: ignore[arg-type]
    )


class RedisLeases:
    """The lease methods of `RedisTaskStore` (`claim`, `renew`, `requeue`, ...)."""

    if TYPE_CHECKING:
        keys: RedisKeys
        max_changes: int

        def _require(self) -> aioredis.Redis: ...

        async def _guard(self, call: Awaitable[T]) -> T: ...

        async def _script(self, name: str, keys: list[str], args: list[Any]) -> Any: ...

        async def _record(self, name: str, task_id: str, *args: Any) -> TaskRecord | None: ...

        def _live(self, task_id: str, fields: dict[str, str]) -> TaskRecord | None: ...

    async def claim(
        self, task_id: str, owner: str, until: float, *, expect_owner: str | None = None
    ) -> TaskRecord | None:
        expect = ("0", "") if expect_owner is None else ("1", expect_owner)
        return await self._record("claim", task_id, owner, repr(float(until)), *expect)

    async def renew(self, owner: str, task_ids: frozenset[str], until: float) -> None:
        ids = sorted(task_ids)
        for start in range(0, len(ids), BATCH):
            keys = [self.keys.task(task_id) for task_id in ids[start : start + BATCH]]
            await self._script("renew", keys, [owner, repr(float(until))])

    async def active_tasks(self) -> list[TaskRecord]:
        client = self._require()
        ids = cast("list[str]", await self._guard(client.zrange(self.keys.active, 0, -1)))
        records: list[TaskRecord] = []
        for start in range(0, len(ids), BATCH):
            chunk = ids[start : start + BATCH]
            async with client.pipeline(transaction=False) as pipe:
                for task_id in chunk:
                    pipe.hgetall(self.keys.task(task_id))
                replies = await self._guard(pipe.execute())
            for task_id, fields in zip(chunk, replies, strict=True):
                record = self._live(task_id, fields)
                if record is not None and record.is_active:
                    records.append(record)
        return records

    async def active_leases(self, *, app: str | None = None) -> list[TaskRecord]:
        """The active tasks of `app` (`None`: of every application), lease fields only.

        One `ZRANGE` of the active index, then one pipeline of `HMGET`s per `BATCH`
        tasks. The records carry `LEASE_FIELDS`; payloads (`arguments`, `context`,
        input requests and answers, `owner`) are left `None` (see `base.active_leases`).
        """
        client = self._require()
        ids = cast("list[str]", await self._guard(client.zrange(self.keys.active, 0, -1)))
        records: list[TaskRecord] = []
        for start in range(0, len(ids), BATCH):
            chunk = ids[start : start + BATCH]
            async with client.pipeline(transaction=False) as pipe:
                for task_id in chunk:
                    pipe.hmget(self.keys.task(task_id), LEASE_FIELDS)
                replies = await self._guard(pipe.execute())
            for task_id, values in zip(chunk, replies, strict=True):
                record = lease_record(task_id, values)
                if record is not None and (app is None or record.app == app):
                    records.append(record)
        return records

    async def requeue(self, task_id: str, owner: str) -> TaskRecord | None:
        return await self._record("requeue", task_id, owner)

    async def start_run(
        self, task_id: str, owner: str, status_message: str | None
    ) -> TaskRecord | None:
        """Begin the run of a waiting task leased to `owner` (`stores.phases.start_run`)."""
        mode = "clear" if status_message is None else "set"
        text = storable_text(status_message) or ""
        return await self._record("start_run", task_id, owner, mode, text)

    async def claim_queued(
        self, owner: str, until: float, limit: int, *, app: str | None = None
    ) -> list[TaskRecord]:
        """Lease up to `limit` unleased tasks, oldest first (see `TaskStore.claim_queued`).

        With `app`, only that application's tasks, from `{P}:queued:<app>`; with `None`,
        any application's (tasks without an app included), from `{P}:queued`, the key
        that predates applications, so a store written before them is claimed as it was.
        Gated tasks and retry waits are kept apart (`redis.flow_lua`), so the ungated
        tasks cost what they cost without them. Each ungated task's run begins with its
        claim (`redis.claim_lua`), with its `message` change on the feed.
        """
        if limit < 1:
            return []
        return await self._claim(owner, until, limit, app)

    async def hand_on(self, app: str | None) -> None:
        """Wake another worker of `app` for wake-ups one could not act on, when tasks wait
        (`stores.queue_wakes`): the claim script with a limit of 0, which takes nothing,
        clears the application's pending mark and, since it is "full", wakes a worker
        when its queue holds tasks (`redis.queue_wakes`)."""
        await self._claim("", 0.0, 0, app)

    async def _claim(
        self, owner: str, until: float, limit: int, app: str | None
    ) -> list[TaskRecord]:
        one_app = ("0", "") if app is None else ("1", app)
        now = repr(time.time())
        args = [self.keys.task_base, owner, repr(float(until)), limit, *one_app, now]
        args.append(self.max_changes)
        keys = [self.keys.queued_for(app), self.keys.queued, self.keys.changes]
        taken = await self._script("claim_queued", keys, args)
        return [decode_task(task_id, pairs(flat)) for task_id, flat in taken]


__all__ = ["LEASE_FIELDS", "RedisLeases", "lease_record"]
