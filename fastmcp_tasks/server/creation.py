"""Building a new task: its record, its durable context, and what a failed `create` means.

The record of a new task is built here and only here: the id (192 bits from
`secrets`), the poll interval, the lease of the runner that will run it (none
for a `concurrency=0` front end, whose tasks wait for a worker, nor for a task of
a tool with `concurrency=N`, which waits in its gate for whichever process may
take it), the owning principal, the application and the flow-control fields
(`server.flow`). Its `record.context` is a `server.engine.durable.DurableContext`,
the one module that writes and reads it.

`create_task` is the whole of it for one `tools/call`: the record, the store's
atomic `create` (caps, and dedupe: an identical call, or one with the same idempotency
key (`server.idempotency`), gets the existing task), and the hand-over to the runner.
A gated task's `Job` is handed over before `create` (this process may claim the task
the moment it exists); every way the call ends without a new task (a refusal, a
dedupe or idempotency hit, a store failure, any other exception) forgets it again.
Its store calls share one `store_timeout` (`stored`).

A task of a tool an operator paused (`engine.pauses`, this process's copy of the
store's pauses) is created unleased, showing the paused message, whatever this
process's concurrency: no attempt is counted, and whichever process claims it holds it
until `resume`. A new task's history begins with a `created` event (`engine.history`):
the creating process (`by`), the application, the owning principal, whether it waits in
the store (`queued`), its gate, and whether it was created paused.
"""

from __future__ import annotations

import functools
import logging
import math
import secrets
import sys
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import anyio
from fastmcp.server.context import Context
from fastmcp.tools.base import Tool
from mcp.shared.exceptions import MCPError
from mcp_types import CLIENT_CAPABILITIES_META_KEY, INTERNAL_ERROR

from fastmcp_tasks.errors import (
    StoreError,
    TaskLimitExceeded,
    concurrency_key_failed,
    flow_control_unsupported,
    idempotency_key_reused,
    limit_exceeded,
    store_unavailable,
)
from fastmcp_tasks.server import observability
from fastmcp_tasks.server.engine.caller import Caller
from fastmcp_tasks.server.engine.durable import DurableContext
from fastmcp_tasks.server.engine.jobs import CreatingRunner, Job
from fastmcp_tasks.server.engine.leases import QUEUED_MESSAGE
from fastmcp_tasks.server.engine.pauses import paused_message
from fastmcp_tasks.server.engine.sealed import seal_caller
from fastmcp_tasks.server.engine.streams import ResultStreams
from fastmcp_tasks.server.flow import Gate, dedupe_key, gate_for
from fastmcp_tasks.server.idempotency import same_call, scoped_key
from fastmcp_tasks.server.monitored_store import deadline_at, request_deadline
from fastmcp_tasks.server.options import TaskOptions
from fastmcp_tasks.server.ownership import current_principal
from fastmcp_tasks.server.related import related_of_call
from fastmcp_tasks.stores.base import ActiveCaps, TaskRecord, TaskStore
from fastmcp_tasks.stores.flow import keeps_flow_control
from fastmcp_tasks.stores.text import EncodedJSON

logger = logging.getLogger("fastmcp_tasks.validation")

TASK_ID_BYTES = 24  # 192 bits from `secrets`, 32 URL-safe characters
UNCONFIRMED_KEPT = 10_000
#: The share of a `tools/call`'s `store_timeout` a create leaves for reading it back.
READ_BACK_SHARE = 0.2


def new_task_id() -> str:
    """192 random bits, URL-safe; never starting with "-", so no command line
    (`fastmcp-tasks get URL ID`) mistakes an id for an option."""
    while True:
        task_id = secrets.token_urlsafe(TASK_ID_BYTES)
        if not task_id.startswith("-"):
            return task_id


