"""The task pages: the list (filters, paging, purge), one task's detail, the purge steps.

Server-side HTML following the DOM contract of the design (ids and `data-` attributes
the browser tests and `static/dashboard.js` rely on), plus the JSON the `/api/tasks`
routes answer with. Every value is escaped (`html.esc`); times are UTC.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from fastmcp_tasks.dashboard.html import (
    STATUS_FILTERS,
    attrs,
    counts_box,
    csrf_field,
    esc,
    label_of,
    options,
    page,
    pretty_json,
    span,
    stamp,
    status_badge,
    time_tag,
    truncated,
)
from fastmcp_tasks.dashboard.index import TaskIndex, TaskPage, TaskQuery, TaskSummary, before_text
from fastmcp_tasks.dashboard.outcome import error_section, result_section
from fastmcp_tasks.dashboard.summary import MAX_PREFIX
from fastmcp_tasks.stores.base import TaskRecord
from fastmcp_tasks.stores.flow import tombstone_of
from fastmcp_tasks.stores.listing import ListableTaskStore
from fastmcp_tasks.stores.outcomes import tool_error_text

ARGUMENTS_SHOWN = 2000  # characters of pretty arguments shown before "show all"
FIELDS = ("id", "tool", "status", "message", "owner", "created", "duration")


@dataclass(frozen=True)
class View:
    """What every page needs to know about the request and the dashboard."""

    root: str
    read_only: bool
    csrf: str
    now: float
    lease_seconds: float
    live: str

    def frame(self, title: str, body: str, current: str, live: dict[str, str] | None) -> str:
        return page(
            title, body, root=self.root, read_only=self.read_only, current=current, live=live
        )


def _status_label(value: str) -> str:
    return {"": "all statuses", "completed": "completed (no tool error)"}.get(
        value, label_of(value)
    )


def task_row(s: TaskSummary, now: float) -> str:
    """One `tr` of the task table (the JS builds the same from `TaskSummary.to_json`)."""
    cells = {
        "id": f'<a href="tasks/{esc(s.task_id)}">{esc(s.task_id)}</a>',
        "tool": esc(s.tool),
        "status": status_badge(s.outcome),
        "message": esc(s.status_message or ""),
        "owner": esc(s.owner or ""),
        "created": f'<time title="{esc(stamp(s.created_at))}">{esc(stamp(s.created_at))}</time>',
        "duration": esc(span(s.duration(now))),
    }
    tds = "".join(f'<td data-field="{name}"{_title(name, s)}>{cells[name]}</td>' for name in FIELDS)
    return (
        "<tr"
        + attrs(
            data_task_id=s.task_id,
            data_status=s.status,
            data_outcome=s.outcome,
            data_state=s.state_at(now),
            data_paused="true" if s.paused else None,  # its tool is paused (ops.css)
            data_created=repr(s.created_at),  # where a live row goes (dashboard.js)
        )
        + f">{tds}</tr>"
    )


def _title(name: str, s: TaskSummary) -> str:
    if name == "message" and s.status_message:
        return f' title="{esc(s.status_message)}"'
    if name == "tool":
        return f' title="{esc(s.tool)}"'
    return ""


def _filters(index: TaskIndex, query: TaskQuery) -> str:
    chosen = query.params()
    status = chosen.get("status", "")
    tools = [("", "all tools"), *((tool, tool) for tool in index.tools())]
    if query.tool and query.tool not in index.tools():
        tools.append((query.tool, query.tool))
    size = "" if query.limit == 50 else f'<input type="hidden" name="limit" value="{query.limit}">'
    return (
        '<form id="filters" method="get" action="tasks" class="filters">'
        '<label for="filter-status">Status</label>'
        f'<select id="filter-status" name="status">'
        f"{options(((v, _status_label(v)) for v in STATUS_FILTERS), status)}</select>"
        '<label for="filter-tool">Tool</label>'
        f'<select id="filter-tool" name="tool">{options(tools, query.tool or "")}</select>'
        '<label for="filter-owner">Owner</label>'
        f'<input id="filter-owner" name="owner" value="{esc(query.owner or "")}" '
        'placeholder="client_id|sub" autocomplete="off">'
        '<label for="search">Task id starts with</label>'
        f'<input id="search" name="q" type="search" value="{esc(query.id_prefix or "")}" '
        f'maxlength="{MAX_PREFIX}" autocomplete="off" spellcheck="false">'
        f"{size}"
        '<button id="apply-filters" type="submit">Apply filters</button></form>'
    )


def _purge_form(v: View) -> str:
    if v.read_only:
        return ""
    return (
        '<section class="actions" aria-labelledby="purge-heading">'
        '<h2 id="purge-heading">Purge finished tasks</h2>'
        '<form id="purge-form" method="post" action="purge/preview" class="inline">'
        f"{csrf_field(v.csrf)}"
        '<label for="purge-age">Ended more than</label>'
        '<input id="purge-age" name="older_than" value="7d" size="6" required '
        'pattern="[0-9]+(\\.[0-9]+)?[smhdwSMHDW]" aria-describedby="purge-hint">'
        '<span id="purge-hint" class="hint">ago (90s, 30m, 12h, 1d, 2w)</span>'
        '<button id="purge-preview" type="submit">Preview purge</button></form></section>'
    )


def tasks_page(
    v: View, index: TaskIndex, query: TaskQuery, found: TaskPage, *, bulk: str = ""
) -> str:
    rows = "".join(task_row(s, v.now) for s in found.tasks)
    matching = found.matching
    shown = "…" if matching is None else f"{matching:,}"
    total = "" if matching is None else str(matching)
    first = query.before is None
    head = "".join(f'<th scope="col" class="col-{name}">{name}</th>' for name in FIELDS)
    table = (
        '<div class="table-wrap"><table id="task-table" class="tasks"'
        f"{attrs(data_first_page='true' if first else 'false', data_limit=query.limit)}>"
        f"<caption>Tasks, newest first</caption><thead><tr>{head}</tr></thead>"
        f'<tbody id="task-rows">{rows}</tbody></table></div>'
    )
    empty = "" if found.tasks else '<p id="no-tasks" class="notice">No tasks match.</p>'
    paging = f'<a id="first-page" href="tasks?{_qs(query.params(before=None))}">First page</a>'
    if found.next_before is not None:
        paging += (
            f' <a id="next-page" href="tasks?{_qs(query.params(before=found.next_before))}">'
            "Next page</a>"
        )
    body = (  # `#task-results` is what the filters replace in place (dashboard.js)
        "<h1>Tasks</h1>"
        f"{counts_box(index.counts() if index.loaded else None)}"
        f"{_filters(index, query)}"
        f'<div id="task-results" data-query="{_qs(query.params())}">'
        f'<p class="matching"><span id="matching" data-matching="{total}" '
        f'aria-live="polite">{shown}</span> matching</p>'
        f"{table}{empty}"
        f'<nav class="paging" aria-label="Pages">{paging}</nav></div>'
        f"{_purge_form(v)}"
        f"{bulk}"  # the bulk actions by filter (`operations.bulk_html`)
    )
    live = {"page": "tasks", **{k: val for k, val in query.params(before=None).items()}}
    return v.frame("Tasks", body, "tasks", live)


def _qs(params: dict[str, str]) -> str:
    return esc(urlencode(params))


# --- detail --------------------------------------------------------------------------------


def _dl(items: list[tuple[str, str]]) -> str:
    return "".join(f"<dt>{esc(name)}</dt><dd>{value}</dd>" for name, value in items)


def _inputs(summary: TaskSummary, record: TaskRecord, now: float) -> str:
    requests = record.input_requests or {}
    if not requests:
        return ""
    since = dict(zip(summary.input_keys, summary.input_since, strict=False))
    items = []
    for key, request in requests.items():
        method = request.get("method", "?") if isinstance(request, dict) else "?"
        params = request.get("params", {}) if isinstance(request, dict) else {}
        message = params.get("message") if isinstance(params, dict) else None
        asked = since.get(key, record.updated_at)
        items.append(
            f'<li data-input-key="{esc(key)}"><code>{esc(key)}</code> {esc(method)}'
            f"{': ' + esc(message) if message else ''} · waited "
            f'<span data-field="waited" data-since="{asked}">{esc(span(now - asked))}</span></li>'
        )
    return (
        '<section aria-labelledby="inputs-h"><h2 id="inputs-h">Pending input</h2>'
        f'<ul id="detail-inputs">{"".join(items)}</ul></section>'
    )


def detail_page(
    v: View, record: TaskRecord, previous: TaskSummary | None, *, history: str = ""
) -> str:
    now = v.now
    summary = TaskSummary.of(record, previous)
    wire = " (<code>completed</code> on the wire)" if summary.is_error else ""
    times = [
        ("Created", time_tag(record.created_at, now) + f" ({esc(stamp(record.created_at))})"),
        ("Updated", time_tag(record.updated_at, now)),
    ]
    if record.terminal_at is not None:
        times.append(("Ended", time_tag(record.terminal_at, now)))
    duration = esc(span(summary.duration(now)))
    if record.is_active:  # counts on in the page (dashboard.js) until the task ends
        duration = (
            f'<span data-field="elapsed" data-since="{record.created_at!r}">{duration}</span>'
        )
    times.append(("Duration", f'<span id="detail-duration">{duration}</span>'))
    if record.expires_at is not None:
        times.append(("Expires", esc(stamp(record.expires_at))))
    lease = "none (queued)" if record.is_active else "none (the task ended)"
    if record.lease_owner is not None and record.is_active:  # a lease ends with its task
        expires = record.lease_expires or 0.0
        beat = now - (expires - v.lease_seconds)
        state = "expired" if expires < now else "held"
        lease = (
            f"<code>{esc(record.lease_owner)}</code> · {state} · heartbeat "
            f'<span data-field="heartbeat">{esc(span(beat))} ago</span>'
        )
    facts = _dl(
        [
            ("Tool", f"<code>{esc(record.tool)}</code>"),
            ("Status", f'<span id="detail-status">{status_badge(summary.outcome)}</span>{wire}'),
            ("Message", f'<span id="detail-message">{esc(record.status_message or "-")}</span>'),
            ("Times", f'<dl id="detail-times" class="inner">{_dl(times)}</dl>'),
            (
                "Attempts",
                f'<span id="detail-attempts">{record.attempts}'
                f"{f' ({record.retries} retries)' if record.retries else ''}</span>",
            ),
            (
                "Owner",
                f'<span id="detail-owner">{esc(record.owner or "- (no authentication)")}</span>',
            ),
            ("Lease", f'<span id="detail-lease">{lease}</span>'),
            ("App", esc(record.app or "-")),
        ]
    )
    args_text = "-" if record.is_active else "- (not kept after the task ended)"
    if record.arguments is not None:
        args_text = pretty_json(record.arguments)
    short, cut = truncated(args_text, ARGUMENTS_SHOWN)
    arguments = f'<pre id="detail-arguments">{esc(short)}</pre>'
    full = (
        '<details id="arguments-full"><summary>Show all arguments '
        f"({len(args_text):,} characters)</summary><pre>{esc(args_text)}</pre></details>"
    )
    cancel = ""
    if record.is_active and not v.read_only:
        note = " (already requested)" if record.cancel_requested else ""
        cancel = (
            f'<form id="cancel-form" method="post" action="tasks/{esc(record.task_id)}/cancel">'
            f"{csrf_field(v.csrf)}"
            '<button id="cancel-button" type="submit" class="danger">'
            f"Cancel this task{note}</button>"
            "</form>"
        )
    body = (
        f"<h1>Task <code>{esc(record.task_id)}</code></h1>"
        f'<section id="task-detail"{attrs(data_task_id=record.task_id, data_status=record.status)}'
        f"{attrs(data_outcome=summary.outcome)}>"
        f'<dl class="facts">{facts}</dl>{cancel}'
        f'<section aria-labelledby="args-h"><h2 id="args-h">Arguments</h2>{arguments}'
        f"{full if cut else ''}</section>"
        f"{_inputs(summary, record, now)}{result_section(record)}{error_section(record)}"
        '<section aria-labelledby="transitions-h"><h2 id="transitions-h">Seen while open</h2>'
        '<ol id="detail-transitions" aria-live="polite"></ol></section>'
        f"{history}"  # the stored history (`operations.history_html`)
        "</section>"
    )
    return v.frame(f"Task {record.task_id}", body, "tasks", {"page": "task", "id": record.task_id})


async def missing_text(store: ListableTaskStore, task_id: str) -> str:
    """Why a task is not there: purged, expired, or unknown."""
    stone = await tombstone_of(store, task_id)
    shown = task_id[:80]
    if stone is None:
        return f"No task {shown!r} (never created, expired or purged)."
    why = "expired (its retention ran out)" if stone.reason == "expired" else "was purged"
    return f"Task {shown!r} {why} at {stamp(stone.at)}."


# --- purge ---------------------------------------------------------------------------------


def purge_preview_page(v: View, before: float, seconds: float, count: int) -> str:
    noun = f"{count} finished task{'s' if count != 1 else ''}"
    confirm = ""
    if count:
        confirm = (
            '<form id="purge-confirm-form" method="post" action="purge">'
            f'{csrf_field(v.csrf)}<input type="hidden" name="before" value="{before!r}">'
            f'<button id="purge-confirm" type="submit" class="danger">Remove {esc(noun)}</button>'
            ' <a href="tasks">Keep them (no purge)</a></form>'
        )
    body = (
        "<h1>Purge finished tasks</h1>"
        f"<p>Tasks that ended before {esc(stamp(before))} (more than {esc(span(seconds))} ago): "
        f'<strong id="purge-count" data-count="{count}">{esc(noun)}</strong>. '
        "Active tasks are never purged.</p>"
        f"{confirm}"
    )
    return v.frame("Purge", body, "tasks", None)


def purge_result_page(v: View, before: float, removed: int) -> str:
    body = (
        "<h1>Purged</h1>"
        f'<p id="purge-result" data-removed="{removed}">Removed {removed} finished '
        f"task{'s' if removed != 1 else ''} that ended before {esc(stamp(before))}.</p>"
        '<p><a href="tasks">Back to the tasks</a></p>'
    )
    return v.frame("Purged", body, "tasks", None)


# --- JSON ----------------------------------------------------------------------------------


def page_json(found: TaskPage, query: TaskQuery, now: float) -> dict[str, Any]:
    return {
        "tasks": [s.to_json(now) for s in found.tasks],
        "next_before": None if found.next_before is None else before_text(found.next_before),
        "matching": found.matching,
        "query": query.params(),
    }


def record_json(record: TaskRecord, now: float) -> dict[str, Any]:
    names = [field.name for field in dataclasses.fields(TaskRecord) if field.name != "result_json"]
    document: dict[str, Any] = {name: getattr(record, name) for name in names}
    document["result"] = record.result
    document["expires_at"] = record.expires_at
    summary = TaskSummary.of(record)
    document["state"] = summary.state_at(now)
    document["outcome"] = summary.outcome
    document["is_error"] = summary.is_error
    document["tool_error"] = tool_error_text(record)  # whole, not cut
    return document


__all__ = [
    "View",
    "detail_page",
    "missing_text",
    "page_json",
    "purge_preview_page",
    "purge_result_page",
    "record_json",
    "task_row",
    "tasks_page",
]
