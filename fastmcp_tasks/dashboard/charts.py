"""The overview's two charts as inline SVG text: throughput bars and backlog lines.

Pure functions of an `Overview`, no script: each returns one `<svg>` of a fixed
`viewBox` and size (`WIDTH` x `HEIGHT`, scaled down to fit and never reflowing when a
live update replaces it), with `role="img"`, an `aria-label` and a `<title>` giving a
text summary of what it shows, axis labels, a legend, and colours readable on a light
background. Every text in it is XML-escaped. Times are labelled in UTC.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from html import escape

from fastmcp_tasks.dashboard.stats import Overview

WIDTH, HEIGHT = 640, 220
_LEFT, _RIGHT, _TOP, _BOTTOM = 48, 12, 28, 40
CREATED, FINISHED, FAILED = "#1d4ed8", "#15803d", "#b91c1c"
QUEUED, RUNNING, PARKED, ACTIVE = "#b45309", "#1d4ed8", "#7e22ce", "#4b5563"
_AXIS, _TEXT = "#6b7280", "#1f2937"


def _clock(when: float) -> str:
    return datetime.fromtimestamp(when, UTC).strftime("%H:%M")


def _span(seconds: float) -> str:
    if seconds >= 3600:
        hours = seconds / 3600
        return f"{hours:g} h" if hours == int(hours) else f"{hours:.1f} h"
    return f"{round(seconds / 60)} min"


def bucket_name(bucket: float) -> str:
    """A bucket's length as a caption says it: "minute", "15 min", "2 h"."""
    return "minute" if bucket == 60 else _span(bucket)


