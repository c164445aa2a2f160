"""The operator routes: history, workers, queues and pauses, bulk actions, the audit log.

Every action goes through `fastmcp_tasks.actions` (so it is audited, with the label of
the request's token as the actor: `security.request_identity`), behind the same
guard as every POST (`Kit.post_form`: CSRF, same origin, not read-only).

    GET  /api/tasks/{id}/history   the task's stored events, in words too (`history`)
    GET  /workers, /api/workers    the registry merged with the lease holders (`registry`)
    GET  /queues, /api/queues      each app's tools, pauses, no-worker warnings (`queues`)
    POST /queues/pause, /queues/resume     form: app, tool
    POST /bulk/preview             form: action (cancel|purge), status, tool, owner, q
    POST /bulk/confirm             form: selection (the preview's token: `selections`)
    GET  /audit, /api/audit        the audit log, newest first (`?limit=`, 1..1000)

What needs the store's operator records (`stores.operations`: history, registry,
pauses, audit, purging a chosen set) says so plainly on a store without them; a
bulk cancel works on every store. The app (`dashboard.app`) also calls
`history_html`, `overview_alerts` and `bulk_html` for the pages and
the single cancel it serves itself.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from fastmcp_tasks import actions
from fastmcp_tasks.dashboard import ops_pages, worker_pages
from fastmcp_tasks.dashboard.history import history_json
from fastmcp_tasks.dashboard.index import TaskIndex, TaskQuery, TaskSummary
from fastmcp_tasks.dashboard.live import Hub
from fastmcp_tasks.dashboard.pages import View
from fastmcp_tasks.dashboard.queues import Board, board
from fastmcp_tasks.dashboard.registry import worker_views
from fastmcp_tasks.dashboard.security import Refusal, request_identity
from fastmcp_tasks.dashboard.selections import Selections, filter_from_form
from fastmcp_tasks.errors import ConfigurationError
from fastmcp_tasks.stores.base import TaskRecord, get_many
from fastmcp_tasks.stores.listing import ListableTaskStore
from fastmcp_tasks.stores.operations import OperableTaskStore, history_of, operable

Handler = Callable[[Request], Awaitable[Response]]
#: Longest app or tool name a pause form takes.
MAX_NAME = 200
#: Most audit entries one request reads.
MAX_AUDIT_PAGE = 1000
#: What every audit entry of the dashboard's actions adds to its details (the CLI adds
#: its user and host): the actor alone is a label, which could also be a CLI's.
VIA = {"via": "dashboard"}


@dataclass(frozen=True)
class Kit:
    """What the operator routes need from the app that serves them (`dashboard.app`)."""

    store: ListableTaskStore
    index: TaskIndex
    hub: Hub
    lease_seconds: float
    selections: Selections
    route: Callable[[Handler], Handler]  # errors as pages / JSON, the lazy start
    view: Callable[[Request], View]
    post_form: Callable[[Request], Awaitable[dict[str, str]]]  # every POST check
    record_or_404: Callable[[str], Awaitable[TaskRecord]]

    @property
    def ops(self) -> OperableTaskStore | None:
        return operable(self.store)


def actor(request: Request) -> str:
    """Who acts: the label of the request's token (`dashboard` without tokens)."""
    return request_identity(request.scope).label


async def history_html(kit: Kit, record: TaskRecord, now: float) -> str:
    """The detail page's History section, read from the store."""
    events = await history_of(kit.store, record.task_id)
    return ops_pages.history_section(record.task_id, events, now)


async def _board(kit: Kit, now: float) -> Board | None:
    ops = kit.ops
    if ops is None:
        return None
    return board(kit.index, await ops.workers(), await ops.paused(), now)


async def overview_alerts(kit: Kit, now: float) -> str:
    """The no-worker and pause warnings on the overview (nothing without a registry)."""
    found = await _board(kit, now)
    return worker_pages.alerts_box(None if found is None else found.warnings)


def bulk_html(kit: Kit, v: View, query: TaskQuery) -> str:
    """The bulk action form under a task list of `query`."""
    params = query.params(before=None, limit=None)
    return ops_pages.bulk_form(v, params, purge=kit.ops is not None)


def _summaries(kit: Kit, records: dict[str, TaskRecord], ids: Iterable[str]) -> list[TaskSummary]:
    found = []
    for task_id in ids:
        summary = kit.index.get(task_id)
        if summary is None and task_id in records:
            summary = TaskSummary.of(records[task_id])
        if summary is not None:
            found.append(summary)
    return found


