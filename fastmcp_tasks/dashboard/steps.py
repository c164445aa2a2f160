"""A task's durable steps as an operator sees them: name, when, size; never the values.

`steps_of` reads what the store keeps (`stores.steps`; `None` on a store without the
capability). The dashboard's task page gets a "Steps" section (`steps_section`: the
count and the last `SHOWN` steps, server-rendered and escaped like the history);
`fastmcp-tasks show` prints the same rows (`cli.history`) and `show --json` carries
`steps: [{name, at, size}]` (`steps_json`). A step's value is the tool's data, as its
result is: shown nowhere here.
"""

from __future__ import annotations

from typing import Any

from fastmcp_tasks.dashboard.html import esc, stamp
from fastmcp_tasks.stores.base import TaskStore
from fastmcp_tasks.stores.steps import StepRecord, stepped

#: Steps the task page and `show` list (the last ones); `show --json` has them all.
SHOWN = 50


async def steps_of(store: TaskStore, task_id: str) -> list[StepRecord] | None:
    """The task's recorded steps, oldest first; `None` when the store keeps none."""
    inner: Any = store
    while getattr(inner, "inner", None) is not None:  # a wrapper (sealed, monitored)
        inner = inner.inner  # ask the store it wraps; read through the wrapper
    if stepped(inner) is None:
        return None
    return list(await store.steps(task_id))  # type: ignore[attr-defined]


def steps_json(steps: list[StepRecord] | None) -> list[dict[str, Any]] | None:
    """`[{name, at, size}]`, oldest first (`None`: the store keeps no steps)."""
    if steps is None:
        return None
    return [{"name": s.name, "at": s.at, "size": s.size} for s in steps]


def size_text(size: int) -> str:
    """A step's size in bytes, as shown: `512 B`, `12,345 B`."""
    return f"{size:,} B"


def _item(record: StepRecord) -> str:
    return (
        f'<li><time title="{esc(stamp(record.at))}">{esc(stamp(record.at))}</time> '
        f'<code class="step-name">{esc(record.name)}</code> '
        f'<span class="step-size">{esc(size_text(record.size))}</span></li>'
    )


def steps_section(steps: list[StepRecord] | None) -> str:
    """The task page's Steps: none on a store that keeps no steps, nor for a task
    that recorded none."""
    if not steps:
        return ""
    shown = steps[-SHOWN:]
    earlier = len(steps) - len(shown)
    note = (
        f'<p id="steps-earlier" class="hint">The last {len(shown)} of {len(steps):,} steps; '
        f"the {earlier:,} before are not listed (fastmcp-tasks show --json has all).</p>"
        if earlier
        else ""
    )
    count = f"{len(steps):,} completed step{'' if len(steps) == 1 else 's'}"
    return (
        '<section id="steps" aria-labelledby="steps-h"><h2 id="steps-h">Steps</h2>'
        f'<p id="steps-count">{esc(count)}</p>{note}'
        f'<ol id="steps-list" class="history" start="{earlier + 1}">'
        f"{''.join(_item(s) for s in shown)}</ol></section>"
    )


__all__ = ["SHOWN", "size_text", "steps_json", "steps_of", "steps_section"]
