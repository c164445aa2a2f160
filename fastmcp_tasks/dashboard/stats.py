"""The dashboard overview: counts, throughput and backlog over time, per-tool figures.

`overview(index, sampler, now)` summarises the retained window (the oldest retained
task to now, at most `MAX_WINDOW`, in at most `MAX_BUCKETS` buckets of a round size):

- tasks created and finished per bucket (from `created_at` / `terminal_at`), and how
  many of the finished ones failed (`failed`, or a tool error: `stores.outcomes`);
- the backlog over time, two series said apart: `reconstructed`, the active count at
  each bucket's end from the retained tasks' `created_at` / `terminal_at` (purged and
  expired tasks are missing from it, and it cannot say queued from running), and
  `live`, the queued / running / parked samples `BacklogSampler` took since the
  dashboard started;
- per tool: tasks, finished, failed, tool errors (`completed` with an `isError` result),
  failure rate ((failed + tool errors) / finished), and the p50 /
  p95 / p99 duration (`terminal_at - created_at`) of its finished tasks, interpolated
  like `statistics.quantiles(method="inclusive")`;
- the 10 longest-running tasks (age since creation) and the 10 longest-waiting
  `input_required` tasks, waited since the oldest outstanding request was first seen
  (`TaskSummary.input_since`: stores do not record when a request was asked).

The pass over every summary is cached per index for `CACHE_SECONDS` while nothing
changed (and at most `CACHE_SECONDS` when something did): counts, the top-10 lists and
the live samples are always current.
"""

from __future__ import annotations

import math
import weakref
from collections import deque
from dataclasses import dataclass
from typing import Any

from fastmcp_tasks.dashboard.index import TaskIndex, TaskSummary, iso

#: Longest window the charts cover (seconds).
MAX_WINDOW = 86_400.0
#: Shortest window (a young store still gets a readable chart).
MIN_WINDOW = 1_800.0
#: Most buckets a series has.
MAX_BUCKETS = 120
#: Bucket sizes to pick from (seconds): the smallest giving at most `MAX_BUCKETS`.
BUCKET_SIZES = (60, 120, 300, 600, 900, 1_800, 3_600)
#: How long the full pass over the index is reused (seconds).
CACHE_SECONDS = 2.0
#: How many tasks each top list shows.
TOP = 10


@dataclass(frozen=True, slots=True)
class Sample:
    """One live backlog sample."""

    at: float
    queued: int
    running: int
    parked: int


class BacklogSampler:
    """Live samples of queued / running / parked tasks, in a bounded ring.

    `sample` records the index's active tasks' states now; samples closer than
    `min_interval` to the previous one are skipped, so a caller may call it often.
    """

    def __init__(self, *, size: int = 720, min_interval: float = 1.0) -> None:
        self.samples: deque[Sample] = deque(maxlen=size)
        self.min_interval = min_interval

    def sample(self, index: TaskIndex, now: float) -> None:
        if self.samples and now - self.samples[-1].at < self.min_interval:
            return
        states = {"queued": 0, "running": 0, "parked": 0}
        for s in index.active():
            state = s.state_at(now)
            if state in states:
                states[state] += 1
        self.samples.append(Sample(now, states["queued"], states["running"], states["parked"]))


@dataclass(frozen=True, slots=True)
class Bucket:
    """One bucket of the window: its start, tasks created and finished in it, and the
    reconstructed active count at its end; `failed`: of the finished, how many failed
    or ended with a tool error."""

    start: float
    created: int
    finished: int
    active: int
    failed: int = 0


@dataclass(frozen=True, slots=True)
class ToolStats:
    """One tool's figures over the retained tasks."""

    tool: str
    count: int
    finished: int
    failed: int  # ended `failed`
    failure_rate: float | None  # (failed + tool_errors) / finished; None before any finished
    p50: float | None
    p95: float | None
    p99: float | None
    tool_errors: int = 0  # ended `completed` with an `isError` result (`stores.outcomes`)


@dataclass(frozen=True, slots=True)
class Ranked:
    """A task of a top list and its figure (seconds running or waiting)."""

    task: TaskSummary
    seconds: float


@dataclass(frozen=True)
class Window:
    """The time range the series cover: `[start, end)` in buckets of `bucket` seconds."""

    start: float
    end: float
    bucket: float


@dataclass(frozen=True)
class Overview:
    """Everything the overview page shows (see the module docstring)."""

    now: float
    counts: dict[str, int]
    window: Window
    per_minute: list[Bucket]  # created / finished per bucket (`window.bucket` seconds)
    backlog: list[Bucket]  # the same buckets: `active` is the reconstructed backlog
    live_backlog: list[Sample]  # sampled since the dashboard started
    tools: list[ToolStats]
    slowest_running: list[Ranked]
    longest_waiting: list[Ranked]
    loaded: bool = True

    def to_json(self) -> dict[str, Any]:
        """The `/api/overview` document."""
        window = self.window
        return {
            "now": iso(self.now),
            "loaded": self.loaded,
            "counts": self.counts,
            "window": {
                "start": iso(window.start),
                "end": iso(window.end),
                "bucket_seconds": window.bucket,
            },
            "per_bucket": [
                {
                    "start": iso(b.start),
                    "created": b.created,
                    "finished": b.finished,
                    "failed": b.failed,
                }
                for b in self.per_minute
            ],
            "backlog": {
                "reconstructed": [
                    {"at": iso(b.start + window.bucket), "active": b.active} for b in self.backlog
                ],
                "live": [
                    {"at": iso(s.at), "queued": s.queued, "running": s.running, "parked": s.parked}
                    for s in self.live_backlog
                ],
            },
            "tools": [
                {
                    "tool": t.tool,
                    "count": t.count,
                    "finished": t.finished,
                    "failed": t.failed,
                    "tool_errors": t.tool_errors,
                    "failure_rate": t.failure_rate,
                    "duration_p50": t.p50,
                    "duration_p95": t.p95,
                    "duration_p99": t.p99,
                }
                for t in self.tools
            ],
            "slowest_running": [_ranked_json(r, self.now) for r in self.slowest_running],
            "longest_waiting": [_ranked_json(r, self.now) for r in self.longest_waiting],
        }


