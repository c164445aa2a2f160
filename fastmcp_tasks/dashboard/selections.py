"""Bulk actions by filter: the filter a form names, and the previewed sets kept for confirming.

"Cancel matching…" and "Purge matching…" post the task list's filters (`status`,
`tool`, `owner`, `q`); `filter_from_form` reads them into an `actions.TaskFilter`
narrowed to what the action can touch (cancel: the active tasks; purge: the finished
ones), so the preview counts exactly what the confirmation would act on.

The preview selects the ids (`actions.select`) and keeps them here under a random
token (`Selections.put`); the confirmation form carries only that token, and the
action runs on those ids (`Selections.take`, once), so a task that matches the filter
but was created after the preview is never touched. A token lives `TTL` seconds; at
most `MAX_PENDING` previews and `MAX_IDS` ids in all are kept (the oldest dropped
first), so previews cannot grow the dashboard's memory without bound. A token is
bound to the label that previewed it: another operator cannot confirm it.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from fastmcp_tasks.actions import OUTCOMES, Selection, TaskFilter
from fastmcp_tasks.dashboard.summary import MAX_PREFIX
from fastmcp_tasks.stores.outcomes import OUTCOME_GROUPS

#: Seconds a previewed selection can be confirmed.
TTL = 600.0
#: Most previews kept at once.
MAX_PENDING = 32
#: Most ids kept over all previews.
MAX_IDS = 200_000
#: What each bulk action may touch.
ACTIONS: dict[str, frozenset[str]] = {
    "cancel": OUTCOME_GROUPS["active"],
    "purge": OUTCOME_GROUPS["finished"],
}


def filter_from_form(form: Mapping[str, str], action: str) -> TaskFilter:
    """The filter of a bulk form, narrowed to what `action` touches; ValueError when a
    value is not one the task list offers."""
    if action not in ACTIONS:
        raise ValueError(f"unknown bulk action {action[:20]!r}: cancel or purge")
    text = (form.get("status") or "").strip()
    if text in OUTCOME_GROUPS:
        outcomes = OUTCOME_GROUPS[text]
    elif text in OUTCOMES:
        outcomes = frozenset({text})
    elif text:
        known = ", ".join(["active", "finished", *sorted(OUTCOMES)])
        raise ValueError(f"unknown status {text[:40]!r}: use one of {known} (or nothing)")
    else:
        outcomes = OUTCOMES
    prefix = (form.get("q") or "").strip()
    if len(prefix) > MAX_PREFIX:
        raise ValueError(f"the id search takes at most {MAX_PREFIX} characters")
    return TaskFilter(
        outcomes=outcomes & ACTIONS[action],
        tool=(form.get("tool") or "").strip() or None,
        owner=(form.get("owner") or "").strip() or None,
        id_prefix=prefix or None,
    )


def filter_words(where: TaskFilter) -> str:
    """The filter in words, for the preview and result pages."""
    parts = []
    if where.outcomes is not None:
        parts.append("status " + " or ".join(sorted(where.outcomes)))
    for name, value in (("tool", where.tool), ("owner", where.owner)):
        if value is not None:
            parts.append(f"{name} {value}")
    if where.id_prefix:
        parts.append(f"id starting with {where.id_prefix}")
    return ", ".join(parts) or "every task"


@dataclass(frozen=True, slots=True)
class Pending:
    """A previewed bulk action waiting for its confirmation."""

    action: str
    where: TaskFilter
    selection: Selection
    label: str  # who previewed it
    made_at: float
    back: str = "tasks"  # the task list it came from


class Selections:
    """Previewed selections by token (module docstring)."""

    def __init__(
        self,
        *,
        ttl: float = TTL,
        max_pending: int = MAX_PENDING,
        max_ids: int = MAX_IDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl = ttl
        self.max_pending = max_pending
        self.max_ids = max_ids
        self.clock = clock
        self._pending: OrderedDict[str, Pending] = OrderedDict()

    def __len__(self) -> int:
        return len(self._pending)

    def _expire(self) -> None:
        horizon = self.clock() - self.ttl
        for token in [t for t, p in self._pending.items() if p.made_at < horizon]:
            del self._pending[token]

    def put(
        self, action: str, where: TaskFilter, selection: Selection, label: str, back: str = "tasks"
    ) -> str:
        """Keep a preview's ids; the token its confirmation form carries."""
        self._expire()
        token = secrets.token_urlsafe(24)
        self._pending[token] = Pending(action, where, selection, label, self.clock(), back)
        held = sum(p.selection.count for p in self._pending.values())
        while len(self._pending) > 1 and (
            len(self._pending) > self.max_pending or held > self.max_ids
        ):
            _, dropped = self._pending.popitem(last=False)
            held -= dropped.selection.count
        return token

    def take(self, token: str, label: str) -> Pending | None:
        """The preview of `token` made by `label`, once (`None`: unknown, expired, used,
        dropped, or another label's, which stays for its owner)."""
        self._expire()
        pending = self._pending.get(token)
        if pending is None or pending.label != label:
            return None
        del self._pending[token]
        return pending


__all__ = [
    "ACTIONS",
    "MAX_IDS",
    "MAX_PENDING",
    "TTL",
    "Pending",
    "Selections",
    "filter_from_form",
    "filter_words",
]
