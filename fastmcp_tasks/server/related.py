"""Related tasks (draft): the task ids a `tools/call` names, as a tool sees them.

A `tools/call` may carry `_meta["io.modelcontextprotocol/relatedTaskIds"]`, a list
of task ids the call relates to. It is an advisory hint: it never asks for a task
to be created, and ids the caller could not read are dropped without a word. This
module owns that hint on the server:

- `allowed_related(store, meta, principal)`: the ids of a request `_meta` a caller
  may name (well-formed task ids, first occurrence only, at most
  `MAX_RELATED_TASKS`, of existing tasks that principal may access), read in one
  round trip. Task creation (`TasksExtension._create_task`, via `related_of_call`)
  checks them once and keeps them in the task's durable context (`engine.durable`),
  so a worker or a recovered run sees the same ids;
- `related_tasks()` (and the dependency form `RelatedTasks()`): inside a tool,
  the related tasks' current state (`RelatedTask`), read from the store at call
  time. In a task the ids are the ones checked at creation; in a synchronous call
  they are the current request's, checked now. Tasks removed since are left out;
- `serving_related`: wraps `intercept_tool_call` so a synchronous call knows which
  store its server's tasks live in (a ContextVar, reset after the call).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

from fastmcp.dependencies import Depends
from fastmcp.server.context import Context
from fastmcp.server.dependencies import get_context

from fastmcp_tasks.errors import StoreError, store_unavailable
from fastmcp_tasks.server.engine.context import current_task
from fastmcp_tasks.server.ownership import current_principal, may_access
from fastmcp_tasks.stores.base import TaskRecord, TaskStore, get_many
from fastmcp_tasks.wire.names import RELATED_TASKS_META_KEY, TaskStatus
from fastmcp_tasks.wire.render import could_be_task_id

#: Most related ids one call may name; the rest are ignored.
MAX_RELATED_TASKS = 64

#: The store of the server serving the current `tools/call` (a synchronous call reads it).
_serving: ContextVar[TaskStore | None] = ContextVar("fastmcp_tasks_related", default=None)

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


@dataclass(frozen=True, slots=True)
class RelatedTask:
    """A related task as it stands when `related_tasks()` reads it.

    Attributes:
        task_id: the task's id.
        tool: the tool it runs.
        status: `working`, `input_required`, `completed`, `failed` or `cancelled`.
        status_message: its status message, if any.
        created_at: when it was created (UTC).
        last_updated_at: when it last changed (UTC).
        result: the `CallToolResult` (a wire dict) of a completed task, else `None`.
        error: the JSON-RPC error object of a failed task, else `None`.
    """

    task_id: str
    tool: str
    status: TaskStatus
    status_message: str | None
    created_at: datetime
    last_updated_at: datetime
    result: dict[str, Any] | None
    error: dict[str, Any] | None

    @classmethod
    def of(cls, record: TaskRecord) -> RelatedTask:
        return cls(
            task_id=record.task_id,
            tool=record.tool,
            status=record.status,
            status_message=record.status_message,
            created_at=datetime.fromtimestamp(record.created_at, UTC),
            last_updated_at=datetime.fromtimestamp(record.updated_at, UTC),
            result=record.result if record.status == "completed" else None,
            error=record.error if record.status == "failed" else None,
        )


def requested_related(meta: Mapping[str, Any] | None) -> list[str]:
    """The ids `meta` names: well-formed task ids, each once, first order, capped."""
    named = meta.get(RELATED_TASKS_META_KEY) if isinstance(meta, Mapping) else None
    if not isinstance(named, list):
        return []
    ids: dict[str, None] = {}
    for task_id in named:
        if isinstance(task_id, str) and could_be_task_id(task_id):
            ids.setdefault(task_id, None)
            if len(ids) >= MAX_RELATED_TASKS:
                break
    return list(ids)


async def allowed_related(
    store: TaskStore, meta: Mapping[str, Any] | None, principal: str | None
) -> tuple[str, ...]:
    """The related ids of a request `_meta` that `principal` may name, in order.

    Malformed, duplicate, unknown and foreign ids are dropped silently, and anything
    that is not a list under the key is ignored: the hint never fails a call. A
    `_meta` without the key costs no store read.
    """
    ids = requested_related(meta)
    if not ids:
        return ()
    found = await get_many(store, ids)
    return tuple(i for i in ids if (r := found.get(i)) is not None and may_access(r, principal))


async def related_of_call(store: TaskStore, context: Context) -> tuple[str, ...]:
    """`allowed_related` for the `tools/call` being served (task creation checks them);
    a store failure is the -32603 "Task store unavailable" creation itself answers."""
    request = context.request_context
    meta = request.meta if request is not None else None
    try:
        return await allowed_related(store, meta, current_principal())
    except StoreError:
        raise store_unavailable() from None


async def related_tasks() -> list[RelatedTask]:
    """The tasks the current `tools/call` relates to, as they stand now (inside a tool).

    In a tool running as a task: the ids its call named that its caller could see
    when the task was created (kept with the task, so a worker sees them too). In a
    synchronous call: the current request's ids, checked now. Either way each task
    is read from the store at this call; a task removed since is left out. Without
    related ids, or on a server without the tasks extension, the list is empty.

    Raises:
        RuntimeError: called outside a tool call.
        StoreError: the store could not be read.
    """
    running = current_task()
    if running is not None:
        store, ids = running.store, list(running.related)
    else:
        request = get_context().request_context  # RuntimeError outside a request
        serving = _serving.get()
        if request is None or serving is None:
            return []
        store = serving
        ids = list(await allowed_related(store, request.meta, current_principal()))
    if not ids:
        return []
    found = await get_many(store, ids)
    return [RelatedTask.of(found[i]) for i in ids if i in found]


def RelatedTasks() -> list[RelatedTask]:
    """`related_tasks()` as a parameter default, resolved when the tool is called.

        @mcp.tool(task=True)
        async def summarize(related: list[RelatedTask] = RelatedTasks()) -> str: ...

    The parameter is hidden from the tool's input schema, as every dependency is.
    """
    return Depends(related_tasks)


def serving_related(intercept: F) -> F:
    """Wrap `TasksExtension.intercept_tool_call`: a synchronous call's tool reads the
    extension's store through `related_tasks()` while the call runs."""

    @functools.wraps(intercept)
    async def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        token = _serving.set(self._store)
        try:
            return await intercept(self, *args, **kwargs)
        finally:
            _serving.reset(token)

    return cast(F, wrapped)


__all__ = [
    "MAX_RELATED_TASKS",
    "RelatedTask",
    "RelatedTasks",
    "allowed_related",
    "related_of_call",
    "related_tasks",
    "requested_related",
    "serving_related",
]
