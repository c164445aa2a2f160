"""The workers and queues pages' HTML, and the no-worker warnings box.

- `workers_page`: every process of the registry and every lease holder
  (`registry.WorkerView`): state in words (alive, gone, stopped, not registered),
  app, host, pid, version, what it runs of its concurrency, its tools, when it
  started and was last seen. `static/ops.js` re-reads the page every few seconds and
  puts `#workers-live` in place, so a new worker or a gone one shows without a reload;
- `queues_page`: each application's tools (`queues.Board`) with what waits, runs and
  is held, the live workers able to run them, and Pause / Resume buttons; the pauses
  in place (since, by); a form to pause any tool;
- `alerts_box`: the warnings (`queues.Alert`) the overview and the workers page show;
  `ops.js` refreshes it from `/api/queues`.

Every value is escaped; a read-only view gets no form.
"""

from __future__ import annotations

from fastmcp_tasks.dashboard.html import attrs, counts_box, csrf_field, esc, span, stamp
from fastmcp_tasks.dashboard.pages import View
from fastmcp_tasks.dashboard.queues import Alert, Board, Queue, app_name
from fastmcp_tasks.dashboard.registry import STATE_WORDS, WorkerView
from fastmcp_tasks.stores.operations import Pause

NO_REGISTRY = (
    "This store keeps no worker registry (its operator records, stores.operations, are "
    "not there): only the processes holding leases are listed."
)
NO_PAUSES = "This store keeps no operator records (stores.operations): tools cannot be paused here."


def alerts_box(alerts: list[Alert] | None) -> str:
    """The warnings (`None`: the store has no registry, so nothing is shown)."""
    if alerts is None:
        return ""
    items = "".join(
        f'<li class="alert alert-{esc(a.kind)}"{attrs(data_kind=a.kind, data_app=a.app)}'
        f"{attrs(data_tool=a.tool, data_count=a.count)}>{esc(a.text)} "
        '<a href="queues">Queues</a></li>'
        for a in alerts
    )
    return (
        '<section id="queue-alerts" class="alerts" aria-label="Warnings" aria-live="polite"'
        f'{attrs(hidden=not alerts)}><ul id="queue-warnings">{items}</ul></section>'
    )


# --- workers -------------------------------------------------------------------------------


def _worker_row(w: WorkerView, now: float) -> str:
    info = w.info
    tasks = ", ".join(t.task_id for t in w.tasks[:5]) + (" …" if len(w.tasks) > 5 else "")
    held = len(w.tasks)
    age = w.heartbeat_age(now)
    seen = "-" if age is None else f"{span(age)} ago"
    if info is None:
        seen += " (lease)" if age is not None else ""
        tools = ", ".join(sorted({t.tool for t in w.tasks}))
        load = f"{held} held"
        version = started = app = "-"
    else:
        tools = ", ".join(info.tools) or "-"
        load = f"{info.running} of {info.concurrency}"
        version, started, app = info.version, stamp(info.started_at), info.app or "-"
    state = STATE_WORDS.get(w.state, w.state)
    row_attrs = attrs(
        data_worker=w.worker_id,
        data_state=w.state,
        data_stale="true" if w.stale else "false",
        data_registered="true" if info is not None else "false",
        class_="stale" if w.stale else None,
    )
    cells = [
        ("owner", f'<code title="{esc(w.worker_id)}">{esc(w.worker_id)}</code>', ""),
        ("state", f'<span class="state state-{esc(w.state)}">{esc(state)}</span>', ""),
        ("app", esc(app), ""),
        ("host", esc(w.host), ""),
        ("pid", esc(w.pid if w.pid is not None else "-"), "num"),
        ("version", esc(version), ""),
        ("load", esc(load), "num"),
        ("tasks", str(held), "num"),
        ("tools", esc(tools), ""),
        ("started", esc(started), ""),
        ("heartbeat", esc(seen), "num"),
    ]
    tds = "".join(
        f'<{"th scope=row" if name == "owner" else "td"} data-field="{name}"'
        f"{attrs(class_=cls or None, title=tasks if name == 'tasks' and tasks else None)}>"
        f"{html}</{'th' if name == 'owner' else 'td'}>"
        for name, html, cls in cells
    )
    return f"<tr{row_attrs}>{tds}</tr>"


def workers_table(
    v: View, views: list[WorkerView], loaded: bool, registry: bool, alerts: list[Alert] | None
) -> str:
    """`#workers-live`: the warnings and the table (what `ops.js` re-reads)."""
    rows = "".join(_worker_row(w, v.now) for w in views)
    if not rows:
        empty = (
            "Reading the store…"
            if not loaded and not registry
            else "No worker is registered and no process holds a lease."
        )
        rows = f'<tr class="empty"><td colspan="11">{esc(empty)}</td></tr>'
    heads = (
        "process",
        "state",
        "app",
        "host",
        "pid",
        "version",
        "running",
        "leases",
        "tools",
        "started",
        "last seen",
    )
    head = "".join(f'<th scope="col" class="col-{h.replace(" ", "-")}">{h}</th>' for h in heads)
    note = "" if registry else f'<p id="no-registry" class="hint">{esc(NO_REGISTRY)}</p>'
    return (
        f'<div id="workers-live" data-loaded="{"true" if loaded else "false"}">'
        f"{alerts_box(alerts)}{note}"
        f'<div class="table-wrap"><table id="worker-table"><thead><tr>{head}</tr></thead>'
        f"<tbody>{rows}</tbody></table></div></div>"
    )


