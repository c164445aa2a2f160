"""The overview page and its JSON (`/api/overview`).

The overview shows the live counts, the two charts of `charts` (fixed viewBox: no
layout shift), the per-tool table (tasks, failed, tool errors, the failure rate
counting both, duration percentiles), the
slowest running tasks and the longest waiting `input_required` ones. The workers page
is `worker_pages` (the registry merged with the lease holders, `registry`).
"""

from __future__ import annotations

from typing import Any

from fastmcp_tasks.dashboard.charts import backlog_chart, bucket_name, throughput_chart
from fastmcp_tasks.dashboard.html import counts_box, esc, span
from fastmcp_tasks.dashboard.index import TaskIndex
from fastmcp_tasks.dashboard.pages import View
from fastmcp_tasks.dashboard.stats import BacklogSampler, Ranked, overview

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


def overview_page(v: View, index: TaskIndex, sampler: BacklogSampler, *, notices: str = "") -> str:
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
        f"<h1>Overview</h1>{loading}{notices}"
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


__all__ = ["overview_json", "overview_page"]