def _top(peak: float) -> int:
    """A round axis maximum at or above `peak` (at least 1)."""
    for step in (1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 5000, 10_000):
        if peak <= step:
            return step
    magnitude = 10 ** (len(str(int(peak))) - 1)
    return int(-(-peak // magnitude) * magnitude)


def _frame(
    chart_id: str, title: str, label: str, y_max: int, y_title: str, start: float, end: float
) -> list[str]:
    plot_w, plot_h = WIDTH - _LEFT - _RIGHT, HEIGHT - _TOP - _BOTTOM
    base = _TOP + plot_h
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" id="{escape(chart_id)}-svg" role="img" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
        f'aria-label="{escape(label)}" '
        f'font-family="system-ui, sans-serif" font-size="11">',
        f"<title>{escape(title)}</title>",
        f"<desc>{escape(label)}</desc>",
        f'<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>',
    ]
    for fraction in (0.0, 0.5, 1.0):
        y = base - plot_h * fraction
        value = y_max * fraction
        shown = f"{value:g}" if value == int(value) else f"{value:.1f}"
        parts.append(
            f'<line x1="{_LEFT}" y1="{y:.1f}" x2="{WIDTH - _RIGHT}" y2="{y:.1f}" '
            f'stroke="#e5e7eb" stroke-width="1"/>'
        )
        parts.append(
            f'<text x="{_LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" fill="{_TEXT}">'
            f"{escape(shown)}</text>"
        )
    parts += [
        f'<line x1="{_LEFT}" y1="{_TOP}" x2="{_LEFT}" y2="{base}" stroke="{_AXIS}"/>',
        f'<line x1="{_LEFT}" y1="{base}" x2="{WIDTH - _RIGHT}" y2="{base}" stroke="{_AXIS}"/>',
        f'<text x="{_LEFT}" y="{base + 16}" fill="{_TEXT}">{escape(_clock(start))}</text>',
        f'<text x="{WIDTH - _RIGHT}" y="{base + 16}" text-anchor="end" fill="{_TEXT}">'
        f"{escape(_clock(end))}</text>",
        f'<text x="{_LEFT + plot_w / 2:.1f}" y="{HEIGHT - 6}" text-anchor="middle" '
        f'fill="{_TEXT}">time (UTC)</text>',
        f'<text x="12" y="{_TOP + plot_h / 2:.1f}" text-anchor="middle" fill="{_TEXT}" '
        f'transform="rotate(-90 12 {_TOP + plot_h / 2:.1f})">{escape(y_title)}</text>',
    ]
    return parts


def _legend(items: Sequence[tuple[str, str, bool]]) -> list[str]:
    parts, x = [], _LEFT
    for name, colour, dashed in items:
        dash = ' stroke-dasharray="4 3"' if dashed else ""
        parts.append(
            f'<line x1="{x}" y1="14" x2="{x + 16}" y2="14" stroke="{colour}" '
            f'stroke-width="3"{dash}/>'
        )
        parts.append(f'<text x="{x + 20}" y="18" fill="{_TEXT}">{escape(name)}</text>')
        x += 28 + 7 * len(name)
    return parts


def throughput_chart(overview: Overview, chart_id: str = "throughput") -> str:
    """Bars of tasks created and finished per bucket over the window; the part of a
    finished bar that failed (`failed`, or a tool error) drawn at its foot in red."""
    window, buckets = overview.window, overview.per_minute
    created = sum(b.created for b in buckets)
    finished = sum(b.finished for b in buckets)
    failed = sum(b.failed for b in buckets)
    peak = max(buckets, key=lambda b: b.created + b.finished, default=None)
    per = bucket_name(window.bucket)
    label = (
        f"Tasks created and finished per {per} over the last {_span(window.end - window.start)}: "
        f"{created} created, {finished} finished ({failed} failed or ended with a tool error)"
    )
    if peak is not None and peak.created + peak.finished:
        label += (
            f"; busiest at {_clock(peak.start)} UTC with {peak.created} created "
            f"and {peak.finished} finished"
        )
    label += "."
    y_max = _top(max((max(b.created, b.finished) for b in buckets), default=0))
    parts = _frame(
        chart_id,
        f"Throughput per {per}",
        label,
        y_max,
        f"tasks per {per}",
        window.start,
        window.end,
    )
    plot_w, plot_h = WIDTH - _LEFT - _RIGHT, HEIGHT - _TOP - _BOTTOM
    base = _TOP + plot_h
    slot = plot_w / max(1, len(buckets))
    bar = max(0.5, slot * 0.4)
    for i, b in enumerate(buckets):
        x = _LEFT + i * slot + slot * 0.1
        for offset, value, colour in ((0.0, b.created, CREATED), (bar, b.finished, FINISHED)):
            if value:
                h = plot_h * value / y_max
                parts.append(
                    f'<rect x="{x + offset:.1f}" y="{base - h:.1f}" width="{bar:.1f}" '
                    f'height="{h:.1f}" fill="{colour}"/>'
                )
        if b.failed:
            h = plot_h * b.failed / y_max
            parts.append(
                f'<rect x="{x + bar:.1f}" y="{base - h:.1f}" width="{bar:.1f}" '
                f'height="{h:.1f}" fill="{FAILED}"/>'
            )
    parts += _legend(
        [
            ("created", CREATED, False),
            ("finished", FINISHED, False),
            ("failed or tool error", FAILED, False),
        ]
    )
    parts.append("</svg>")
    return "".join(parts)


def _polyline(points: list[tuple[float, float]], colour: str, dashed: bool = False) -> str:
    if not points:
        return ""
    dash = ' stroke-dasharray="4 3"' if dashed else ""
    text = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
    if len(points) == 1:
        x, y = points[0]
        return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="{colour}"/>'
    return (
        f'<polyline points="{text}" fill="none" stroke="{colour}" stroke-width="2"'
        f'{dash} stroke-linejoin="round"/>'
    )


def backlog_chart(overview: Overview, chart_id: str = "backlog") -> str:
    """Lines of the backlog over the window: the active count reconstructed from the
    retained tasks (dashed), and the live queued / running / parked samples."""
    window, buckets, live = overview.window, overview.backlog, overview.live_backlog
    start, end = window.start, max(window.end, overview.now)
    peak = max(
        max((b.active for b in buckets), default=0),
        max((s.queued + s.running + s.parked for s in live), default=0),
        max((max(s.queued, s.running, s.parked) for s in live), default=0),
    )
    y_max = _top(peak)
    label = (
        f"Backlog over the last {_span(window.end - window.start)}: reconstructed from retained "
        f"tasks, at most {max((b.active for b in buckets), default=0)} active"
    )
    if buckets:
        label += f", {buckets[-1].active} now"
    if live:
        last = live[-1]
        label += (
            f"; sampled live since {_clock(live[0].at)} UTC: {last.queued} queued, "
            f"{last.running} running, {last.parked} parked now"
        )
    else:
        label += "; no live samples yet"
    label += "."
    parts = _frame(chart_id, "Backlog over time", label, y_max, "tasks", start, end)
    plot_w, plot_h = WIDTH - _LEFT - _RIGHT, HEIGHT - _TOP - _BOTTOM
    base = _TOP + plot_h

    def x_of(when: float) -> float:
        return _LEFT + plot_w * min(1.0, max(0.0, (when - start) / max(1.0, end - start)))

    def y_of(value: float) -> float:
        return base - plot_h * value / y_max

    reconstructed = [(x_of(b.start + window.bucket), y_of(b.active)) for b in buckets]
    parts.append(_polyline(reconstructed, ACTIVE, dashed=True))
    for attr, colour in (("queued", QUEUED), ("running", RUNNING), ("parked", PARKED)):
        parts.append(_polyline([(x_of(s.at), y_of(getattr(s, attr))) for s in live], colour))
    parts += _legend(
        [
            ("active (reconstructed)", ACTIVE, True),
            ("queued (live)", QUEUED, False),
            ("running (live)", RUNNING, False),
            ("parked (live)", PARKED, False),
        ]
    )
    parts.append("</svg>")
    return "".join(parts)


__all__ = ["HEIGHT", "WIDTH", "backlog_chart", "bucket_name", "throughput_chart"]
