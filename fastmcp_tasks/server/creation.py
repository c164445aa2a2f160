"""Building a new task: its record, its durable context, and what a failed `create` means.

The record of a new task is built here and only here: the id (192 bits from
`secrets`), the poll interval, the lease of the runner that will run it (none
for a `concurrency=0` front end, whose tasks wait for a worker), the owning
principal and the application. Its `record.context` is a
`server.engine.durable.DurableContext`, the one module that writes and reads it.
"""

from __future__ import annotations

import functools
import secrets
import sys
import time
from datetime import timedelta
from typing import Any

from fastmcp.server.context import Context
from fastmcp.tools.base import Tool
from mcp_types import CLIENT_CAPABILITIES_META_KEY

from fastmcp_tasks.errors import StoreError
from fastmcp_tasks.server.engine.durable import DurableContext
from fastmcp_tasks.server.engine.jobs import CreatingRunner
from fastmcp_tasks.server.engine.leases import QUEUED_MESSAGE
from fastmcp_tasks.server.ownership import current_principal
from fastmcp_tasks.stores.base import TaskRecord, TaskStore

TASK_ID_BYTES = 24  # 192 bits from `secrets`, 32 URL-safe characters
UNCONFIRMED_KEPT = 10_000


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
    related: tuple[str, ...] = (),
) -> tuple[TaskRecord, frozenset[str]]:
    """The record of a new task, and the input kinds its request declared."""
    now = time.time()
    input_kinds = declared_input_kinds(context)
    responses = context.input_responses
    state = context.request_state
    durable = DurableContext(input_kinds, responses or None, state, version, related)
    leased = bool(runner.concurrency)  # a front end's task waits for a worker, unleased
    record = TaskRecord(
        task_id=new_task_id(),
        tool=sys.intern(name),  # shared by every retained task of this tool
        status="working",
        created_at=now,
        updated_at=now,
        arguments=arguments,
        status_message=QUEUED_MESSAGE if queued else None,
        poll_interval_ms=milliseconds(tool.task_config.poll_interval),
        retention_ms=retention_ms,
        context=durable.dump(),
        attempts=1 if leased else 0,
        owner=current_principal(),
        lease_owner=runner.owner if leased else None,
        lease_expires=now + lease_seconds if leased else None,
        app=runner.app,
    )
    return record, input_kinds


async def created_after_all(store: TaskStore, record: TaskRecord, runner: CreatingRunner) -> bool:
    """After a failed `create`: did it commit anyway (a lost reply)? One bounded read.

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