def new_record(
    tool: Tool,
    name: str,
    arguments: dict[str, Any],
    context: Context,
    runner: CreatingRunner,
    retention_ms: int | None,
    lease_seconds: float,
    queued: bool,
    *,
    version: str | None = None,
    gate: Gate | None = None,
    dedupe: str | None = None,
    related: tuple[str, ...] = (),
    paused: bool = False,
    caller: Caller | None = None,
) -> tuple[TaskRecord, frozenset[str]]:
    """The record of a new task, and the input kinds its request declared (`paused`: its
    tool is paused, so it waits unleased for whichever process holds it; `caller` is
    sealed into it when the runner has encryption keys: `engine.sealed`)."""
    now = time.time()
    task_id = new_task_id()
    input_kinds = declared_input_kinds(context)
    responses = context.input_responses
    state = context.request_state
    sealed = None if caller is None else seal_caller(runner.sealer, task_id, caller)
    durable = DurableContext(input_kinds, responses or None, state, version, related, sealed)
    # a front end's task waits for a worker, a gated one for a free slot, a paused tool's
    # for its resume: all unleased
    leased = bool(runner.concurrency) and gate is None and not paused
    if paused:
        message: str | None = paused_message(name)
    else:
        message = gate.message if gate is not None else QUEUED_MESSAGE if queued else None
    now_running = leased and not queued  # its run begins at once, here (`stores.phases`)
    record = TaskRecord(
        task_id=task_id,
        tool=sys.intern(name),  # shared by every retained task of this tool
        status="working",
        created_at=now,
        updated_at=now,
        arguments=arguments,
        status_message=message,
        poll_interval_ms=milliseconds(tool.task_config.poll_interval),
        retention_ms=retention_ms,
        context=durable.dump(),
        attempts=1 if now_running else 0,
        phase="running" if now_running else "queued",
        owner=current_principal(),
        lease_owner=runner.owner if leased else None,
        lease_expires=now + lease_seconds if leased else None,
        app=runner.app,
        gate=None if gate is None else gate.name,
        gate_limit=None if gate is None else gate.limit,
        dedupe_key=dedupe,
    )
    return record, input_kinds


@dataclass(frozen=True)
class Admission:
    """What the extension configured for creating tasks."""

    store: TaskStore
    retention_ms: int | None
    lease_seconds: float
    caps: ActiveCaps
    input_timeout: timedelta | None


async def create_task(
    admission: Admission,
    runner: CreatingRunner | None,
    tool: Tool,
    name: str,
    arguments: dict[str, Any],
    context: Context,
    options: TaskOptions,
    version: str | None,
    *,
    result_streams: ResultStreams | None = None,
    idempotency_key: str | None = None,
) -> TaskRecord:
    """Make the task of one `tools/call` and hand it to the runner; its record.

    With `task_options(dedupe=...)` the record may be an existing task's: an
    identical call within the window gets that task instead, and nothing new runs.
    With a (checked) `idempotency_key` the task holding it answers for as long as it is
    retained, whatever its status (`server.idempotency`); a tool's own `dedupe` takes
    precedence for an authenticated caller (a resend has the same arguments, so it finds
    the same task within that window). A store without flow control ignores the key.
    `result_streams` is given for a 2025-11-25 call: the task's progress goes to its
    `progressToken` (`engine.streams`).

    Raises:
        MCPError: -32602 when the key's task is another call's; nothing was created.
    """
    if runner is None or not runner.started:
        raise MCPError(
            code=INTERNAL_ERROR,
            message="The tasks extension is not running: the server lifespan has not started",
        )
    store = admission.store
    if options.flow_controlled and not keeps_flow_control(store):
        raise flow_control_unsupported(name, getattr(store, "scheme", "custom"))
    gate = None
    if options.concurrency is not None:
        try:
            gate = gate_for(
                runner.app, name, options.concurrency, options.concurrency_key, arguments
            )
        except Exception as error:
            logger.exception("concurrency_key of tool %r raised", name)
            raise concurrency_key_failed(name, error) from None
        if options.concurrency_key is not None and type(arguments) is EncodedJSON:
            # the key function may have changed them
            arguments = EncodedJSON(arguments)
    # dedupe tells callers apart by principal: without authentication there is none, and
    # handing one anonymous caller's task (its id is the credential) to another would give
    # its result away, so an unauthenticated call always starts new work
    owner = current_principal() if options.dedupe is not None else None
    window: float | None = None
    key: str | None = None
    keyed = False  # the key is the caller's idempotency key
    if owner is not None and options.dedupe is not None:
        window = options.dedupe.total_seconds()
        key = dedupe_key(runner.app, owner, name, version, arguments)
    elif idempotency_key is not None and keeps_flow_control(store):
        window, keyed = math.inf, True  # the holder's whole retained lifetime
        key = scoped_key(runner.app, current_principal(), idempotency_key)
    deadline = request_deadline(store)  # every store call of this request: one store_timeout
    with deadline_at(deadline):
        related = await related_of_call(store, context)  # before the record: kept in it
        paused = await runner.pauses.is_paused(name)  # a copy, read at most every second
    queued = gate is None and not paused and runner.saturated()
    caller = Caller.of(context, streams=result_streams)
    record, input_kinds = new_record(
        tool,
        name,
        arguments,
        context,
        runner,
        admission.retention_ms,
        admission.lease_seconds,
        queued,
        version=version,
        gate=gate,
        dedupe=key,
        related=related,
        paused=paused,
        caller=caller,
    )
    job = Job(
        record.task_id,
        name,
        arguments,
        tool=tool,
        queued=queued,
        input_kinds=input_kinds,
        input_timeout=options.timeout_seconds(admission.input_timeout),
        input_responses=context.input_responses,
        request_state=context.request_state,
        caller=caller,
        authenticated=record.owner is not None,
        owner=record.owner,
        related=related,
    )
    waits_in_store = bool(runner.concurrency) and record.lease_owner is None  # gated
    if waits_in_store:  # before `create`: this process may claim it the moment it exists
        runner.accept(job, wake=False)
    try:
        found = await stored(admission, runner, record, window, deadline)
    except BaseException:  # refused, failed, a store's bug, a cancelled request
        runner.forget(record.task_id)
        raise
    if found is not None:  # an identical call's task answers this one
        runner.forget(record.task_id)
        if keyed and not same_call(found, name, arguments):
            raise idempotency_key_reused()
        return found
    observability.created.add(1, {"tool": record.tool})
    observability.transition(record.task_id, record.tool, "working", 1)
    note_created(runner, record, paused)
    if waits_in_store:  # whichever process has a slot of the gate runs it
        runner.accept(job)
    elif runner.concurrency:
        job.replying = True  # the reply goes out first (`jobs.REPLY_TURNS`)
        runner.submit(job)
    return record


