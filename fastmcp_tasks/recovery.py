"""Who runs a task, and what happens to a task whose runner died.

Every task carries a run lease: the owner (`host:pid:token` of the process that
runs or queues it) and an expiry the owner's runner keeps renewing. On a
durable store (SQLite, Redis), a task is *orphaned* when its lease has expired,
or when its owner is a process on this host that no longer exists (so a
restart recovers at once instead of waiting out the lease).

The recovery rule, applied by whichever process finds an orphan first (the
lease is taken with compare-and-set, so exactly one does):

- a tool whose annotations say `idempotentHint=True` is run again from the top
  (at-least-once), with `statusMessage` "Restarted after an interruption
  (attempt N)"; a task parked in `input_required` drops its outstanding
  requests and asks again;
- any other tool ends `failed` with -32603 "Task interrupted: ..." saying the
  run was lost and the tool is not marked idempotent.

Nothing is left in `working` forever.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import time
from typing import Any

import anyio

from fastmcp_tasks.errors import interrupted
from fastmcp_tasks.stores.base import TaskRecord

QUEUED_MESSAGE = "Queued: waiting for a free worker slot"

logger = logging.getLogger("fastmcp_tasks.recovery")

HOST = socket.gethostname()


def new_owner() -> str:
    """A lease owner id for this process: `host:pid:token`."""
    return f"{HOST}:{os.getpid()}:{secrets.token_hex(4)}"


def _dead_here(owner: str) -> bool:
    """True when `owner` names a process on this host that is gone."""
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != HOST or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def is_orphan(record: TaskRecord, now: float, me: str) -> bool:
    """Whether an active task has lost the runner that leased it."""
    owner = record.lease_owner
    if owner is None or owner == me:
        return False  # unleased: queued for any worker (`claim_queued`), not lost
    if record.lease_expires is None:
        return True
    return record.lease_expires <= now or _dead_here(owner)


def is_idempotent(tool: Any) -> bool:
    annotations = getattr(tool, "annotations", None)
    return bool(getattr(annotations, "idempotentHint", None))


def restarted_message(attempt: int) -> str:
    return f"Restarted after an interruption (attempt {attempt})"


def lost_error(tool_name: str, found: bool) -> dict[str, Any]:
    if not found:
        return interrupted(f"its runner stopped and tool {tool_name!r} no longer exists")
    return interrupted(
        f"the process running it stopped (crash or restart); tool {tool_name!r} is not "
        "marked idempotentHint=True, so it is not run again"
    )


class LeaseKeeper:
    """Renews this process's leases and recovers orphaned tasks (durable stores only)."""

    def __init__(self, runner: Any, *, owner: str, lease_seconds: float) -> None:
        self.runner = runner
        self.store = runner.store
        self.owner = owner
        self.lease_seconds = lease_seconds

    def until(self) -> float:
        return time.time() + self.lease_seconds

    async def heartbeat(self) -> None:
        """Keep the leases of every job of this process (queued or running) alive."""
        while True:
            await anyio.sleep(self.lease_seconds / 3)
            held = frozenset(self.runner.job_ids())
            if held:
                try:
                    await self.store.renew(self.owner, held, self.until())
                except Exception:
                    logger.exception("Renewing task leases failed; will retry")

    async def hand_back(self, queued: set[str], interrupted: set[str]) -> None:
        """Graceful shutdown: queued tasks go back to the queue for any worker; runs that
        were interrupted have their lease expire now, for the recovery rule."""
        for task_id in queued - interrupted:
            await self.store.requeue(task_id, self.owner)
        if interrupted:
            await self.store.renew(self.owner, frozenset(interrupted), time.time())

    async def take_queued_forever(self, interval: float = 0.05, longest: float = 5.0) -> None:
        """Lease tasks nobody runs yet (a `concurrency=0` front end's, or requeued ones).

        While the store fails (Redis restarting, say) the wait doubles up to `longest`,
        with one warning per outage rather than one per attempt.
        """
        wait = interval
        while True:
            free = self.runner.free_slots()
            if free:
                try:
                    for record in await self.store.claim_queued(self.owner, self.until(), free):
                        await self._start(record)
                except Exception as exc:
                    if wait == interval:
                        logger.warning("Taking queued tasks failed (%s); backing off", exc)
                    wait = min(wait * 2, longest)
                else:
                    if wait != interval:
                        logger.warning("Taking queued tasks works again")
                    wait = interval
            await anyio.sleep(wait)

    async def _start(self, record: TaskRecord) -> None:
        tool = await self.runner.find_tool(record.tool)
        if tool is None:
            error = interrupted(f"tool {record.tool!r} does not exist on this worker")
            await self.store.transition(
                record.task_id, "failed", error=error, status_message=error["message"]
            )
            return
        waiting = record.status_message == QUEUED_MESSAGE  # cleared when it starts
        self.runner.resubmit(
            record, tool, None if waiting else record.status_message, queued=waiting
        )

    async def scan_forever(self, interval: float) -> None:
        """Scan for orphans every `interval` (the first scan ran at startup)."""
        while True:
            await anyio.sleep(interval)
            try:
                await self.scan()
            except Exception:
                logger.exception("Recovery scan failed; will retry")

    async def scan(self) -> int:
        """Recover every orphaned task found now; return how many."""
        now = time.time()
        recovered = 0
        for record in await self.store.active_tasks():
            if record.task_id in self.runner.job_ids() or not is_orphan(record, now, self.owner):
                continue
            if await self.recover(record):
                recovered += 1
        return recovered

    async def recover(self, record: TaskRecord) -> bool:
        claimed = await self.store.claim(
            record.task_id, self.owner, self.until(), expect_owner=record.lease_owner
        )
        if claimed is None:
            return False  # another process took it first
        tool = await self.runner.find_tool(record.tool)
        if tool is None or not is_idempotent(tool):
            error = lost_error(record.tool, tool is not None)
            await self.store.transition(
                record.task_id, "failed", error=error, status_message=error["message"]
            )
            logger.warning("Task %s (%s) was interrupted: failed", record.task_id, record.tool)
            return True
        message = restarted_message(claimed.attempts)
        if claimed.status == "input_required":
            await self.store.transition(record.task_id, "working", status_message=message)
        else:
            await self.store.set_status_message(record.task_id, message)
        await self.store.requeue(record.task_id, self.owner)  # any worker may take it
        logger.warning("Task %s (%s) restarted: %s", record.task_id, record.tool, message)
        return True
