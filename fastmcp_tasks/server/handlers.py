"""`tasks/get`, `tasks/update` and `tasks/cancel`: read params, ask the store, render.

With 2025-11-25 tasks on (`server.legacy`), `tasks/get` and `tasks/cancel` are
bound for both generations and each request goes to its era's handler;
`tasks/result` and `tasks/list` are bound for 2025-11-25 only (-32601 on 2026).

Each handler first applies the two gates every task method shares:

1. the per-request opt-in (C25, C34, C39): a request whose `_meta` does not
   declare the tasks extension gets -32021, whatever its task id;
2. over Streamable HTTP, an `Mcp-Name` header that names another task than
   `params.taskId` gets -32020 (C50). A missing header is accepted.

With `Limits.min_poll_fraction` set, `tasks/get` of one task is paced
(`pacing.PollPacer`, C19). Unknown ids, and tasks of another principal, get
the same -32602 (C14, C24); so do expired and purged tasks, except for the
principal that owned them, who hears when and why (`ownership.missing`, read
from the store's tombstone on the miss path only). However many store calls one
of these requests makes, it answers within one `store_timeout`
(`monitored_store.request_deadline`). Handlers never talk to the
runner: a cancel is a store write that the runner hears about.

What they change is noted in the task's history (`engine.history`): the keys answered
(`input_answered`), a client's cancel request (`cancel_requested`, `by: "client"`) and
the ending it makes at once (`finished`).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

from fastmcp.server.extensions import MethodBinding, read_client_extension_settings
from mcp.server.context import ServerRequestContext
from mcp.shared.inbound import decode_header_value
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from fastmcp_tasks.errors import (
    StoreError,
    header_mismatch,
    invalid_answer,
    missing_capability,
    polling_too_fast,
    store_unavailable,
    task_not_found,
    too_large,
    unreadable_payload,
)
from fastmcp_tasks.server.engine.history import HistoryWriter, ending
from fastmcp_tasks.server.engine.inputs import answer_problem
from fastmcp_tasks.server.engine.leases import CANCELLED_BEFORE_START
from fastmcp_tasks.server.engine.outcomes import CANCELLED_MESSAGE
from fastmcp_tasks.server.legacy import LegacyTasks, ListParams
from fastmcp_tasks.server.limits import Limits
from fastmcp_tasks.server.monitored_store import deadline_at, request_deadline
from fastmcp_tasks.server.ownership import current_principal, may_access, missing
from fastmcp_tasks.server.pacing import PollPacer
from fastmcp_tasks.server.payloads import unreadable
from fastmcp_tasks.stores.base import TaskRecord, TaskStore
from fastmcp_tasks.stores.peeking import peek
from fastmcp_tasks.stores.settling import settle
from fastmcp_tasks.wire.legacy import LEGACY_VERSION, METHOD_LIST, METHOD_RESULT
from fastmcp_tasks.wire.models import TaskIdParams, UpdateTaskParams
from fastmcp_tasks.wire.names import (
    ACK,
    METHOD_CANCEL,
    METHOD_GET,
    METHOD_UPDATE,
    TASKS_EXTENSION_ID,
)
from fastmcp_tasks.wire.render import could_be_task_id, render_get_result

MODERN = frozenset(MODERN_PROTOCOL_VERSIONS)
#: The status a parked task is cancelled from (`TaskMethods.cancel`).
PARKED = frozenset({"input_required"})


def check_request(ctx: ServerRequestContext[Any, Any], task_id: str, method: str) -> None:
    """The gates every task method applies before touching the store."""
    if read_client_extension_settings(ctx, TASKS_EXTENSION_ID) is None:
        raise missing_capability(f"{method} needs the tasks extension")
    request = ctx.request
    if request is not None:
        headers = getattr(request, "headers", None)
        raw = headers.get("mcp-name") if headers is not None else None
        if raw is not None:
            try:
                named = decode_header_value(raw)
            except ValueError:
                named = raw
            if named != task_id:
                raise header_mismatch(raw, task_id)


Handler = Callable[[ServerRequestContext[Any, Any], Any], Awaitable[dict[str, Any]]]


def _store_errors(handler: Handler, store: TaskStore | None = None) -> Handler:
    """A store failure becomes a clear -32603, not an anonymous internal error. With
    `store`, the request's store calls share one `store_timeout` (`monitored_store`)."""

    @functools.wraps(handler)
    async def guarded(ctx: ServerRequestContext[Any, Any], params: Any) -> dict[str, Any]:
        try:
            with deadline_at(None if store is None else request_deadline(store)):
                return await handler(ctx, params)
        except StoreError:
            raise store_unavailable() from None  # the monitor logged the cause

    return guarded


def _by_era(modern: Handler, legacy: Handler) -> Handler:
    """One method served on both generations: each request goes to its era's handler."""

    async def dispatch(ctx: ServerRequestContext[Any, Any], params: Any) -> dict[str, Any]:
        if ctx.protocol_version in MODERN:
            return await modern(ctx, params)
        return await legacy(ctx, params)

    return dispatch


