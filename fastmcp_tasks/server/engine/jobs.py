"""A job of the engine, and the small interfaces the engine's parts type against.

`Job` is one task waiting for, or holding, a worker slot in this process.
`TaskRunner` (in `runner`) owns the jobs; the change-feed watcher, the outcome
recorder and task creation only need a few of its attributes, so they type
against `WatchedRunner` and `CreatingRunner` here instead of importing the
runner (which imports them): the engine's import graph stays a tree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
import anyio.lowlevel
from fastmcp.tools.base import Tool

from fastmcp_tasks.server.engine.caller import Caller
from fastmcp_tasks.server.engine.durable import DurableContext
from fastmcp_tasks.server.engine.history import HistoryWriter
from fastmcp_tasks.server.engine.inputs import InputBroker
from fastmcp_tasks.server.engine.pauses import Pauses
from fastmcp_tasks.server.engine.sealed import open_caller
from fastmcp_tasks.server.health import HealthMonitor
from fastmcp_tasks.server.payloads import unopened_reason
from fastmcp_tasks.server.sealing import Sealer
from fastmcp_tasks.stores.base import TaskRecord, TaskStore

#: Event-loop turns a job yields before its tool starts when a request of this process
#: has just created it (`Job.replying`). The handler has returned the task's
#: `CreateTaskResult` by then, but the reply still crosses a task or two (the
#: dispatcher's write, the transport's reader) before the client has it; started at
#: once, the job's first stretch of work (the tool's call, its result's encoding and
#: the store write that records it) ran ahead of those hops and the client waited
#: for it. Two turns carry an in-memory reply to its caller and an HTTP reply onto the
#: socket (`bench.run`: creation p50 0.78x a sync call in memory, from 1.03x).
REPLY_TURNS = 2


async def let_the_reply_go(job: Job) -> None:
    """Before a job its own request just created starts: `REPLY_TURNS` loop turns."""
    if job.replying:
        job.replying = False  # once
        for _ in range(REPLY_TURNS):
            await anyio.lowlevel.checkpoint()


@dataclass(eq=False)
class Job:
    """One task waiting for, or holding, a worker slot in this process."""

    task_id: str
    name: str
    arguments: dict[str, Any]
    tool: Tool | None = None
    #: the record waits (`stores.phases`): its run begins in the store (`start_run`, with
    #: `message`) before the tool body; otherwise it began already (created to start at
    #: once, or begun by the ungated claim of SQLite, Redis or PostgreSQL)
    queued: bool = False
    message: str | None = None  # the statusMessage the task shows as its run starts
    attempt: int = 1  # the run's number: `attempts` once it has begun
    input_kinds: frozenset[str] = frozenset()
    input_timeout: float | None = None
    input_responses: Any = None
    request_state: str | None = None
    started: bool = False
    cancel_requested: bool = False
    #: what the creating request had (token, headers, session): only in the accepting process
    caller: Caller | None = None
    #: why its sealed caller context cannot be opened here: it fails instead (`sealed`)
    caller_error: str | None = None
    #: whether an authenticated principal created the task (the record has an owner)
    authenticated: bool = False
    #: the principal key (`None`: unauthenticated); local slots are shared out by it
    owner: str | None = None
    #: failed attempts already retried (`task_options(retry=...)`)
    retries: int = 0
    #: the related task ids its call named, checked at creation (`server.related`)
    related: tuple[str, ...] = ()
    #: created by a request of this process whose reply is on its way (`REPLY_TURNS`)
    replying: bool = False
    #: leased from the store (queued, gated, retried, recovered), not created here
    from_store: bool = False
    #: handed back because its tool is paused (`pauses`): it did not run here
    held: bool = False
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)

    @classmethod
    def resumed(
        cls,
        record: TaskRecord,
        tool: Tool,
        message: str | None,
        queued: bool,
        accepted: Job | None,
        input_timeout: float | None = None,
        sealer: Sealer | None = None,
    ) -> Job:
        """The job of a task leased from the store (queued, gated, retried or recovered);
        `accepted` is this process's own job for it, when it took the call, else
        `input_timeout` is the tool's, and the caller is opened from the sealed context."""
        context = DurableContext.of(record)
        caller = None if accepted is None else accepted.caller
        error = None
        if accepted is None:
            caller, error = open_caller(sealer, record.task_id, context.sealed_caller)
            error = error or unopened_reason(record, sealer is not None)
        return cls(
            record.task_id,
            record.tool,
            dict(record.arguments or {}),
            tool=tool,
            message=message,
            queued=queued,
            attempt=record.attempts + 1 if queued else max(1, record.attempts),
            input_kinds=context.input_kinds,
            input_timeout=input_timeout if accepted is None else accepted.input_timeout,
            input_responses=context.input_responses,
            request_state=context.request_state,
            caller=caller,
            caller_error=error,
            authenticated=record.owner is not None,
            owner=record.owner,
            retries=record.retries,
            related=context.related,
            from_store=True,
        )

    @property
    def waited(self) -> bool:
        """Whether its run has not begun yet here: a paused tool holds it (`pauses`)."""
        return self.queued or self.from_store


class WatchedRunner(Protocol):
    """What `watcher.ChangeWatcher` needs of the runner it follows the feed for."""

    store: TaskStore
    health: HealthMonitor
    inputs: InputBroker
    owner: str
    app: str | None
    queue_poll: float

    @property
    def stopping(self) -> bool: ...

    def job_ids(self) -> set[str]: ...

    async def cancel(self, task_id: str) -> None: ...


class CreatingRunner(Protocol):
    """What `server.creation` needs of the runner a new task is created for."""

    concurrency: int
    owner: str
    app: str | None
    unconfirmed: set[str]
    history: HistoryWriter
    pauses: Pauses
    sealer: Sealer | None

    @property
    def started(self) -> bool: ...

    def saturated(self) -> bool: ...

    def submit(self, job: Job) -> None: ...

    def accept(self, job: Job, *, wake: bool = True) -> None: ...

    def forget(self, task_id: str) -> None: ...
