"""The dashboard's HTML building blocks: the page frame, escaping, times, small widgets.

Everything that reaches a page goes through `esc` (html.escape, quotes included).
Pages carry `<base href="ROOT/">` so every link is relative to the dashboard's root,
wherever it is mounted. No inline script or style (the CSP forbids both): behaviour
is `static/dashboard.js`, data for it travels in `data-` attributes.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from fastmcp_tasks.stores.outcomes import ERROR, ERROR_LABEL

#: The count boxes shown on every page, in order: what an operator asks first.
COUNT_NAMES = (
    "queued",
    "running",
    "parked",
    "working",
    "input_required",
    "completed",
    ERROR,
    "failed",
    "cancelled",
)
STATUSES = ("working", "input_required", "completed", "failed", "cancelled")
#: The status filter's choices: groups, then outcomes (`completed` without tool errors).
STATUS_FILTERS = (
    "",
    "active",
    "finished",
    "working",
    "input_required",
    "completed",
    ERROR,
    "failed",
    "cancelled",
)
#: How a status or an outcome is named where it is shown.
LABELS = {ERROR: ERROR_LABEL}


def label_of(name: str) -> str:
    """A status, outcome or state as a person reads it (`tool error`, `input required`)."""
    return LABELS.get(name, name.replace("_", " "))


def esc(value: Any) -> str:
    """Text fit for HTML content and attribute values."""
    return html.escape("" if value is None else str(value), quote=True)


def attrs(**values: Any) -> str:
    """` name="value"` pairs (`data_x` becomes `data-x`; `None` and `False` are left out)."""
    parts = []
    for name, value in values.items():
        if value is None or value is False:
            continue
        name = name.rstrip("_").replace("_", "-")
        parts.append(f" {name}" if value is True else f' {name}="{esc(value)}"')
    return "".join(parts)


def stamp(when: float | None) -> str:
    """A UTC time to the second (`2026-12-01 19:50:03Z`)."""
    if when is None:
        return "-"
    return datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def span(seconds: float | None) -> str:
    """A duration in its two largest units: `850ms`, `12s`, `5m 3s`, `2h 10m`, `3d 4h`."""
    if seconds is None:
        return "-"
    seconds = max(0.0, seconds)
    if seconds < 1:
        return f"{int(seconds * 1000)}ms"
    if seconds < 60:
        return f"{seconds:.1f}s" if seconds < 10 else f"{int(seconds)}s"
    whole = int(seconds)
    for size, unit, small, small_unit in (
        (86_400, "d", 3600, "h"),
        (3600, "h", 60, "m"),
        (60, "m", 1, "s"),
    ):
        if whole >= size:
            return f"{whole // size}{unit} {(whole % size) // small}{small_unit}"
    return f"{whole}s"  # pragma: no cover


def ago(when: float | None, now: float) -> str:
    return "-" if when is None else f"{span(now - when)} ago"


def time_tag(when: float | None, now: float) -> str:
    """A `<time>` showing the age, the exact UTC time as its title."""
    if when is None:
        return "-"
    iso = datetime.fromtimestamp(when, UTC).isoformat()
    return f'<time datetime="{iso}" title="{esc(stamp(when))}">{esc(ago(when, now))}</time>'


def status_badge(status: str) -> str:
    """A badge of a status or an outcome (`error`: a tool error, styled as a failure)."""
    text = LABELS.get(status, status)
    return f'<span class="badge status-{esc(status)}">{esc(text)}</span>'


def counts_box(counts: Mapping[str, int] | None, element_id: str = "counts") -> str:
    """The live counts (`[data-count=NAME]`), announced politely to screen readers."""
    cells = []
    for name in COUNT_NAMES:
        value = "…" if counts is None else str(counts.get(name, 0))
        cells.append(
            f'<div class="count count-{name}"><span class="count-label">{label_of(name)}</span>'
            f'<span class="count-value" data-count="{name}">{value}</span></div>'
        )
    return (
        f'<section id="{esc(element_id)}" class="counts" aria-label="Task counts" '
        f'aria-live="polite">{"".join(cells)}</section>'
    )


def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=str)


def truncated(text: str, limit: int) -> tuple[str, bool]:
    if len(text) <= limit:
        return text, False
    return text[:limit] + f"\n… ({len(text)} characters in all)", True


def csrf_field(csrf: str) -> str:
    return f'<input type="hidden" name="csrf" value="{esc(csrf)}">'


def options(values: Iterable[tuple[str, str]], selected: str) -> str:
    return "".join(
        f'<option value="{esc(value)}"{" selected" if value == selected else ""}>'
        f"{esc(label)}</option>"
        for value, label in values
    )


def nav(current: str) -> str:
    links = [
        ("overview", "", "Overview"),
        ("tasks", "tasks", "Tasks"),
        ("workers", "workers", "Workers"),
        ("queues", "queues", "Queues"),
        ("audit", "audit", "Audit"),
    ]
    items = []
    for name, href, label in links:
        here = ' aria-current="page"' if name == current else ""
        items.append(f'<li><a id="nav-{name}" href="./{href}"{here}>{label}</a></li>')
    return f'<nav aria-label="Dashboard"><ul>{"".join(items)}</ul></nav>'


def page(
    title: str,
    body: str,
    *,
    root: str,
    read_only: bool,
    current: str = "",
    live: Mapping[str, str] | None = None,
) -> str:
    """A whole HTML document; `live` (query for `events?…`) makes the page follow changes."""
    stream = ""
    if live is not None:
        stream = f' data-events="events?{_query(live)}"'
    base = esc(root.rstrip("/") + "/")
    return (
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<base href="{base}"><title>{esc(title)} · fastmcp-tasks</title>'
        '<link rel="stylesheet" href="static/dashboard.css">'
        '<link rel="stylesheet" href="static/ops.css">'
        '<script src="static/dashboard.js" defer></script>'
        '<script src="static/ops.js" defer></script></head>'
        f'<body data-read-only="{"true" if read_only else "false"}" data-page="{esc(current)}"'
        f"{stream}>"
        '<header class="top"><a class="brand" href="./">fastmcp-tasks</a>'
        f"{nav(current)}"
        '<span id="live-status" data-state="connecting" role="status" aria-live="polite">'
        "connecting</span></header>"
        f'<main id="main">{body}</main></body></html>'
    )


def _query(values: Mapping[str, str]) -> str:
    return esc(urlencode({k: v for k, v in values.items() if v}))


def message_page(
    title: str, message: str, *, root: str, read_only: bool, element_id: str = "message"
) -> str:
    body = f'<h1>{esc(title)}</h1><p id="{esc(element_id)}" class="notice">{esc(message)}</p>'
    body += '<p><a href="./">Back to the overview</a></p>'
    return page(title, body, root=root, read_only=read_only)


def login_page(root: str, message: str, next_url: str, csrf: str) -> str:
    body = (
        "<h1>Log in</h1>"
        f'<p class="notice" id="login-message">{esc(message)}</p>'
        '<form id="login-form" method="post" action="login" class="stack">'
        f"{csrf_field(csrf)}"
        f'<input type="hidden" name="next" value="{esc(next_url)}">'
        '<label for="login-token">Dashboard token</label>'
        '<input id="login-token" name="token" type="password" autocomplete="current-password"'
        " required>"
        '<button type="submit" id="login-button">Log in</button></form>'
    )
    return page("Log in", body, root=root, read_only=True)


__all__ = [
    "COUNT_NAMES",
    "STATUSES",
    "STATUS_FILTERS",
    "ago",
    "attrs",
    "counts_box",
    "csrf_field",
    "esc",
    "label_of",
    "login_page",
    "message_page",
    "options",
    "page",
    "pretty_json",
    "span",
    "stamp",
    "status_badge",
    "time_tag",
    "truncated",
]
