"""The operator pages' HTML: a task's history, bulk actions by filter, the audit log.

- `history_section`: the "History" of the detail page (`history.describe` words;
  `static/ops.js` re-reads `/api/tasks/<id>/history` when the task changes);
- `bulk_form`: "Cancel matching…" / "Purge matching…" under the task list, carrying
  the list's filters (`ops.js` copies the filters of the list shown when it is sent);
- `bulk_preview_page` / `bulk_result_page`: the exact count and first rows of a
  preview, its confirmation form (a selection token, never ids), what was done;
- `audit_page`: the audit log, newest first.

Every value is escaped (`html.esc`); no inline script or style. A read-only view gets
no form at all.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from fastmcp_tasks.actions import MAX_SELECTION, CancelReport, TaskFilter
from fastmcp_tasks.dashboard.history import describe
from fastmcp_tasks.dashboard.html import attrs, csrf_field, esc, stamp, status_badge
from fastmcp_tasks.dashboard.pages import View
from fastmcp_tasks.dashboard.selections import TTL, filter_words
from fastmcp_tasks.dashboard.summary import TaskSummary
from fastmcp_tasks.stores.operations import AuditEntry, TaskEvent

#: Rows a preview shows.
PREVIEW_ROWS = 20
#: Ids an audit row shows (the JSON has all the entry holds).
AUDIT_IDS_SHOWN = 5
#: How the audit names a filter's fields (`actions.TaskFilter.to_json`).
FILTER_WORDS = {"outcomes": "status", "id_prefix": "id starting with"}
NO_HISTORY = (
    "This store keeps no task history (its operator records, stores.operations, are not "
    "there): the list below shows only what this page saw while open."
)


def _noun(n: int, word: str = "task") -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


# --- history -------------------------------------------------------------------------------


def event_item(event: TaskEvent, now: float) -> str:
    label, text = describe(event, now)
    detail = f' <span class="event-text">{esc(text)}</span>' if text else ""
    return (
        f'<li data-kind="{esc(event.kind)}"><time title="{esc(stamp(event.at))}">'
        f'{esc(stamp(event.at))}</time> <span class="event-label">{esc(label)}</span>{detail}</li>'
    )


def history_section(task_id: str, events: list[TaskEvent] | None, now: float) -> str:
    """The detail page's History (`events` `None`: the store keeps none)."""
    head = '<h2 id="history-h">History</h2>'
    if events is None:
        return (
            f'<section id="history" aria-labelledby="history-h">{head}'
            f'<p id="history-unavailable" class="hint">{esc(NO_HISTORY)}</p></section>'
        )
    items = "".join(event_item(e, now) for e in events)
    return (
        f'<section id="history" aria-labelledby="history-h"{attrs(data_task_id=task_id)}>'
        f'{head}<ol id="history-events" class="history">{items}</ol>'
        f'<p id="history-empty" class="hint"{attrs(hidden=bool(events))}>'
        "No events recorded yet.</p></section>"
    )


# --- bulk actions --------------------------------------------------------------------------


def bulk_form(v: View, params: dict[str, str], purge: bool) -> str:
    """The bulk actions under the task list (none when read-only; purge only on a store
    that can purge a chosen set)."""
    if v.read_only:
        return ""
    hidden = "".join(
        f'<input type="hidden" name="{name}" value="{esc(params.get(name, ""))}">'
        for name in ("status", "tool", "owner", "q")
    )
    purge_button = (
        '<button id="bulk-purge" type="submit" name="action" value="purge" class="danger">'
        "Purge matching…</button>"
        if purge
        else ""
    )
    return (
        '<section class="actions" aria-labelledby="bulk-heading">'
        '<h2 id="bulk-heading">Every task matching the filters</h2>'
        f'<form id="bulk-form" method="post" action="bulk/preview" class="inline">'
        f"{csrf_field(v.csrf)}{hidden}"
        '<button id="bulk-cancel" type="submit" name="action" value="cancel" class="danger">'
        f"Cancel matching…</button>{purge_button}"
        '<span class="hint">A preview says how many first; nothing happens before you '
        "confirm.</span></form></section>"
    )


