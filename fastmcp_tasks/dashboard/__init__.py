"""The operator dashboard (issue 18): a live web view of a task store, as an ASGI app.

    from fastmcp_tasks.dashboard import app
    dashboard = app("sqlite:///tasks.db", token="...")     # or app(extension.store)
    dashboard = app(url, tokens={"alice": "...", "bob": "..."}, read_only_labels=["bob"])

`fastmcp-tasks ui` serves it with uvicorn; a server can also mount it beside its MCP
endpoint, which is how a `memory://` store is seen. The parts: routes and the lazy
start in `dashboard.app` (the module), the operator routes in `operations`, HTML in
`pages`, `boards`, `ops_pages`, `worker_pages` and `html`, the live hub in `live`,
the access policy in `security` and `tokens`; the data (index, summaries, statistics,
charts, workers, the registry, queues, histories, previewed selections) in `index`,
`summary`, `stats`, `charts`, `workers`, `registry`, `queues`, `history`, `selections`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from starlette.applications import Starlette

from fastmcp_tasks.dashboard.app import build_app
from fastmcp_tasks.stores.listing import ListableTaskStore


def app(
    store_or_url: ListableTaskStore | str,
    *,
    token: str | None = None,
    tokens: Mapping[str, str] | None = None,
    read_only: bool = False,
    read_only_labels: Iterable[str] = (),
    allowed_hosts: Iterable[str] | None = None,
    lease_seconds: float = 30.0,
    cookie_name: str = "fastmcp_tasks_ui",
) -> Starlette:
    """The dashboard of a task store, as a Starlette (ASGI) application.

    Given a store URL (`sqlite:///...`, `redis://...`, `postgresql://...`) the app
    opens the store on its first request and closes it at lifespan shutdown (or
    `app.state.dashboard.aclose()`); given a store object, for instance the
    `TasksExtension.store` of the server it is mounted beside, it never opens nor
    closes it. The store must be a `ListableTaskStore` (all bundled stores are). The
    live part (one change-feed subscription, the index, the event streams) starts on
    the first request, since a mounted app gets no lifespan of its own.

    Security model:

    - **Tokens.** With `tokens` (labelled: `{"alice": "...", "bob": "..."}`) or
      `token` (labelled `operator`) set, every page, JSON API call, the event stream
      and every action needs one: `Authorization: Bearer TOKEN`, or the session cookie
      `cookie_name` (HttpOnly, SameSite=Strict, `Path` the app's mount point, holding
      the label and an HMAC of label and token, not the token) set by opening any page
      with `?token=TOKEN` (answered by a redirect to the same URL without it) or by
      the login form (`POST /login`). The label of the token a request carries is
      who acts: the audit log's actor (`dashboard` on a dashboard without tokens).
      Without the token, pages answer 401 with the login form and the API, the event
      stream and actions 401 JSON. Comparisons are constant time. Our static CSS and
      JS are served to anyone. The token is never logged by the dashboard (a `?token=`
      URL may still reach a reverse proxy's access log: prefer the login form there).
    - **Cross-site requests.** Every POST needs the form's CSRF token (an HMAC of a
      random per-app secret and the token) and is refused (403) when the browser says
      `Sec-Fetch-Site: cross-site` or sends an `Origin` that does not match `Host`.
      A reverse proxy must therefore pass the original `Host` through.
    - **DNS rebinding.** `allowed_hosts` lists the `Host` values served (`name` or
      `name:port`); any other Host gets 400. Default: any (a mounted app is reached
      by whatever names its server has; pass them). `fastmcp-tasks ui` on a loopback
      address allows only `127.0.0.1`, `localhost` and `[::1]` with its port.
    - **Read-only.** `read_only=True`, or a label among `read_only_labels` (a
      viewer's role), renders no action (no POST form on any page) and answers every
      POST with 403.
    - **Headers.** Every response carries `Content-Security-Policy: default-src
      'self'` (no inline script or style, `frame-ancestors 'none'`),
      `X-Frame-Options: DENY`, `Referrer-Policy: same-origin`,
      `X-Content-Type-Options: nosniff` and `Cache-Control: no-store` (a 500
      included). Pages use no CDN, font or other outside resource. Every POST body is
      read to 16 KiB at most (413 past it), `/login`'s too.

    Actions go through `fastmcp_tasks.actions`, as the CLI's, each audited with the
    acting label: cancel is `actions.cancel_tasks` (the process running the task ends
    it `cancelled`, "by an operator"; a task nobody runs yet ends at once, as
    `tasks/cancel` does), purge previews with `store.purge_finished(before,
    dry_run=True)` and confirms with the same fixed cutoff (`actions.purge_before`).
    "Cancel matching…" / "Purge matching…" act on the task list's filters: a preview
    counts them and keeps their ids for 10 minutes, and the confirmation acts on
    exactly those. On a store that keeps operator records (`stores.operations`) the
    dashboard also shows each task's history, the registered workers, warnings when
    queued tasks have no live worker able to run them, per-tool pause / resume
    (`/queues`) and the audit log (`/audit`).

    Args:
        store_or_url: a listable store object, or a store URL the app opens itself.
        token: a shared secret every request may carry, labelled `operator`.
        tokens: labelled secrets, `{label: token}` (labels: letters, digits, `_.@+-`).
        read_only: show everything, change nothing (every label).
        read_only_labels: labels of `tokens` that may look but not act.
        allowed_hosts: the `Host` header values accepted (default: any).
        lease_seconds: the servers' lease duration (30 s by default, as
            `TasksExtension`'s): heartbeat age is `now - (lease_expires - lease_seconds)`.
        cookie_name: the session cookie's name (`fastmcp-tasks ui` adds its port, so
            two dashboards on one host keep their own sessions).

    Raises:
        ConfigurationError: an unknown URL, a store that cannot list tasks, or tokens
            that cannot work (an empty one, one shared by two labels, a bad label).
    """
    return build_app(
        store_or_url,
        token=token,
        tokens=tokens,
        read_only=read_only,
        read_only_labels=read_only_labels,
        allowed_hosts=None if allowed_hosts is None else list(allowed_hosts),
        lease_seconds=lease_seconds,
        cookie_name=cookie_name,
    )


__all__ = ["app"]
