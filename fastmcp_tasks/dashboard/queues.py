"""The queues of each application's tools: who can run them, what waits, what is paused.

A queue is an `(app, tool)` pair (`app` as a pause names it: "" for tasks created
without one). `board` counts the index's active tasks per queue: `waiting` (state
`queued` and no live lease: nobody has it; gated, due later or given back included),
`running`, `parked`, `held` (held by a pause: `not_before == PAUSED_UNTIL`, never
counted as waiting), and the live registered workers of the app that declare the
tool. Queues come from the active tasks, the live workers' tools and the pauses.

Warnings (only on a store with a worker registry, `stores.operations`):

- `unserved`: tasks of a queue wait and no live registered worker of that app can
  run the tool. Raised even when no worker ever registered (a server older than the
  registry, or none at all): either way nothing known runs them;
- `paused`: tasks are held by a pause (`since`, `by`), said apart from the above.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fastmcp_tasks.dashboard.index import TaskIndex, TaskSummary
from fastmcp_tasks.stores.operations import Pause, WorkerInfo, pause_key


@dataclass
class Queue:
    """One tool of one application: its active tasks, its live workers, its pause."""

    app: str
    tool: str
    waiting: int = 0
    running: int = 0
    parked: int = 0
    held: int = 0
    workers: int = 0  # live registered workers of `app` that can run `tool`
    pause: Pause | None = None

    @property
    def unserved(self) -> bool:
        return self.waiting > 0 and self.workers == 0

    def to_json(self) -> dict[str, Any]:
        return {
            "app": self.app,
            "tool": self.tool,
            "waiting": self.waiting,
            "running": self.running,
            "parked": self.parked,
            "held": self.held,
            "workers": self.workers,
            "paused": None if self.pause is None else self.pause.to_json(),
        }


@dataclass(frozen=True)
class Alert:
    """Something an operator must see on the overview (module docstring)."""

    kind: str  # unserved | paused
    app: str
    tool: str
    count: int
    text: str

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "app": self.app,
            "tool": self.tool,
            "count": self.count,
            "text": self.text,
        }


@dataclass
class Board:
    """Every queue, the pauses, the warnings."""

    queues: list[Queue]
    pauses: list[Pause]
    registered: int  # workers in the registry (any state)
    warnings: list[Alert] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "queues": [q.to_json() for q in self.queues],
            "pauses": [p.to_json() for p in self.pauses],
            "registered_workers": self.registered,
            "warnings": [w.to_json() for w in self.warnings],
        }


def app_name(app: str) -> str:
    """How an application is named in a sentence."""
    return f"app {app!r}" if app else "no app"


def _tasks(n: int) -> str:
    return f"{n:,} task{'s' if n != 1 else ''}"


def waits(s: TaskSummary, now: float) -> bool:
    """Whether an active task waits for a worker: queued, nobody's live lease, no pause."""
    if s.paused or s.state_at(now) != "queued":
        return False
    return s.lease_owner is None or (s.lease_expires or 0.0) <= now


def board(index: TaskIndex, workers: list[WorkerInfo], pauses: list[Pause], now: float) -> Board:
    """The queues, pauses and warnings of the index's active tasks (module docstring)."""
    queues: dict[tuple[str, str], Queue] = {}

    def queue(app: str | None, tool: str) -> Queue:
        key = (pause_key(app), tool)
        if key not in queues:
            queues[key] = Queue(*key)
        return queues[key]

    for s in index.active():
        q = queue(s.app, s.tool)
        if s.paused:
            q.held += 1
        elif waits(s, now):
            q.waiting += 1
        else:
            state = s.state_at(now)
            if state == "running":
                q.running += 1
            elif state == "parked":
                q.parked += 1
    live = [w for w in workers if w.alive(now)]
    for w in live:
        for tool in w.tools:
            queue(w.app, tool).workers += 1
    for p in pauses:
        queue(p.app, p.tool).pause = p
    ordered = [queues[key] for key in sorted(queues)]
    result = Board(ordered, sorted(pauses, key=lambda p: (p.app, p.tool)), len(workers))
    for q in ordered:
        if q.unserved:
            result.warnings.append(Alert("unserved", q.app, q.tool, q.waiting, _unserved(q, live)))
        if q.held:
            by = f" by {q.pause.by}" if q.pause is not None else ""
            verb = "is" if q.held == 1 else "are"
            text = (
                f"{_tasks(q.held)} of {app_name(q.app)} {verb} held: tool {q.tool!r} is paused{by}"
                if q.pause is not None
                else f"{_tasks(q.held)} of {app_name(q.app)} {verb} still held: tool "
                f"{q.tool!r} was resumed and they are released as workers take them"
            )
            result.warnings.append(Alert("paused", q.app, q.tool, q.held, text))
    return result


def _unserved(q: Queue, live: list[WorkerInfo]) -> str:
    verb = "waits" if q.waiting == 1 else "wait"
    them = "it" if q.waiting == 1 else "them"
    text = (
        f"{_tasks(q.waiting)} of {app_name(q.app)} {verb} (tool {q.tool!r}) "
        f"and no live worker can run {them}"
    )
    same_app = [w for w in live if pause_key(w.app) == q.app]
    if same_app:
        text += f": {len(same_app)} live worker{'s' if len(same_app) != 1 else ''} of the app"
        text += f" {'do' if len(same_app) != 1 else 'does'} not declare the tool"
    elif not live:
        text += ": no live worker is registered (servers older than the registry are not listed)"
    return text


__all__ = ["Alert", "Board", "Queue", "app_name", "board", "waits"]