def tasks_link(params: dict[str, str]) -> str:
    query = {k: v for k, v in params.items() if v}
    return "tasks" + (f"?{urlencode(query)}" if query else "")


def _rows(rows: list[TaskSummary]) -> str:
    body = "".join(
        f'<tr data-task-id="{esc(s.task_id)}"><td data-field="id">'
        f'<a href="tasks/{esc(s.task_id)}">{esc(s.task_id)}</a></td>'
        f'<td data-field="tool">{esc(s.tool)}</td>'
        f'<td data-field="status">{status_badge(s.status)}</td>'
        f'<td data-field="created">{esc(stamp(s.created_at))}</td></tr>'
        for s in rows
    )
    return (
        '<div class="table-wrap"><table id="bulk-rows"><thead><tr><th scope="col">id</th>'
        '<th scope="col">tool</th><th scope="col">status</th><th scope="col">created</th>'
        f"</tr></thead><tbody>{body}</tbody></table></div>"
    )


def bulk_preview_page(
    v: View,
    action: str,
    where: TaskFilter,
    count: int,
    truncated: bool,
    first: list[TaskSummary],
    token: str | None,
    actor: str,
    back: str,
) -> str:
    verb = "Cancel" if action == "cancel" else "Purge"
    what = (
        "asked to stop (a task nobody runs yet ends at once)"
        if action == "cancel"
        else "deleted, with their results and histories"
    )
    parts = [
        f"<h1>{verb} matching tasks</h1>",
        f'<p id="bulk-filter">Matching {esc(filter_words(where))}.</p>',
    ]
    if not count:
        none = "active" if action == "cancel" else "finished"
        parts.append(
            f'<p id="bulk-count" data-count="0" class="notice">No {none} task matches: '
            f'nothing to {action}.</p><p><a href="{esc(back)}">Back to the tasks</a></p>'
        )
        return v.frame(f"{verb} matching", "".join(parts), "tasks", None)
    parts.append(
        f'<p><strong id="bulk-count" data-count="{count}">{esc(_noun(count))}</strong> '
        f"will be {esc(what)}.</p>"
    )
    if truncated:
        parts.append(
            f'<p id="bulk-truncated" class="notice">More than {MAX_SELECTION:,} match: these '
            f"are the newest {MAX_SELECTION:,}; preview again for the rest.</p>"
        )
    shown = f"The first {len(first)}" if len(first) < count else "They"
    parts.append(f"<p>{shown}, newest first:</p>{_rows(first)}")
    if token is not None and not v.read_only:
        minutes = int(TTL // 60)
        parts.append(
            '<form id="bulk-confirm-form" method="post" action="bulk/confirm" class="inline">'
            f'{csrf_field(v.csrf)}<input type="hidden" name="selection" value="{esc(token)}">'
            f'<button id="bulk-confirm" type="submit" class="danger">{verb} these '
            f'{esc(_noun(count))}</button> <a href="{esc(back)}">Keep them</a></form>'
            f'<p class="hint">As {esc(actor)}. Only the tasks counted here are touched, not '
            f"tasks that match later; this preview can be confirmed for {minutes} minutes.</p>"
        )
    return v.frame(f"{verb} matching", "".join(parts), "tasks", None)


def bulk_result_page(
    v: View, action: str, selected: int, report: CancelReport | int, back: str, ended: int = 0
) -> str:
    if isinstance(report, CancelReport):
        done, finished, missing = report.requested, report.finished, report.missing
        text = f"Asked {_noun(done)} to stop"
        if ended:
            text += f" ({ended:,} that nobody ran ended at once)"
        if finished:
            text += f"; {_noun(finished)} had finished meanwhile"
        title = "Cancelled"
    else:
        done, finished, missing = report, 0, selected - report
        text = f"Purged {_noun(done, 'finished task')}"
        title = "Purged"
    if missing:
        text += f"; {_noun(missing)} {'was' if missing == 1 else 'were'} no longer there"
    body = (
        f"<h1>{title}</h1>"
        f'<p id="bulk-result"{attrs(data_action=action, data_done=done, data_finished=finished)}'
        f"{attrs(data_missing=missing, data_selected=selected)}>{esc(text)}.</p>"
        f'<p><a href="{esc(back)}">Back to the tasks</a> · <a href="audit">Audit log</a></p>'
    )
    return v.frame(title, body, "tasks", None)


# --- audit ---------------------------------------------------------------------------------


def audit_details(entry: AuditEntry) -> str:
    """An audit entry's details in words (ids cut to `AUDIT_IDS_SHOWN`)."""
    d: dict[str, Any] = entry.details
    parts: list[str] = [f"{name} {d[name]}" for name in ("via", "user", "host") if d.get(name)]
    if d.get("app") is not None or d.get("tool") is not None:
        parts.append(f"tool {d.get('tool')} of app {d.get('app') or '-'}")
    where = d.get("filter")
    if isinstance(where, dict) and where:
        shown = ", ".join(
            f"{FILTER_WORDS.get(k, k)} {' or '.join(map(str, v)) if isinstance(v, list) else v}"
            for k, v in where.items()
        )
        parts.append(f"filter: {shown}")
    if isinstance(d.get("ended_before"), int | float):
        parts.append(f"ended before {stamp(d['ended_before'])}")
    for name in ("selected", "finished", "missing", "released"):
        if isinstance(d.get(name), int):
            parts.append(f"{name} {d[name]:,}")
    ids = d.get("ids")
    if isinstance(ids, list) and ids:
        more = d.get("selected", len(ids))
        cut = ", ".join(str(i) for i in ids[:AUDIT_IDS_SHOWN])
        if isinstance(more, int) and more > AUDIT_IDS_SHOWN:
            cut += f" … ({more:,} in all)"
        parts.append(f"ids {cut}")
    return " · ".join(parts)


def audit_page(v: View, entries: list[AuditEntry] | None) -> str:
    if entries is None:
        body = (
            "<h1>Audit log</h1>"
            '<p id="audit-unavailable" class="notice">This store keeps no audit log (its '
            "operator records, stores.operations, are not there).</p>"
        )
        return v.frame("Audit log", body, "audit", None)
    rows = "".join(
        f"<tr{attrs(data_action=e.action, data_actor=e.actor)}>"
        f'<td data-field="when"><time title="{esc(stamp(e.at))}">{esc(stamp(e.at))}</time></td>'
        f'<td data-field="actor">{esc(e.actor)}</td><td data-field="action">{esc(e.action)}</td>'
        f'<td data-field="count" class="num">{e.count:,}</td>'
        f'<td data-field="details" title="{esc(audit_details(e))}">{esc(audit_details(e))}</td>'
        "</tr>"
        for e in entries
    )
    if not rows:
        rows = '<tr class="empty"><td colspan="5">No operator action yet.</td></tr>'
    heads = "".join(
        f'<th scope="col" class="col-{h}">{h}</th>'
        for h in ("when", "who", "action", "count", "details")
    )
    body = (
        "<h1>Audit log</h1><p>Operator actions on this store, newest first: who (the "
        "dashboard token's label, or the command line), what, on how many tasks.</p>"
        f'<div class="table-wrap"><table id="audit-table"><thead><tr>{heads}</tr></thead>'
        f"<tbody>{rows}</tbody></table></div>"
    )
    return v.frame("Audit log", body, "audit", None)


__all__ = [
    "audit_details",
    "audit_page",
    "bulk_form",
    "bulk_preview_page",
    "bulk_result_page",
    "event_item",
    "history_section",
    "tasks_link",
]
