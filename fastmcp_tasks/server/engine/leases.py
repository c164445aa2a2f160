"""Who runs a task, and what happens to a task whose runner died.

Every task carries a run lease: the owner (`host:pid:token` of the process that
runs or queues it) and an expiry the owner's runner keeps renewing. On a
durable store (SQLite, Redis), a task is *orphaned* when its lease has expired,
or when its owner is a process on this host that no longer exists (so a
restart recovers at once instead of waiting out the lease).

The recovery rule, applied by whichever process finds an orphan first (the
lease is taken with compare-and-set, so exactly one does):

- a tool whose annotations say `idempotentHint=True`, or that is
  `task_options(resumable=True)` (its completed `step()`s are replayed, `engine.steps`),
  is run again from the top (at-least-once), with `statusMessage` "Restarted after an interruption
  (attempt N)"; a task parked in `input_required` drops its outstanding
  requests and asks again;
- any other tool ends `failed` with -32603 "Task interrupted: ..." saying the
  run was lost and the tool is not marked idempotent;
- a task that never started goes back to the queue: nothing was interrupted. Whether
  its run had begun is the record's `phase` (`stores.phases`), which only the engine
  and the stores write, never the status message (a tool may write any text there,
  "Queued: ..." included). A record written before phases counts as started.

A task leased to this very process that it does not hold is one whose lease
reply was lost. Once the lease runs out, the process's own scan fails it if it
came from a `tools/call` that failed (no client ever learned its id), and
otherwise gives it back to the queue (it never started here).

Only tasks of this process's application (`record.app`) are scanned, claimed or
failed, so applications sharing one store never touch each other's tasks.

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

from fastmcp_tasks.errors import StoreError, interrupted
from fastmcp_tasks.server.engine.call import leaf_of, resolve_tool
from fastmcp_tasks.server.engine.durable import DurableContext
from fastmcp_tasks.server.engine.history import ending
from fastmcp_tasks.server.engine.jobs import Job
from fastmcp_tasks.server.engine.pauses import Pauses
from fastmcp_tasks.server.engine.supervision import GaveUp, retry_store
from fastmcp_tasks.server.flow import QUEUED_PREFIX
from fastmcp_tasks.server.observability import shown_id
from fastmcp_tasks.server.options import options_of
from fastmcp_tasks.stores.base import TaskRecord, active_leases
from fastmcp_tasks.stores.phases import has_begun, start_message, start_run
from fastmcp_tasks.stores.settling import settle

QUEUED_MESSAGE = f"{QUEUED_PREFIX}waiting for a free worker slot"
CANCELLED_BEFORE_START = "Cancelled before it started"
#: Failed claims remembered until the next round takes back what they leased (an outage
#: fails many rounds; their leases run out anyway, this only bounds the memory).
MAX_LOST_CLAIMS = 1000

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


def is_orphan(record: TaskRecord, now: float, me: str, mine: set[str] | None = None) -> bool:
    """Whether an active task has lost the runner that leased it.

    A task leased to this process (`me`) that it does not hold (`mine`: the ids it
    runs, queues or records) is an orphan once the lease has run out: its creation
    failed after the store took it.
    """
    owner = record.lease_owner
    if owner is None:
        return False  # unleased: queued for any worker (`claim_queued`), not lost
    if owner == me:
        if mine is None or record.task_id in mine:
            return False
        return record.lease_expires is None or record.lease_expires <= now
    if record.lease_expires is None:
        return True
    return record.lease_expires <= now or _dead_here(owner)


def is_idempotent(tool: Any) -> bool:
    """Whether the tool's annotations say `idempotentHint=True` (read as `idempotent_hint`,
    the field's name in MCP SDK v2's `ToolAnnotations`: FastMCP 4 deprecates the other)."""
    annotations = getattr(tool, "annotations", None)
    return bool(getattr(annotations, "idempotent_hint", None))


async def is_resumable(tool: Any) -> bool:
    """Whether the tool (a mounted one's leaf) is `task_options(resumable=True)`."""
    return options_of(await leaf_of(tool)).resumable


def restarted_message(attempt: int) -> str:
    return f"Restarted after an interruption (attempt {attempt})"


UNCONFIRMED = interrupted(
    "the tools/call that created it failed before the client learned its id, so nobody "
    "can follow it"
)


def lost_error(tool_name: str, found: bool) -> dict[str, Any]:
    if not found:
        return interrupted(f"its runner stopped and tool {tool_name!r} no longer exists")
    return interrupted(
        f"the process running it stopped (crash or restart); tool {tool_name!r} is not "
        "marked idempotentHint=True (nor task_options(resumable=True)), so it is not run again"
    )


class LeaseKeeper:
    """Renews this process's leases and recovers orphaned tasks (durable stores only)."""

    def __init__(self, runner: Any, *, owner: str, lease_seconds: float) -> None:
        self.runner = runner
        self.store = runner.store
        self.owner = owner
        self.lease_seconds = lease_seconds
        #: The lease ends (`until`) of claims that failed: the reply of each may be lost
        #: after the store leased tasks here with that exact lease end (and began their
        #: runs). The next claim round first takes those back (`reclaim_lost`).
        self.lost_claims: set[float] = set()

    def until(self) -> float:
        return time.time() + self.lease_seconds

    async def renew_held(self) -> None:
        """Extend the leases of every task this process holds (one batched write)."""
        held = frozenset(self.runner.job_ids())
        if held:
            await self.store.renew(self.owner, held, self.until())

    async def heartbeat_wait(self) -> None:
        await anyio.sleep(self.lease_seconds / 3)

    async def hand_back(self, queued: set[str], interrupted: set[str]) -> None:
        """Graceful shutdown: queued tasks go back to the queue for any worker; runs that
        were interrupted have their lease expire now, for the recovery rule."""
        for task_id in queued - interrupted:
            if await self.store.requeue(task_id, self.owner) is not None:
                self.runner.history.note(task_id, "requeued", worker=self.owner, reason="shutdown")
        if interrupted:
            await self.store.renew(self.owner, frozenset(interrupted), time.time())

    async def hand_back_at_shutdown(self, queued: set[str], interrupted: set[str]) -> None:
        """`hand_back`, where a store that fails now leaves the tasks to their leases."""
        try:
            await self.hand_back(queued, interrupted)
        except StoreError as exc:
            logger.warning(
                "Handing tasks back at shutdown failed (%s); their leases run out and "
                "recovery takes them",
                exc,
            )

    async def begin(self, job: Job, stop: anyio.Event) -> bool:
        """Record that the run of a waiting task begins (`stores.phases.start_run`) before
        its tool body does; False when it must not run (gone, ended, leased elsewhere, or
        the store stayed down until `stop`, its tool is paused: `job.held`). A job whose
        run began already: True."""
        if job.waited and await self._held(job, stop):
            return False
        if job.queued:

            async def write() -> TaskRecord | None:
                return await start_run(self.store, job.task_id, self.owner, job.message)

            try:
                record = await retry_store(write, stop=stop)
            except GaveUp:
                return False
            if record is None:
                return False
            job.attempt = max(1, record.attempts)
        self.runner.history.note(job.task_id, "started", worker=self.owner, attempt=job.attempt)
        return True

    async def _held(self, job: Job, stop: anyio.Event) -> bool:
        """Whether `job`'s tool is paused and the task was handed back (`pauses`); this
        process keeps the job, should it claim the task again after `resume`."""
        pauses: Pauses = self.runner.pauses

        async def hold() -> bool:
            return await pauses.holds(job.task_id, job.name, self.owner)

        try:
            job.held = await retry_store(hold, stop=stop)
        except GaveUp:
            return False
        if job.held:
            self.runner.accept(job, wake=False)
        return job.held

    async def take_queued(self) -> bool:
        """Lease tasks of this application nobody runs yet (a front end's, or requeued).
        `True` when it asked the store for some (a claim ran), `False` when it could not
        (full, or stopping)."""
        runner = self.runner
        taken = 0
        oldest = float("inf")  # when the oldest task this round took was created
        asked = False
        tools: dict[tuple[str, str | None], Any] = {}  # this round's lookups (`find_tool`)
        while not runner.stopping:  # shutting down: leave them for a live process
            free = runner.free_slots()
            if not free:  # full: look again as soon as a slot frees
                runner.watcher.more_queued = True
                if taken:  # it took tasks: the next window is short
                    runner.watcher.claimed(taken, waited=time.time() - oldest)
                return asked
            if self.lost_claims:
                await self.reclaim_lost()
            until = self.until()
            asked = True
            try:
                records = await self.store.claim_queued(self.owner, until, free, app=runner.app)
            except BaseException:
                if len(self.lost_claims) < MAX_LOST_CLAIMS:
                    self.lost_claims.add(until)
                raise
            runner.watcher.more_queued = len(records) == free
            taken += len(records)
            oldest = min([oldest, *(record.created_at for record in records)])
            if len(records) < free:  # the round's last claim: its window
                runner.watcher.claimed(taken, waited=time.time() - oldest if taken else 0.0)
            claimed = {record.task_id for record in records}
            runner.claiming |= claimed  # a cancel heard before they are submitted is kept
            try:
                for record in records:
                    await self._start(record, tools)
            finally:
                runner.claiming -= claimed
                for task_id in claimed & runner.missed_cancels:
                    runner.missed_cancels.discard(task_id)
                    await runner.cancel(task_id)  # now submitted: cancelled before it starts
            if len(records) < free:
                return asked
        return asked

    async def _start(self, record: TaskRecord, tools: dict[tuple[str, str | None], Any]) -> None:
        history = self.runner.history
        history.note(record.task_id, "taken", worker=self.owner)
        if record.cancel_requested:  # cancelled while it waited in the store
            self.runner.forget(record.task_id)
            await self.end(record.task_id, "cancelled", status_message=CANCELLED_BEFORE_START)
            return
        tool = await self.find_tool(record, tools)
        if tool is None:
            error = interrupted(f"tool {record.tool!r} does not exist on this worker")
            await self.end(record.task_id, "failed", error=error, status_message=error["message"])
            return
        begun = has_begun(record)  # a durable store's ungated claim began it; else its start does
        options = options_of(await leaf_of(tool))  # a mounted tool's options live on the child's
        self.runner.resubmit(
            record,
            tool,
            record.status_message if begun else start_message(record),
            queued=not begun,
            input_timeout=options.timeout_seconds(self.runner.input_timeout),
        )

    async def find_tool(
        self, record: TaskRecord, seen: dict[tuple[str, str | None], Any] | None = None
    ) -> Any:
        """The tool a stored task runs, as its creating call resolved it, or `None`. With
        `seen` (one claim round's lookups), a tool and version looked up in the same round
        is not looked up again: the round's tasks all start within it."""
        version = DurableContext.of(record).version
        key = (record.tool, version)
        if seen is not None and key in seen:
            return seen[key]
        try:
            tool = await resolve_tool(self.runner.server, record.tool, version)
        except Exception:
            logger.exception("Looking up tool %r for a stored task failed", record.tool)
            return None
        if seen is not None:
            seen[key] = tool
        return tool

    async def scan_wait(self) -> None:
        await anyio.sleep(self.lease_seconds / 2)

    async def scan(self) -> int:
        """Recover every orphaned task of this application found now; return how many.

        The scan reads lease fields only (`active_leases`), not arguments or results.
        """
        now = time.time()
        recovered = 0
        mine = self.runner.job_ids()
        app = self.runner.app
        for record in await active_leases(self.store, None):
            if record.app not in (None, app):  # another application's (None: before apps)
                continue
            if record.task_id in mine or not is_orphan(record, now, self.owner, mine):
                continue
            if await self.recover(record):
                recovered += 1
        return recovered

    async def reclaim_lost(self) -> None:
        """Take back what failed claims may have leased here (`lost_claims`), before their
        leases run out: a task leased to this process with such a claim's exact lease end,
        which it does not hold, was leased by a claim whose reply was lost, so it never
        started here (its claim may have begun its run: no other process may recover it
        as interrupted first). Only the queue loop claims (`take_queued`), and it calls
        this before its next claim, so no claim of its own is under way meanwhile; a lease
        this process took otherwise (a creation, a recovery) has another end."""
        lost = set(self.lost_claims)
        leases = await active_leases(self.store, None)
        self.lost_claims -= lost
        mine = self.runner.job_ids()
        for record in leases:
            if (
                record.lease_owner == self.owner
                and record.lease_expires in lost
                and record.task_id not in mine
            ):
                await self.recover(record)

    async def recover(self, record: TaskRecord) -> bool:
        claimed = await self.store.claim(
            record.task_id, self.owner, self.until(), expect_owner=record.lease_owner
        )
        if claimed is None:
            return False  # another process took it first
        task_id, history = record.task_id, self.runner.history
        history.note(task_id, "recovered", worker=self.owner, **{"from": record.lease_owner})
        if task_id in self.runner.unconfirmed:
            self.runner.unconfirmed.discard(task_id)
            message = UNCONFIRMED["message"]
            await self.end(task_id, "failed", error=UNCONFIRMED, status_message=message)
            return True
        if record.lease_owner == self.owner or not has_begun(claimed):
            # never started: leased here by a claim whose reply was lost, or by a process
            # that died (or lost a claim's reply) before its run began, which the record's
            # phase says: nothing was interrupted, so it goes back to the queue
            if await self.store.requeue(task_id, self.owner) is not None:
                history.note(task_id, "requeued", worker=self.owner, reason="never started")
            return True
        tool = await self.find_tool(record)
        if tool is None or not (is_idempotent(tool) or await is_resumable(tool)):
            error = lost_error(record.tool, tool is not None)
            await self.end(task_id, "failed", error=error, status_message=error["message"])
            logger.warning(
                "Task %s (%s) was interrupted: failed", shown_id(record.task_id), record.tool
            )
            return True
        message = restarted_message(claimed.attempts + 1)  # the run it is about to begin
        if claimed.status == "input_required":
            await self.store.transition(record.task_id, "working", status_message=message)
        else:
            await self.store.set_status_message(record.task_id, message)
        if await self.store.requeue(task_id, self.owner) is not None:  # any worker may take it
            history.note(task_id, "requeued", worker=self.owner, reason="interrupted")
        logger.warning("Task %s (%s) restarted: %s", shown_id(task_id), record.tool, message)
        return True

    async def end(self, task_id: str, status: Any, **fields: Any) -> None:
        """An ending decided here (not a run's outcome): the transition and its event."""
        if await settle(self.store, task_id, status, **fields):
            self.runner.history.note(
                task_id,
                "finished",
                **ending(status, error=fields.get("error"), message=fields.get("status_message")),
            )
