"""The 2025-11-25 ("V1") tasks: the same store and engine, the older generation's surface.

A connection initialized at `2025-11-25` (VS Code, FastMCP 3, the 1.x SDKs) gets
the V1 surface; a 2026-07-28 request never does (`tasks/result` and
`tasks/list` stay -32601 there, C54/C55, and no V1 field reaches it):

- `capabilities.tasks` (`list`, `cancel`, `requests.tools.call`) in `initialize`;
  each tool's `execution.taskSupport` in `tools/list` is FastMCP's own;
- `tools/call` with `params.task` on an `optional`/`required` tool creates the
  task exactly as a 2026 call does (one record, one engine) and answers the
  nested V1 `CreateTaskResult` once it is durable; `required` without
  `params.task`, and `forbidden` with it, get -32601;
- `tasks/get` (the V1 `Task`), `tasks/cancel` (the task is `cancelled` before
  the answer; a terminal one is refused with -32602), `tasks/list` (paginated,
  the caller's own tasks: its principal's with authentication, else those its
  session created in this process), `tasks/result` (waits on the change feed
  until the task is terminal, then answers exactly the tool's `CallToolResult`
  or raises its JSON-RPC error, with the related-task `_meta`; a cancelled task
  has no payload: only that `_meta`, as the 1.x SDK's server answers). While it
  waits, the task's progress for the creating session rides its stream
  (`engine.streams`: `LegacyTasks.streams` is the register).

The raw outcome is stored once and projected per era by `wire.legacy`. Unknown
ids and other principals' tasks get the same -32602 as on the 2026 side, and an
expired or purged task tells its owner so (`ownership.missing`), as there. A cancel
and an answer are noted in the task's history as the 2026 handlers note them.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import mcp_types
from fastmcp.server.dependencies import get_context
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types import INVALID_PARAMS, METHOD_NOT_FOUND, RequestParams
from pydantic import Field

from fastmcp_tasks.errors import task_not_found, unreadable_payload
from fastmcp_tasks.server.engine.history import HistoryWriter
from fastmcp_tasks.server.engine.inputs import answer_problem
from fastmcp_tasks.server.engine.streams import ResultStreams
from fastmcp_tasks.server.ownership import current_principal, may_access, missing
from fastmcp_tasks.server.payloads import unreadable
from fastmcp_tasks.stores.base import TaskRecord, TaskStore, get_many
from fastmcp_tasks.stores.listing import PageKey, page_key
from fastmcp_tasks.stores.peeking import peek
from fastmcp_tasks.wire.legacy import legacy_call_result, legacy_task, related
from fastmcp_tasks.wire.models import TaskIdParams
from fastmcp_tasks.wire.render import could_be_task_id

logger = logging.getLogger("fastmcp_tasks.legacy")

PAGE = 50
SESSIONS_KEPT = 10_000
SESSION_TASKS_KEPT = 1_000


def _session_id(ctx: ServerRequestContext[Any, Any]) -> str | None:
    """The stable id of the 2025-11-25 session serving `ctx` (as `Context.session_id`)."""
    try:
        return get_context().session_id
    except RuntimeError:
        return None


class ListParams(RequestParams):
    """`tasks/list` params: an optional opaque cursor."""

    cursor: str | None = Field(default=None)


def no_task_support(name: str) -> MCPError:
    """A forbidden tool called with `params.task` (V1: SHOULD be -32601)."""
    return MCPError(
        code=METHOD_NOT_FOUND,
        message=f"Tool {name!r} does not support task-augmented execution",
    )


def task_required(name: str) -> MCPError:
    """A required tool called without `params.task` (V1: MUST be -32601)."""
    return MCPError(
        code=METHOD_NOT_FOUND,
        message=f"Tool {name!r} must be called as a task: send params.task",
    )


def _cursor(key: PageKey) -> str:
    return base64.urlsafe_b64encode(json.dumps(list(key)).encode()).decode()


def _page_key(cursor: str) -> PageKey:
    try:
        created, task_id = json.loads(base64.urlsafe_b64decode(cursor.encode()))
        return (float(created), str(task_id))
    except (ValueError, TypeError, binascii.Error):
        raise MCPError(code=INVALID_PARAMS, message="Invalid cursor") from None


class LegacyTasks:
    """The V1 task methods over one store."""

    def __init__(self, store: TaskStore, history: HistoryWriter | None = None) -> None:
        self.store = store
        self.history = history if history is not None else HistoryWriter(store)
        #: without authentication, `tasks/list` shows the tasks a session created here
        #: (session id -> task ids, the most recent `SESSIONS_KEPT` sessions)
        self._created: OrderedDict[str, list[str]] = OrderedDict()
        #: input request keys already put to a client, per task: key -> the id of the
        #: session it went to, on any of its streams. Each key goes once per session: a
        #: `tasks/result` from another one (a client that reconnected, or another client)
        #: is asked again, since the first may be gone without ever answering.
        self.asked: dict[str, dict[str, str | None]] = {}
        #: tasks a `tasks/result` is waiting on in this process (it carries their input)
        self.waiting: dict[str, int] = {}
        #: those requests, by task: their streams carry the creating session's progress
        self.streams = ResultStreams()
        #: followers (`legacy_push.follow`) to start once the creating session shows it
        #: knows the task: its first `tasks/get` or `tasks/result` (task id -> (session, start))
        self.starting: OrderedDict[str, tuple[str | None, Callable[[], None]]] = OrderedDict()

    def follow_when_known(
        self, task_id: str, session_id: str | None, start: Callable[[], None]
    ) -> None:
        """Run `start` at the creating session's first `tasks/get` / `tasks/result` of the task.

        Pushing earlier races the `CreateTaskResult`: a client may hear of a task (or be
        asked a question about it) before it knows the task.
        """
        self.starting[task_id] = (session_id, start)
        while len(self.starting) > SESSIONS_KEPT:
            self.starting.popitem(last=False)

    def _known(self, task_id: str, session_id: str | None) -> None:
        pending = self.starting.get(task_id)
        if pending is not None and pending[0] == session_id:
            del self.starting[task_id]
            pending[1]()

    def remember(self, session_id: str | None, task_id: str) -> None:
        """Note that session `session_id` created `task_id` (an unauthenticated `tasks/list`)."""
        if session_id is None:
            return
        ids = self._created.pop(session_id, [])
        ids.append(task_id)
        self._created[session_id] = ids[-SESSION_TASKS_KEPT:]
        while len(self._created) > SESSIONS_KEPT:
            self._created.popitem(last=False)

    async def get(
        self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams
    ) -> dict[str, Any]:
        """`tasks/get`: the V1 `Task`, without the result."""
        record = await self._visible(params.task_id)
        self._known(params.task_id, _session_id(ctx))
        return legacy_task(record)

    async def cancel(
        self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams
    ) -> dict[str, Any]:
        """`tasks/cancel`: `cancelled` before the answer; a terminal task is refused."""
        record = await self._visible(params.task_id)
        if record.is_terminal:
            raise MCPError(
                code=INVALID_PARAMS,
                message=f"Task {params.task_id} is already {record.status}: it cannot be cancelled",
            )
        await self.store.request_cancel(params.task_id)  # the runner stops the tool
        self.history.note(params.task_id, "cancel_requested", by="client")
        cancelled = await self.store.transition(params.task_id, "cancelled", status_message=None)
        if cancelled is not None:
            self.history.note(params.task_id, "finished", outcome="cancelled")
        if cancelled is None:  # it ended in between
            record = await self._visible(params.task_id)
            raise MCPError(
                code=INVALID_PARAMS,
                message=f"Task {params.task_id} is already {record.status}: it cannot be cancelled",
            )
        return legacy_task(cancelled)

    async def result(
        self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams
    ) -> dict[str, Any]:
        """`tasks/result`: wait until the task is terminal, then its exact outcome.

        While it waits in `input_required`, each outstanding request goes to the
        client on this request's stream, tagged with the related-task `_meta`, and
        the answer resumes the task (as a `tasks/update` would on 2026). While it
        waits, the task's progress for this session rides this stream too.
        """
        task_id = params.task_id
        record = await self._visible(task_id)
        if record.is_terminal:
            return outcome(record)
        session_id = _session_id(ctx)
        self.waiting[task_id] = self.waiting.get(task_id, 0) + 1
        self._known(task_id, session_id)
        try:
            with self.streams.waiting(task_id, ctx.session, ctx.request_id, session_id):
                return await self._wait(ctx, task_id, session_id)
        finally:
            self.waiting[task_id] -= 1
            if not self.waiting[task_id]:
                del self.waiting[task_id]

    async def _wait(
        self, ctx: ServerRequestContext[Any, Any], task_id: str, session_id: str | None
    ) -> dict[str, Any]:
        """`tasks/result`'s wait on the change feed; input goes on this request's stream."""
        async with self.store.changes(frozenset({task_id})) as feed:
            changes = aiter(feed)
            while True:
                record = await self._visible(task_id)  # what changed before the feed saw it
                if record.is_terminal:
                    self.forget(task_id)
                    return outcome(record)
                if record.status == "input_required":
                    await self.put_input(ctx.session, ctx.request_id, record, session_id)
                await anext(changes)

    async def put_input(
        self, session: Any, related_request_id: Any, record: TaskRecord, session_id: str | None
    ) -> None:
        """Put the task's outstanding requests to the client of session `session_id`, each
        key once per session: on the stream of request `related_request_id`, or the
        session's own when it is None."""
        asked = self.asked.setdefault(record.task_id, {})
        for key, request in (record.input_requests or {}).items():
            if key in asked and asked[key] == session_id:
                continue
            asked[key] = session_id
            try:
                answer = await ask_client(session, related_request_id, record.task_id, request)
            except MCPError as exc:
                # a client that cannot answer (no handler) must not leave the task parked:
                # the tool's `ctx.elicit` sees the user's cancel, as for an unanswered request
                logger.info("Client refused input request %s: %s", key, exc.error.message)
                if request.get("method") != "elicitation/create":
                    continue
                answer = {"action": "cancel"}
            if answer is not None and answer_problem(request, answer) is None:
                if await self.store.answer_input(record.task_id, {key: answer}):
                    self.history.note(record.task_id, "input_answered", keys=[key])

    def forget(self, task_id: str) -> None:
        """The task ended: drop what was kept for its input and its pushes."""
        self.asked.pop(task_id, None)
        self.starting.pop(task_id, None)

    async def list_tasks(
        self, ctx: ServerRequestContext[Any, Any], params: ListParams
    ) -> dict[str, Any]:
        """`tasks/list`: the caller's own tasks, newest first, `PAGE` at a time."""
        before = None if params.cursor is None else _page_key(params.cursor)
        principal = current_principal()
        if principal is not None and hasattr(self.store, "list_tasks"):
            records = await self.store.list_tasks(owner=principal, limit=PAGE + 1, before=before)
        else:
            records = await self._session_tasks(_session_id(ctx), before)
        page = records[:PAGE]
        result: dict[str, Any] = {"tasks": [legacy_task(r) for r in page]}
        if len(records) > PAGE:
            result["nextCursor"] = _cursor(page_key(page[-1]))
        return result

    async def _session_tasks(
        self, session_id: str | None, before: PageKey | None
    ) -> list[TaskRecord]:
        ids = self._created.get(session_id, []) if session_id is not None else []
        found = await get_many(self.store, ids)  # one read where the store can
        records = [found[i] for i in dict.fromkeys(ids) if i in found]
        records.sort(key=page_key, reverse=True)
        return [r for r in records if before is None or page_key(r) < before][: PAGE + 1]

    async def _visible(self, task_id: str) -> TaskRecord:
        """As `handlers.TaskMethods._visible`: without its arguments and context."""
        record = await peek(self.store, task_id) if could_be_task_id(task_id) else None
        if record is None:
            raise await missing(self.store, task_id)
        if not may_access(record, current_principal()):
            raise task_not_found(task_id)
        return record


