"""The overview and workers pages, and their JSON (`/api/overview`, `/api/workers`).

The overview shows the live counts, the two charts of `charts` (fixed viewBox: no
layout shift), the per-tool table (tasks, failed, tool errors, the failure rate
counting both, duration percentiles), the
slowest running tasks and the longest waiting `input_required` ones. The workers page
lists the processes holding leases (`workers.workers`), stale leases highlighted.
"""

from __future__ import annotations

from typing import Any

from fastmcp_tasks.dashboard.charts import backlog_chart, bucket_name, throughput_chart
from fastmcp_tasks.dashboard.html import counts_box, esc, span
from fastmcp_tasks.dashboard.index import TaskIndex
from fastmcp_tasks.dashboard.pages import View
from fastmcp_tasks.dashboard.stats import BacklogSampler, Ranked, overview
from fastmcp_tasks.dashboard.workers import WorkerRow, workers

SLOW = "Nothing running."
WAIT = "Nothing waits for input."


def _seconds(value: float | None) -> str:
    return "-" if value is None else esc(span(value))


def _ranked(element_id: str, title: str, rows: list[Ranked], what: str, empty: str) -> str:
    items = "".join(
        f'<tr data-task-id="{esc(r.task.task_id)}"><td data-field="id">'
        f'<a href="tasks/{esc(r.task.task_id)}">{esc(r.task.task_id)}</a></td>'
        f'<td data-field="tool">{esc(r.task.tool)}</td>'
        f'<td data-field="message" title="{esc(r.task.status_message or "")}">'
        f"{esc(r.task.status_message or '')}</td>"
        f'<td data-field="seconds" class="num">{_seconds(r.seconds)}</td></tr>'
        for r in rows
    )
    body = items or f'<tr class="empty"><td colspan="4">{esc(empty)}</td></tr>'
    return (
        f'<section class="ranked" aria-labelledby="{element_id}-h">'
        f'<h2 id="{element_id}-h">{esc(title)}</h2><div class="table-wrap">'
        f'<table id="{element_id}"><thead><tr><th scope="col">id</th><th scope="col">tool</th>'
        f'<th scope="col">message</th><th scope="col" class="num">{esc(what)}</th></tr></thead>'
        f"<tbody>{body}</tbody></table></div></section>"
    )


def overview_page(v: View, index: TaskIndex, sampler: BacklogSampler) -> str:
    o = overview(index, sampler, v.now)
    tool_rows = "".join(
        f'<tr data-tool="{esc(t.tool)}"><th scope="row">{esc(t.tool)}</th>'
        f'<td class="num">{t.count:,}</td><td class="num">{t.finished:,}</td>'
        f'<td class="num" data-field="failed">{t.failed:,}</td>'
        f'<td class="num" data-field="tool-errors">{t.tool_errors:,}</td>'
        f'<td class="num" data-field="failure-rate">'
        f"{'-' if t.failure_rate is None else f'{t.failure_rate:.1%}'}</td>"
        f'<td class="num">{_seconds(t.p50)}</td><td class="num">{_seconds(t.p95)}</td>'
        f'<td class="num">{_seconds(t.p99)}</td></tr>'
        for t in o.tools
    )
    if not tool_rows:
        tool_rows = '<tr class="empty"><td colspan="9">No tasks yet.</td></tr>'
    heads = ("tasks", "finished", "failed", "tool errors", "failure rate", "p50", "p95", "p99")
    tool_head = "".join(f'<th scope="col" class="num">{h}</th>' for h in heads)
    loading = "" if o.loaded else '<p class="notice">Reading the store…</p>'
    body = (
        f"<h1>Overview</h1>{loading}"
        f"{counts_box(o.counts if o.loaded else None)}"
        '<div class="charts">'
        '<figure class="chart"><figcaption>Created and finished per '
        f"{esc(bucket_name(o.window.bucket))}</figcaption>"
        f'<div id="chart-throughput" class="chart-box">{throughput_chart(o)}</div></figure>'
        '<figure class="chart"><figcaption>Backlog (queued, running, parked)</figcaption>'
        f'<div id="chart-backlog" class="chart-box">{backlog_chart(o)}</div></figure></div>'
        '<section aria-labelledby="tools-h"><h2 id="tools-h">By tool</h2><div class="table-wrap">'
        f'<table id="tool-table"><thead><tr><th scope="col">tool</th>{tool_head}</tr></thead>'
        f"<tbody>{tool_rows}</tbody></table></div></section>"
        '<div class="pair">'
        f"{_ranked('slowest-running', 'Slowest running', o.slowest_running, 'running', SLOW)}"
        f"{_ranked('longest-waiting', 'Longest waiting', o.longest_waiting, 'waited', WAIT)}"
        "</div>"
    )
    return v.frame("Overview", body, "overview", {"page": "overview"})


def overview_json(index: TaskIndex, sampler: BacklogSampler, now: float) -> dict[str, Any]:
    return overview(index, sampler, now).to_json()


def _worker_row(w: WorkerRow, now: float) -> str:
    tasks = ", ".join(t.task_id for t in w.tasks[:5]) + (" …" if len(w.tasks) > 5 else "")
    tools = sorted({t.tool for t in w.tasks})
    beat = "-" if w.heartbeat_age is None else f"{span(w.heartbeat_age)} ago"
    stale = ' data-stale="true" class="stale"' if w.stale else ' data-stale="false"'
    label = " (stale)" if w.stale else ""
    beat += " · stale" if w.stale else ""  # said in words where it shows, not by colour only
    return (
        f'<tr data-worker="{esc(w.owner)}"{stale}>'
        f'<th scope="row" data-field="owner" title="{esc(w.owner)}"><code>{esc(w.owner)}</code>'
        f"{esc(label)}</th>"
        f'<td data-field="host">{esc(w.host)}</td>'
        f'<td data-field="pid" class="num">{esc(w.pid if w.pid is not None else "-")}</td>'
        f'<td data-field="tasks" class="num" title="{esc(tasks)}">{len(w.tasks)}</td>'
        f'<td data-field="tools">{esc(", ".join(tools))}</td>'
        f'<td data-field="heartbeat" class="num">{esc(beat)}</td></tr>'
    )


def workers_page(v: View, index: TaskIndex) -> str:
    rows = workers(index, v.now, v.lease_seconds)
    body_rows = "".join(_worker_row(w, v.now) for w in rows)
    if not body_rows:
        body_rows = '<tr class="empty"><td colspan="6">No process holds a lease.</td></tr>'
    heads = ("process", "host", "pid", "tasks", "tools", "heartbeat")
    head = "".join(f'<th scope="col">{h}</th>' for h in heads)
    body = (
        "<h1>Workers</h1>"
        f"{counts_box(index.counts() if index.loaded else None)}"
        "<p>Processes holding task leases. A lease not renewed in time is stale: its "
        "process probably died, and recovery will hand its tasks to another.</p>"
        f'<div class="table-wrap"><table id="worker-table"><thead><tr>{head}</tr></thead>'
        f"<tbody>{body_rows}</tbody></table></div>"
    )
    return v.frame("Workers", body, "workers", {"page": "workers"})


def workers_json(index: TaskIndex, now: float, lease_seconds: float) -> list[dict[str, Any]]:
    return [w.to_json(now) for w in workers(index, now, lease_seconds)]


__all__ = ["overview_json", "overview_page", "workers_json", "workers_page"]
