"""The PostgreSQL change feed's parts that hold no connection: how a notification's
payload is read (`Heard`, `details_of`, and the kinds and markers: `WAKING_KINDS`, `QUIET`,
`QUEUED_ONLY`) and which subscriber wants quiet ones (`wants_quiet`).

A change statement notifies with the highest `seq` it wrote (`postgres.sql`), followed by
` quiet` when none of its rows is of a waking kind, or by a single space when its rows
are only new tasks' `queued` rows (a creation's: `QUEUED_ONLY`). `int()` ignores that
space, so a reader from before it takes such a notification as any waking one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from fastmcp_tasks.stores.base import NEW_TASKS_KIND, TaskChange
from fastmcp_tasks.stores.subscriptions import Subscriber

#: The change kinds whose notification every reader acts on: those a task engine waits
#: for (`server.engine.watcher.WATCHED`: a claimable task, a cancel request, an answer).
#: A notification of only other kinds (`status`, `message`, `inputs`) says ` quiet`, is
#: sent only while some reader wants them (`postgres.quiet_readers`), and wakes only the
#: readers whose subscribers want them (a `subscriptions/listen` stream, a `tasks/result`
#: waiter, the dashboard): a worker does not read the change rows of every status
#: change made anywhere.
WAKING_KINDS = ("queued", "cancel_requested", "answered")
#: What a quiet notification's payload ends with, after the seq.
QUIET = " quiet"
#: What a creation's notification ends with (its rows are only new tasks' `queued`
#: rows): a reader whose subscribers are all runners wakes them without reading the rows
#: (`postgres.feed`). `int()` ignores it: an older reader reads the seq as before.
QUEUED_ONLY = " "
#: What a reader hands a subscriber of `NEW_TASKS_KIND` for a creation it has not read
#: yet: "something was queued" (its rows, task ids and application included, come with a
#: later read).
NEW_TASKS = TaskChange("", "queued", "working", {})
#: The kinds of a subscriber that is woken by notifications alone (a worker's runner).
WAKING_ONLY = frozenset({*WAKING_KINDS, NEW_TASKS_KIND})


@dataclass(slots=True)
class Heard:
    """The highest seqs the notifications of one wait announced, by what they announce."""

    #: of a notification with a waking row other than a creation's
    waking: int = 0
    #: of one with no waking row (` quiet`)
    quiet: int = 0
    #: of one whose rows are only new tasks' `queued` rows
    created: int = 0

    def add(self, payload: str) -> None:
        """Count `payload`; one that is no seq (the open-time probe of `sessions`) is not."""
        is_quiet = payload.endswith(QUIET)
        text = payload[: -len(QUIET)] if is_quiet else payload
        try:
            seq = int(text)
        except ValueError:
            return
        if is_quiet:
            self.quiet = max(self.quiet, seq)
        elif text.endswith(QUEUED_ONLY):
            self.created = max(self.created, seq)
        else:
            self.waking = max(self.waking, seq)


def wants_quiet(sub: Subscriber[Any]) -> bool:
    """Whether `sub` wants a kind a quiet notification may announce."""
    return sub.kinds is None or not sub.kinds <= WAKING_ONLY


def details_of(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


__all__ = [
    "NEW_TASKS",
    "QUEUED_ONLY",
    "QUIET",
    "WAKING_KINDS",
    "WAKING_ONLY",
    "Heard",
    "details_of",
    "wants_quiet",
]