#: the 2025-11-25 server-to-client requests a task may put, and their result types
_REQUESTS: dict[str, tuple[type[Any], type[Any]]] = {
    "elicitation/create": (mcp_types.ElicitRequest, mcp_types.ElicitResult),
    "sampling/createMessage": (mcp_types.CreateMessageRequest, mcp_types.CreateMessageResult),
    "roots/list": (mcp_types.ListRootsRequest, mcp_types.ListRootsResult),
}


async def ask_client(
    session: Any, related_request_id: Any, task_id: str, request: dict[str, Any]
) -> dict[str, Any] | None:
    """Send one input request to the client (on request `related_request_id`'s stream, or
    the session's own); its answer, as a wire dict."""
    kinds = _REQUESTS.get(str(request.get("method")))
    if kinds is None:
        return None
    request_type, result_type = kinds
    params = {**(request.get("params") or {}), "_meta": related(task_id)}
    typed = request_type.model_validate({"method": request["method"], "params": params})
    metadata = None
    if related_request_id is not None:
        metadata = ServerMessageMetadata(related_request_id=related_request_id)
    result = await session.send_request(typed, result_type, metadata=metadata)
    answer: dict[str, Any] = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    return answer


def outcome(record: TaskRecord) -> dict[str, Any]:
    """What `tasks/result` answers for a terminal task (or raises)."""
    if record.status == "completed":
        if (reason := unreadable(record)) is not None:  # sealed with keys this one lacks
            raise unreadable_payload(reason)
        return legacy_call_result(record.result or {}, record.task_id)
    if record.status == "failed":
        error = record.error or {}
        raise MCPError(
            code=int(error.get("code", -32603)),
            message=str(error.get("message", "Task failed")),
            data=error.get("data"),
        )
    return {"_meta": related(record.task_id)}  # cancelled: no payload (as the 1.x SDK answers)