def _ranked_json(ranked: Ranked, now: float) -> dict[str, Any]:
    return {**ranked.task.to_json(now), "seconds": round(ranked.seconds, 3)}


def percentile(ordered: list[float], p: float) -> float | None:
    """The `p`-th percentile (0..100) of sorted data, linearly interpolated between the
    closest ranks: `statistics.quantiles(data, n=100, method="inclusive")[p - 1]`."""
    if not ordered:
        return None
    position = (len(ordered) - 1) * p / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def window_of(oldest: float | None, now: float) -> Window:
    """The window from the oldest retained task to `now` (see `MAX_WINDOW`, `MIN_WINDOW`),
    in the smallest round bucket giving at most `MAX_BUCKETS` once aligned to it (the
    window's ends are bucket boundaries: it covers `oldest` unless capped)."""
    span = min(MAX_WINDOW, max(MIN_WINDOW, now - (oldest if oldest is not None else now)))
    bucket = next(
        (size for size in BUCKET_SIZES if span / size <= MAX_BUCKETS - 2), BUCKET_SIZES[-1]
    )
    end = (math.floor(now / bucket) + 1) * bucket
    count = min(MAX_BUCKETS, math.ceil((end - (now - span)) / bucket))
    return Window(end - count * bucket, end, float(bucket))


@dataclass(frozen=True)
class _Pass:
    """What one pass over every summary found (cached)."""

    version: int
    at: float
    window: Window
    buckets: list[Bucket]
    tools: list[ToolStats]


_cache: weakref.WeakKeyDictionary[TaskIndex, _Pass] = weakref.WeakKeyDictionary()


def _full_pass(index: TaskIndex, now: float) -> _Pass:
    rows = list(index.summaries())
    oldest = min((s.created_at for s in rows), default=None)
    window = window_of(oldest, now)
    size, start, n = window.bucket, window.start, round((window.end - window.start) / window.bucket)
    created, finished, failures = [0] * n, [0] * n, [0] * n
    base = 0  # active at the window's start
    durations: dict[str, list[float]] = {}
    counts: dict[str, list[int]] = {}  # tool -> [count, finished, failed, tool errors]
    for s in rows:
        figures = counts.get(s.tool)
        if figures is None:
            figures = counts[s.tool] = [0, 0, 0, 0]
            durations[s.tool] = []
        figures[0] += 1
        born, ended = s.created_at, s.terminal_at
        if born >= start:
            created[min(n - 1, int((born - start) // size))] += 1
        elif ended is None or ended >= start:
            base += 1
        if ended is not None:
            figures[1] += 1
            failure = s.status == "failed" or s.tool_error is not None
            if s.status == "failed":
                figures[2] += 1
            elif failure:
                figures[3] += 1
            durations[s.tool].append(ended - born)
            if ended >= start:
                at = min(n - 1, int((ended - start) // size))
                finished[at] += 1
                failures[at] += failure
    buckets, active = [], base
    for i in range(n):
        active += created[i] - finished[i]
        buckets.append(
            Bucket(start + i * size, created[i], finished[i], max(0, active), failures[i])
        )
    tools = []
    for tool in sorted(counts):
        count, done, failed, tool_errors = counts[tool]
        ordered = sorted(durations[tool])
        tools.append(
            ToolStats(
                tool,
                count,
                done,
                failed,
                (failed + tool_errors) / done if done else None,
                percentile(ordered, 50),
                percentile(ordered, 95),
                percentile(ordered, 99),
                tool_errors,
            )
        )
    return _Pass(index.version, now, window, buckets, tools)


def overview(index: TaskIndex, sampler: BacklogSampler, now: float) -> Overview:
    """The overview of `index` at `now` (see the module docstring)."""
    cached = _cache.get(index)
    if cached is None or now - cached.at >= CACHE_SECONDS or now < cached.at:
        cached = _cache[index] = _full_pass(index, now)
    active = index.active()
    running = [Ranked(s, now - s.created_at) for s in active if s.state_at(now) == "running"]
    waiting = [
        Ranked(s, now - (min(s.input_since) if s.input_since else s.updated_at))
        for s in active
        if s.status == "input_required"
    ]
    return Overview(
        now=now,
        counts=index.counts(),
        window=cached.window,
        per_minute=cached.buckets,
        backlog=cached.buckets,
        live_backlog=list(sampler.samples),
        tools=cached.tools,
        slowest_running=sorted(running, key=lambda r: -r.seconds)[:TOP],
        longest_waiting=sorted(waiting, key=lambda r: -r.seconds)[:TOP],
        loaded=index.loaded,
    )


__all__ = [
    "BacklogSampler",
    "Bucket",
    "Overview",
    "Ranked",
    "Sample",
    "ToolStats",
    "Window",
    "overview",
    "percentile",
    "window_of",
]