def operation_routes(kit: Kit) -> list[Route]:
    """The routes of the module docstring, wrapped by `kit.route`."""

    def needs_records(what: str) -> OperableTaskStore:
        ops = kit.ops
        if ops is None:
            raise Refusal(
                400,
                f"{what} needs a store that keeps operator records; "
                f"{type(kit.store).__name__} does not (see fastmcp_tasks.stores.operations).",
            )
        return ops

    async def api_history(request: Request) -> Response:
        record = await kit.record_or_404(request.path_params["task_id"])
        events = await history_of(kit.store, record.task_id)
        return JSONResponse(history_json(record.task_id, events, kit.view(request).now))

    async def workers(request: Request) -> Response:
        v = kit.view(request)
        ops = kit.ops
        registered = None if ops is None else await ops.workers()
        views = worker_views(registered, kit.index, v.now, kit.lease_seconds)
        found = (
            None if ops is None else board(kit.index, registered or [], await ops.paused(), v.now)
        )
        counts = kit.index.counts() if kit.index.loaded else None
        page = worker_pages.workers_page(
            v,
            counts,
            views,
            kit.index.loaded,
            registered is not None,
            None if found is None else found.warnings,
        )
        return HTMLResponse(page)

    async def api_workers(request: Request) -> Response:
        now = kit.view(request).now
        ops = kit.ops
        registered = None if ops is None else await ops.workers()
        views = worker_views(registered, kit.index, now, kit.lease_seconds)
        return JSONResponse([w.to_json(now) for w in views])

    async def queues(request: Request) -> Response:
        v = kit.view(request)
        return HTMLResponse(worker_pages.queues_page(v, await _board(kit, v.now), actor(request)))

    async def api_queues(request: Request) -> Response:
        found = await _board(kit, kit.view(request).now)
        if found is None:
            return JSONResponse({"available": False, "queues": [], "pauses": [], "warnings": []})
        return JSONResponse({"available": True, **found.to_json()})

    def names(form: dict[str, str]) -> tuple[str, str]:
        app, tool = form.get("app", "").strip(), form.get("tool", "").strip()
        if not tool or len(tool) > MAX_NAME or len(app) > MAX_NAME:
            raise Refusal(
                400, f"A pause names a tool (and its app), each at most {MAX_NAME} characters."
            )
        return app, tool

    async def pause(request: Request) -> Response:
        form = await kit.post_form(request)
        needs_records("Pausing a tool")
        app, tool = names(form)
        await actions.pause_tool(kit.store, app, tool, actor(request), context=VIA)
        return RedirectResponse(f"{request.scope.get('root_path', '')}/queues", 303)

    async def resume(request: Request) -> Response:
        form = await kit.post_form(request)
        needs_records("Resuming a tool")
        app, tool = names(form)
        await actions.resume_tool(kit.store, app, tool, actor(request), context=VIA)
        return RedirectResponse(f"{request.scope.get('root_path', '')}/queues", 303)

    async def audit(request: Request) -> Response:
        ops = kit.ops
        entries = None if ops is None else await ops.audit(100)
        return HTMLResponse(ops_pages.audit_page(kit.view(request), entries))

    async def api_audit(request: Request) -> Response:
        text = request.query_params.get("limit", "100").strip()
        if not text.isdigit() or not 1 <= int(text) <= MAX_AUDIT_PAGE:
            raise Refusal(400, f"limit must be a whole number 1..{MAX_AUDIT_PAGE}")
        ops = kit.ops
        entries = [] if ops is None else await ops.audit(int(text))
        return JSONResponse(
            {"available": ops is not None, "entries": [e.to_json() for e in entries]}
        )

    async def bulk_preview(request: Request) -> Response:
        form = await kit.post_form(request)
        action = form.get("action", "")
        try:
            where = filter_from_form(form, action)
        except ValueError as exc:
            raise Refusal(400, str(exc)) from None
        if action == "purge":
            needs_records("Purging the matching tasks")
        selection = await actions.select(kit.store, where)
        who = actor(request)
        back = ops_pages.tasks_link({k: form.get(k, "") for k in ("status", "tool", "owner", "q")})
        token = None
        if selection.count:
            token = kit.selections.put(action, where, selection, who, back)
        first_ids = selection.task_ids[: ops_pages.PREVIEW_ROWS]
        unknown = [t for t in first_ids if kit.index.get(t) is None]
        records = await get_many(kit.store, unknown) if unknown else {}
        page = ops_pages.bulk_preview_page(
            kit.view(request),
            action,
            where,
            selection.count,
            selection.truncated,
            _summaries(kit, records, first_ids),
            token,
            who,
            back,
        )
        return HTMLResponse(page)

    async def bulk_confirm(request: Request) -> Response:
        form = await kit.post_form(request)
        who = actor(request)
        pending = kit.selections.take(form.get("selection", ""), who)
        if pending is None:
            raise Refusal(
                410,
                "This preview is no longer there: it expired (after 10 minutes), was "
                "confirmed already, or was made by another operator. Preview again.",
            )
        ids = list(pending.selection.task_ids)
        v = kit.view(request)
        if pending.action == "cancel":
            report = await actions.cancel_tasks(
                kit.store, ids, who, where=pending.where, context=VIA
            )
            kit.hub.publish(await kit.index.refresh(ids))
            page = ops_pages.bulk_result_page(
                v, "cancel", len(ids), report, pending.back, report.ended
            )
        else:
            try:
                removed = await actions.purge_tasks(
                    kit.store, ids, who, where=pending.where, context=VIA
                )
            except ConfigurationError as exc:
                raise Refusal(400, str(exc)) from None
            kit.hub.publish(await kit.index.reload())  # the open lists hear what is gone
            page = ops_pages.bulk_result_page(v, "purge", len(ids), removed, pending.back)
        return HTMLResponse(page)

    table: list[tuple[str, Handler, str]] = [
        ("/api/tasks/{task_id}/history", api_history, "GET"),
        ("/workers", workers, "GET"),
        ("/api/workers", api_workers, "GET"),
        ("/queues", queues, "GET"),
        ("/api/queues", api_queues, "GET"),
        ("/queues/pause", pause, "POST"),
        ("/queues/resume", resume, "POST"),
        ("/audit", audit, "GET"),
        ("/api/audit", api_audit, "GET"),
        ("/bulk/preview", bulk_preview, "POST"),
        ("/bulk/confirm", bulk_confirm, "POST"),
    ]
    return [Route(path, kit.route(handler), methods=[method]) for path, handler, method in table]


__all__ = [
    "VIA",
    "Kit",
    "actor",
    "bulk_html",
    "history_html",
    "operation_routes",
    "overview_alerts",
]