def note_created(runner: CreatingRunner, record: TaskRecord, paused: bool) -> None:
    """The first event of the task's history (module doc)."""
    details: dict[str, Any] = {
        "by": runner.owner,
        "app": record.app,
        "owner": record.owner,
        "queued": record.lease_owner is None,
    }
    if record.gate is not None:
        details["gate"] = record.gate
    if paused:
        details["paused"] = True
    runner.history.note(record.task_id, "created", **details)


async def stored(
    admission: Admission,
    runner: CreatingRunner,
    record: TaskRecord,
    window: float | None,
    deadline: float | None,
) -> TaskRecord | None:
    """`store.create(record)`: `None` when created, else the existing task that answers.

    All within the request's one `store_timeout` (`deadline`, `server.monitored_store`):
    the create may take all of it but `READ_BACK_SHARE`, so that when it fails (a
    timeout: it may have committed) `created_after_all` reads back with what is left,
    that share at least, and the answer still comes within `store_timeout`.

    Raises:
        MCPError: a cap refused it, or "Task store unavailable"; nothing was created.
    """
    store = admission.store
    create_until = None
    if deadline is not None:
        create_until = deadline - (deadline - anyio.current_time()) * READ_BACK_SHARE
    with deadline_at(deadline):
        try:
            with deadline_at(create_until):
                if window is None:  # (a third-party store may not know `dedupe_window`)
                    return await store.create(record, caps=admission.caps)
                return await store.create(record, caps=admission.caps, dedupe_window=window)
        except TaskLimitExceeded as exc:
            raise limit_exceeded(exc.limit, exc.value) from None
        except StoreError:
            if not await created_after_all(store, record, runner):
                raise store_unavailable() from None
            return None


async def created_after_all(store: TaskStore, record: TaskRecord, runner: CreatingRunner) -> bool:
    """After a failed `create`: did it commit anyway (a lost reply)? One read, bounded by
    what is left of the request's `store_timeout` (`stored`).

    When the answer is no, or even that read fails, the id is remembered as
    unconfirmed: if the task does exist after all, this process's recovery fails it
    once its lease runs out (no client learned its id).
    """
    if not store.durable:
        return False
    try:
        if await store.get(record.task_id) is not None:
            return True
    except StoreError:
        pass
    if len(runner.unconfirmed) >= UNCONFIRMED_KEPT:  # ids of tasks that never came to be
        runner.unconfirmed.clear()
    runner.unconfirmed.add(record.task_id)
    return False


@functools.lru_cache(maxsize=256)
def milliseconds(interval: timedelta) -> int:
    """`pollIntervalMs` for a tool's interval; cached so retained tasks share the int."""
    return max(1, int(interval.total_seconds() * 1000))


def declared_input_kinds(context: Context) -> frozenset[str]:
    """The input capabilities (`elicitation`, `sampling`, `roots`) this request declared."""
    request = context.request_context
    meta = request.meta if request is not None else None
    capabilities = meta.get(CLIENT_CAPABILITIES_META_KEY) if isinstance(meta, dict) else None
    if not isinstance(capabilities, dict) and request is not None:
        # 2025-11-25: what the session declared at `initialize`
        declared = getattr(request.session, "client_capabilities", None)
        if declared is not None:
            capabilities = declared.model_dump(exclude_none=True)
    if not isinstance(capabilities, dict):
        return frozenset()
    return frozenset(k for k in ("elicitation", "sampling", "roots") if k in capabilities)