def workers_page(
    v: View,
    counts: dict[str, int] | None,
    views: list[WorkerView],
    loaded: bool,
    registry: bool,
    alerts: list[Alert] | None,
) -> str:
    body = (
        "<h1>Workers</h1>"
        f"{counts_box(counts)}"
        "<p>Every process that runs tasks: alive ones beat every few seconds; one silent "
        "for three beats without saying goodbye is gone (it probably died, and recovery "
        "hands its tasks to another). Processes holding leases that never registered "
        "(older versions) are listed by their leases.</p>"
        f"{workers_table(v, views, loaded, registry, alerts)}"
    )
    return v.frame("Workers", body, "workers", {"page": "workers"})


# --- queues --------------------------------------------------------------------------------


def _pause_button(v: View, app: str, tool: str, paused: bool) -> str:
    if v.read_only:
        return ""
    verb = "Resume" if paused else "Pause"
    action = "queues/resume" if paused else "queues/pause"
    label = f"{verb} tool {tool} of {app_name(app)}"
    return (
        f'<form class="pause-form" method="post" action="{action}">{csrf_field(v.csrf)}'
        f'<input type="hidden" name="app" value="{esc(app)}">'
        f'<input type="hidden" name="tool" value="{esc(tool)}">'
        f'<button type="submit"{attrs(aria_label=label, data_verb=verb.lower())}'
        f"{attrs(class_='danger' if not paused else None)}>{verb}</button></form>"
    )


def _pause_row(v: View, p: Pause, held: int) -> str:
    return (
        f"<tr{attrs(data_app=p.app, data_tool=p.tool)}>"
        f'<td data-field="app">{esc(p.app or "-")}</td><td data-field="tool">{esc(p.tool)}</td>'
        f'<td data-field="since" title="{esc(stamp(p.since))}">{esc(span(v.now - p.since))} ago'
        "</td>"
        f'<td data-field="by">{esc(p.by)}</td><td data-field="held" class="num">{held:,}</td>'
        f'<td data-field="action">{_pause_button(v, p.app, p.tool, True)}</td></tr>'
    )


def _queue_row(v: View, q: Queue) -> str:
    paused = q.pause is not None
    state = f"paused by {q.pause.by}" if q.pause is not None else "-"
    numbers = "".join(
        f'<td data-field="{name}" class="num">{value:,}</td>'
        for name, value in (
            ("waiting", q.waiting),
            ("running", q.running),
            ("parked", q.parked),
            ("held", q.held),
            ("workers", q.workers),
        )
    )
    return (
        f"<tr{attrs(data_app=q.app, data_tool=q.tool, data_paused='true' if paused else 'false')}"
        f"{attrs(class_='unserved' if q.unserved else None)}>"
        f'<td data-field="app">{esc(q.app or "-")}</td>'
        f'<th scope="row" data-field="tool">{esc(q.tool)}</th>{numbers}'
        f'<td data-field="paused">{esc(state)}</td>'
        f'<td data-field="action">{_pause_button(v, q.app, q.tool, paused)}</td></tr>'
    )


def queues_page(v: View, board: Board | None, actor: str) -> str:
    if board is None:
        body = f'<h1>Queues</h1><p id="queues-unavailable" class="notice">{esc(NO_PAUSES)}</p>'
        return v.frame("Queues", body, "queues", {"page": "overview"})
    held = {(q.app, q.tool): q.held for q in board.queues}
    pauses = "".join(_pause_row(v, p, held.get((p.app, p.tool), 0)) for p in board.pauses)
    if not pauses:
        pauses = '<tr class="empty"><td colspan="6">No tool is paused.</td></tr>'
    pause_heads = "".join(
        f'<th scope="col">{h}</th>' for h in ("app", "tool", "since", "by", "held", "")
    )
    rows = "".join(_queue_row(v, q) for q in board.queues)
    if not rows:
        rows = '<tr class="empty"><td colspan="9">No active task and no live worker.</td></tr>'
    numbers = ("waiting", "running", "parked", "held", "workers")
    heads = "".join(
        f'<th scope="col"{attrs(class_="num" if h in numbers else None)}>{h}</th>'
        for h in ("app", "tool", *numbers, "paused", "")
    )
    any_form = ""
    if not v.read_only:
        any_form = (
            '<section class="actions" aria-labelledby="pause-any-h">'
            '<h2 id="pause-any-h">Pause a tool</h2>'
            '<form id="pause-any-form" method="post" action="queues/pause" class="inline">'
            f'{csrf_field(v.csrf)}<label for="pause-app">App</label>'
            '<input id="pause-app" name="app" autocomplete="off" placeholder="(none)">'
            '<label for="pause-tool">Tool</label>'
            '<input id="pause-tool" name="tool" required autocomplete="off">'
            '<button id="pause-any" type="submit" class="danger">Pause</button>'
            f'<span class="hint">As {esc(actor)}.</span></form></section>'
        )
    body = (
        "<h1>Queues</h1>"
        f"{alerts_box(board.warnings)}"
        "<p>A paused tool starts no new run in any process of its application: its "
        "tasks wait, held, until it is resumed (runs already going go on).</p>"
        '<section aria-labelledby="pauses-h"><h2 id="pauses-h">Paused tools</h2>'
        f'<div class="table-wrap"><table id="pause-table"><thead><tr>{pause_heads}</tr>'
        f"</thead><tbody>{pauses}</tbody></table></div></section>"
        '<section aria-labelledby="queues-h"><h2 id="queues-h">Tools by application</h2>'
        f'<div class="table-wrap"><table id="queue-table"><thead><tr>{heads}</tr></thead>'
        f"<tbody>{rows}</tbody></table></div></section>{any_form}"
    )
    return v.frame("Queues", body, "queues", {"page": "overview"})


__all__ = ["alerts_box", "queues_page", "workers_page", "workers_table"]
