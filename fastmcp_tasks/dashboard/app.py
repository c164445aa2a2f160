"""The dashboard's Starlette application: routes, the lazy start, and the actions.

`build_app` wires one `Dashboard` (`state`: the store, its `TaskIndex`, the
`BacklogSampler` and the `Hub`) to the routes of the design: pages, their JSON
mirrors, the event stream, the cancel and purge-by-age actions, and the operator
routes of `operations` (history, workers, queues and pauses, bulk actions, the audit
log). The hub starts on the first request, not in a lifespan: a dashboard mounted
inside another application gets no lifespan of its own. A store the dashboard opened
itself (it was given a URL) is closed on lifespan shutdown, or by
`Dashboard.aclose()`; a store object it was given is never opened nor closed.

Actions go through `fastmcp_tasks.actions`, audited with the label of the request's
token as the actor: cancel is `actions.cancel_tasks` (a `cancel_requested` event
naming the operator, then `store.request_cancel`, what `tasks/cancel` does; the
process running the task hears it on the feed and ends it `cancelled`, and a task
nobody runs yet ends at once, as the handler does), purge previews with
`store.purge_finished(before, dry_run=True)` and confirms with the same fixed cutoff,
`actions.purge_before`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from fastmcp_tasks import actions
from fastmcp_tasks.dashboard import boards, operations, pages
from fastmcp_tasks.dashboard.forms import parse_age, parse_cutoff, read_form
from fastmcp_tasks.dashboard.html import login_page, message_page
from fastmcp_tasks.dashboard.index import TaskQuery
from fastmcp_tasks.dashboard.security import (
    COOKIE,
    Guard,
    Guarded,
    Refusal,
    request_headers,
    request_identity,
)
from fastmcp_tasks.dashboard.selections import Selections
from fastmcp_tasks.dashboard.state import Dashboard, open_store
from fastmcp_tasks.dashboard.steps import steps_of, steps_section
from fastmcp_tasks.errors import StoreError
from fastmcp_tasks.server.payloads import for_operators
from fastmcp_tasks.stores.listing import ListableTaskStore

STATIC = Path(__file__).parent / "static"
TITLES = {
    400: "Bad request",
    403: "Refused",
    404: "Not found",
    410: "No longer there",
    413: "Too large",
    500: "Dashboard error",
    503: "Store unavailable",
}
log = logging.getLogger("fastmcp_tasks.dashboard")


def build_app(
    store_or_url: ListableTaskStore | str,
    *,
    token: str | None = None,
    tokens: Mapping[str, str] | None = None,
    read_only: bool = False,
    read_only_labels: Iterable[str] = (),
    allowed_hosts: list[str] | None = None,
    lease_seconds: float = 30.0,
    cookie_name: str = COOKIE,
) -> Starlette:
    """The dashboard application (see `fastmcp_tasks.dashboard.app`)."""
    guard = Guard(
        token,
        tokens=tokens,
        read_only=read_only,
        read_only_labels=read_only_labels,
        allowed_hosts=allowed_hosts,
        cookie_name=cookie_name,
    )
    store, owns = open_store(store_or_url)
    dash = Dashboard(store, owns, guard, lease_seconds)

    def root(request: Request) -> str:
        return str(request.scope.get("root_path", ""))

    def view(request: Request) -> pages.View:
        who = request_identity(request.scope)
        return pages.View(
            root=root(request),
            read_only=who.read_only,
            csrf=guard.csrf_token(who.label),
            now=time.time(),
            lease_seconds=lease_seconds,
            live=dash.hub.state,
        )

    def wants_json(request: Request) -> bool:
        path = request.url.path[len(root(request)) :]
        return path.startswith(("/api/", "/events"))

    def refusal(request: Request, status: int, message: str) -> Response:
        if wants_json(request):
            return JSONResponse({"error": message}, status)
        title = TITLES.get(status, "Error")
        read_only = request_identity(request.scope).read_only
        html = message_page(title, message, root=root(request), read_only=read_only)
        return HTMLResponse(html, status)

    Handler = Callable[[Request], Awaitable[Response]]

    def route(handler: Handler) -> Handler:
        async def run(request: Request) -> Response:
            try:
                await dash.start()
                return await handler(request)
            except Refusal as exc:
                return refusal(request, exc.status, exc.message)
            except (StoreError, OSError) as exc:
                message = (
                    "The task store is unavailable right now; the dashboard keeps trying. "
                    f"({type(exc).__name__})"
                )
                return refusal(request, 503, message)
            except Exception:
                log.exception("dashboard: %s %s failed", request.method, request.url.path)
                message = "The dashboard failed to answer this request; the error is logged."
                return refusal(request, 500, message)

        return run

    def query_of(request: Request) -> TaskQuery:
        try:
            return TaskQuery.from_params(request.query_params)
        except ValueError as exc:
            raise Refusal(400, str(exc)) from None

    async def post_form(request: Request) -> dict[str, str]:
        form = await read_form(request)
        guard.check_post(request_headers(request.scope), form, request_identity(request.scope))
        return form

    async def record_or_404(task_id: str) -> Any:
        record = await store.get(task_id)
        if record is None:
            raise Refusal(404, await pages.missing_text(store, task_id))
        return for_operators(record)  # sealed payloads: opened with the key, else "sealed"

    kit = operations.Kit(
        store=store,
        index=dash.index,
        hub=dash.hub,
        lease_seconds=lease_seconds,
        selections=Selections(),
        route=route,
        view=view,
        post_form=post_form,
        record_or_404=record_or_404,
    )

    # --- pages -------------------------------------------------------------------------

    async def overview(request: Request) -> Response:
        v = view(request)
        alerts = await operations.overview_alerts(kit, v.now)
        return HTMLResponse(boards.overview_page(v, dash.index, dash.sampler, notices=alerts))

    async def tasks(request: Request) -> Response:
        query = query_of(request)
        found = await dash.index.page(query)
        v = view(request)
        bulk = operations.bulk_html(kit, v, query)
        return HTMLResponse(pages.tasks_page(v, dash.index, query, found, bulk=bulk))

    async def detail(request: Request) -> Response:
        record = await record_or_404(request.path_params["task_id"])
        previous = dash.index.get(record.task_id)
        v = view(request)
        history = await operations.history_html(kit, record, v.now)
        history += steps_section(await steps_of(kit.store, record.task_id))
        return HTMLResponse(pages.detail_page(v, record, previous, history=history))

    # --- JSON --------------------------------------------------------------------------

    async def api_tasks(request: Request) -> Response:
        query = query_of(request)
        found = await dash.index.page(query)
        return JSONResponse(pages.page_json(found, query, time.time()))

    async def api_task(request: Request) -> Response:
        record = await record_or_404(request.path_params["task_id"])
        return JSONResponse(pages.record_json(record, time.time()))

    async def api_overview(request: Request) -> Response:
        return JSONResponse(boards.overview_json(dash.index, dash.sampler, time.time()))

    async def events(request: Request) -> Response:
        kind = request.query_params.get("page", "tasks")
        if kind == "task":
            task_id = request.query_params.get("id", "")
            if not task_id:
                raise Refusal(400, "events?page=task needs id=TASK_ID")

            def same(s: Any) -> bool:
                return bool(s.task_id == task_id)

            listener = dash.hub.listen(same, same)
            current = dash.index.get(task_id)
            if current is not None:  # what changed between the page and its stream
                listener.offer([current])
        elif kind == "tasks":
            query = query_of(request)
            loose = dataclasses.replace(query, status=None, before=None)
            listener = dash.hub.listen(loose.matches, query.matches)
            if query.before is None:  # the first page now: rows made since it was rendered
                listener.offer(list((await dash.index.page(query)).tasks))
        elif kind in ("overview", "workers"):
            listener = dash.hub.listen(lambda s: False, lambda s: False)
        else:
            raise Refusal(400, f"unknown events page {kind[:40]!r}: tasks, task or overview")
        headers = {"X-Accel-Buffering": "no"}
        return StreamingResponse(
            dash.hub.stream(listener), media_type="text/event-stream", headers=headers
        )

    # --- actions -----------------------------------------------------------------------

    async def cancel(request: Request) -> Response:
        await post_form(request)
        task_id = request.path_params["task_id"]
        who = operations.actor(request)
        report = await actions.cancel_tasks(store, [task_id], who, context=operations.VIA)
        if report.missing:
            raise Refusal(404, await pages.missing_text(store, task_id))
        dash.hub.publish(await dash.index.refresh([task_id]))  # to every open page
        return RedirectResponse(f"{root(request)}/tasks/{quote(task_id, safe='')}", 303)

    async def purge_preview(request: Request) -> Response:
        form = await post_form(request)
        try:
            seconds = parse_age(form.get("older_than", ""))
        except ValueError as exc:
            raise Refusal(400, str(exc)) from None
        before = time.time() - seconds
        count = await store.purge_finished(before, dry_run=True)
        return HTMLResponse(pages.purge_preview_page(view(request), before, seconds, count))

    async def purge(request: Request) -> Response:
        form = await post_form(request)
        try:
            before = parse_cutoff(form.get("before", ""))
        except ValueError as exc:
            raise Refusal(400, str(exc)) from None
        who = operations.actor(request)
        removed = await actions.purge_before(store, before, who, context=operations.VIA)
        dash.hub.publish(await dash.index.reload())  # the open lists hear what is gone
        return HTMLResponse(pages.purge_result_page(view(request), before, removed))

    # --- login -------------------------------------------------------------------------

    def login_html(scope: Any, message: str) -> str:
        path = str(scope.get("path", "/"))
        query = scope.get("query_string", b"").decode("latin-1")
        next_url = path + (f"?{query}" if query else "")
        return login_page(str(scope.get("root_path", "")), message, next_url, guard.csrf_token())

    async def login_get(request: Request) -> Response:
        if guard.identify(request_headers(request.scope)) is not None:
            return RedirectResponse(f"{root(request)}/", 303)
        return HTMLResponse(login_html(request.scope, "This dashboard needs its token."), 401)

    async def login_post(request: Request) -> Response:
        form = await read_form(request)  # bounded: this route runs without the token
        guard.check_origin(request_headers(request.scope))
        if not guard.has_token:
            return RedirectResponse(f"{root(request)}/", 303)
        label = guard.token_label(form.get("token"))
        if label is None:
            html = login_page(root(request), "That token is not right.", "", guard.csrf_token())
            return HTMLResponse(html, 401)
        target = form.get("next", "")
        here = root(request) + "/"
        if not target.startswith(here) or target.startswith("//"):
            target = here  # only back into the dashboard, never elsewhere
        response = RedirectResponse(target, 303)
        response.headers["set-cookie"] = guard.cookie_header(label, root(request))
        return response

    routes = [
        Route("/", route(overview), methods=["GET"]),
        Route("/tasks", route(tasks), methods=["GET"]),
        Route("/tasks/{task_id}", route(detail), methods=["GET"]),
        Route("/tasks/{task_id}/cancel", route(cancel), methods=["POST"]),
        Route("/events", route(events), methods=["GET"]),
        Route("/api/tasks", route(api_tasks), methods=["GET"]),
        Route("/api/tasks/{task_id}", route(api_task), methods=["GET"]),
        Route("/api/overview", route(api_overview), methods=["GET"]),
        Route("/purge/preview", route(purge_preview), methods=["POST"]),
        Route("/purge", route(purge), methods=["POST"]),
        Route("/login", route(login_get), methods=["GET"]),
        Route("/login", route(login_post), methods=["POST"]),
        *operations.operation_routes(kit),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await dash.aclose()

    application = Starlette(routes=routes, lifespan=lifespan)
    application.state.dashboard = dash
    application.add_middleware(Guarded, guard=guard, login_page=login_html)
    return application


__all__ = ["Dashboard", "build_app", "open_store", "parse_age"]