class TaskMethods:
    """The task methods bound to one store (and the 2025-11-25 ones, with `legacy`)."""

    def __init__(
        self,
        store: TaskStore,
        limits: Limits | None = None,
        legacy: LegacyTasks | None = None,
        history: HistoryWriter | None = None,
    ) -> None:
        self.store = store
        self.limits = limits or Limits()
        self.legacy = legacy
        self.history = history if history is not None else HistoryWriter(store)
        fraction = self.limits.min_poll_fraction
        self.pacer = None if fraction is None else PollPacer(fraction, self.limits.poll_burst)
        #: The modern-era `tasks/get` as `bindings` binds it (`direct_polls` calls it too),
        #: and the handler of the `tasks/get` binding itself (the same, or both eras').
        self.modern_get: Handler = _store_errors(self.get, store)
        self.bound_get: Handler = self.modern_get

    def bindings(self) -> list[MethodBinding]:
        """`tasks/get`, `tasks/update` and `tasks/cancel` answer within one `store_timeout`;
        the 2025-11-25 `tasks/result` waits for the task, and `tasks/list` is a listing."""
        store = self.store
        self.modern_get = _store_errors(self.get, store)  # `get` as it is now
        update = _store_errors(self.update, store)
        updating = MethodBinding(METHOD_UPDATE, UpdateTaskParams, update, MODERN)
        legacy = self.legacy
        if legacy is None:
            return [
                MethodBinding(METHOD_GET, TaskIdParams, self._bind_get(self.modern_get), MODERN),
                updating,
                MethodBinding(
                    METHOD_CANCEL, TaskIdParams, _store_errors(self.cancel, store), MODERN
                ),
            ]
        both, old = MODERN | {LEGACY_VERSION}, frozenset({LEGACY_VERSION})
        get, cancel = _by_era(self.get, legacy.get), _by_era(self.cancel, legacy.cancel)
        return [
            MethodBinding(
                METHOD_GET, TaskIdParams, self._bind_get(_store_errors(get, store)), both
            ),
            updating,
            MethodBinding(METHOD_CANCEL, TaskIdParams, _store_errors(cancel, store), both),
            MethodBinding(METHOD_RESULT, TaskIdParams, _store_errors(legacy.result), old),
            MethodBinding(METHOD_LIST, ListParams, _store_errors(legacy.list_tasks), old),
        ]

    def _bind_get(self, handler: Handler) -> Handler:
        self.bound_get = handler
        return handler

    async def get(
        self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams
    ) -> dict[str, Any]:
        """`tasks/get`: the DetailedTask for the current status (C22, C23). No side effects."""
        check_request(ctx, params.task_id, METHOD_GET)
        record = await self._visible(params.task_id)
        if self.pacer is not None:
            interval = record.poll_interval_ms
            wait = self.pacer.retry_after_ms(params.task_id, interval)
            if wait is not None and interval is not None:
                raise polling_too_fast(self.pacer.fraction, interval, wait)
        if (reason := unreadable(record)) is not None:  # sealed with keys this one lacks
            raise unreadable_payload(reason)
        return render_get_result(record)

    async def update(
        self, ctx: ServerRequestContext[Any, Any], params: UpdateTaskParams
    ) -> dict[str, Any]:
        """`tasks/update`: accept answers for outstanding keys, ignore the rest (C32-C37)."""
        check_request(ctx, params.task_id, METHOD_UPDATE)
        record = await self._visible(params.task_id)
        if (over := self.limits.over("max_input_bytes", params.input_responses)) is not None:
            raise too_large("inputResponses", "max_input_bytes", *over)
        outstanding = record.input_requests or {}
        for key, answer in params.input_responses.items():
            request = outstanding.get(key)
            problem = None if request is None else answer_problem(request, answer)
            if problem is not None:
                raise invalid_answer(key, problem)
        # only answers to outstanding keys reach the store (the rest are acked, C35)
        answers = {k: v for k, v in params.input_responses.items() if k in outstanding}
        if not answers:
            return dict(ACK)
        accepted = await self.store.answer_input(params.task_id, answers)
        if accepted is None:
            raise await missing(self.store, params.task_id)
        if accepted:
            self.history.note(params.task_id, "input_answered", keys=sorted(accepted))
        return dict(ACK)

    async def cancel(
        self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams
    ) -> dict[str, Any]:
        """`tasks/cancel`: record the request and ack; terminal tasks are left as they are.

        The ack comes after the state a client reads next: a task that runs nothing now
        ends `cancelled` before it. That is one waiting in the store (a front end's
        queue, a gate, a retry's backoff: no process runs it to hear the request; a
        claim racing this sees `cancel_requested` and records the same) and one parked
        in `input_required` (its run waits for answers; compare-and-set from that
        status, so an answer that resumed it first leaves the ending to its run). The
        process running a parked task hears the request and stops the run; its own
        `cancelled` then finds the task already so. A `working` task ends when its run
        stops (C40).
        """
        check_request(ctx, params.task_id, METHOD_CANCEL)
        await self._visible(params.task_id)
        task_id = params.task_id
        record = await self.store.request_cancel(task_id)
        if record is None:
            raise await missing(self.store, task_id)
        if record.is_active:
            self.history.note(task_id, "cancel_requested", by="client")
        if record.is_active and record.lease_owner is None:  # (settle: nothing read back)
            message: str | None = CANCELLED_BEFORE_START
            ended = await settle(self.store, task_id, "cancelled", status_message=message)
        elif record.status == "input_required":
            message = CANCELLED_MESSAGE
            ended = await settle(
                self.store, task_id, "cancelled", expect=PARKED, status_message=message
            )
        else:
            message, ended = None, False
        if ended:
            self.history.note(task_id, "finished", **ending("cancelled", message=message))
        return dict(ACK)

    async def _visible(self, task_id: str) -> TaskRecord:
        """The task, if it exists and the caller may see it; else -32602 (C14, C24).
        Without its arguments and context, which no handler here reads (`stores.peeking`)."""
        record = await peek(self.store, task_id) if could_be_task_id(task_id) else None
        if record is None:
            raise await missing(self.store, task_id)
        if not may_access(record, current_principal()):
            raise task_not_found(task_id)
        return record
