"""The PostgreSQL change feed's parts that hold no connection: how a notification's
payload is read (`Heard`, `details_of`, and the kinds and markers: `WAKING_KINDS`, `QUIET`,
`QUEUED_ONLY`), which subscribers want quiet ones (`wants_quiet`) or take `NEW_TASKS`
(`takes_announcements`, `announce`), which creations' rows the runners were told of
already (`Announced`), and how long a runners-only reader waits between two reads (`Pace`).

A change statement notifies with the highest `seq` it wrote (`postgres.sql`), followed by
` quiet` when none of its rows is of a waking kind, or by a single space when its rows
are only new tasks' `queued` rows (a creation's: `QUEUED_ONLY`). `int()` ignores that
space, so a reader from before it takes such a notification as any waking one. The
creations of one batch of statements notify once, their seqs comma-separated before that
space (`postgres.created_notes`); a reader from before that reads no seq in it and
ignores it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass, field
from typing import Any

import anyio

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
    #: every such seq: a creation statement writes one row, so each is that row's seq
    created_seqs: list[int] = field(default_factory=list)

    def add(self, payload: str) -> None:
        """Count `payload`; one that is no seq (the open-time probe of `sessions`) is not.
        A batch's creations' one notification lists their seqs (`postgres.created_notes`)."""
        is_quiet = payload.endswith(QUIET)
        text = payload[: -len(QUIET)] if is_quiet else payload
        if "," in text and text.endswith(QUEUED_ONLY):
            try:
                seqs = [int(part) for part in text.split(",")]
            except ValueError:
                return
            self.created = max(self.created, *seqs)
            self.created_seqs += seqs
            return
        try:
            seq = int(text)
        except ValueError:
            return
        if is_quiet:
            self.quiet = max(self.quiet, seq)
        elif text.endswith(QUEUED_ONLY):
            self.created = max(self.created, seq)
            self.created_seqs.append(seq)
        else:
            self.waking = max(self.waking, seq)


class Announced:
    """The seqs of creations whose `NEW_TASKS` went out before their rows were read.

    A creation statement writes one `queued` row and notifies its seq (`QUEUED_ONLY`; a
    batch's creations notify their seqs together):
    a runners-only reader hands its runners `NEW_TASKS` at once and reads the row later
    (`postgres.feed`). The row then tells a runner nothing it was not told (a `queued`
    change of a new task: a claim round), so it is not handed to the subscribers that
    took the announcement, only to the others. Without this every worker decoded and
    acted on every creation's row a second time. Exact: a row read before its
    notification was heard is not in here, and is handed on as before.
    """

    __slots__ = ("_seqs",)

    def __init__(self) -> None:
        self._seqs: set[int] = set()

    def add(self, seqs: list[int], watermark: int) -> None:
        """Announced creations, those not read yet (past `watermark`)."""
        self._seqs.update(seq for seq in seqs if seq > watermark)

    def take(self, seq: int) -> bool:
        """Whether the row `seq` being read is an announced creation's (forgotten now)."""
        if seq in self._seqs:
            self._seqs.discard(seq)
            return True
        return False

    def forget_through(self, watermark: int) -> None:
        """Drop what can no longer be read (the watermark passed it unread)."""
        if self._seqs:
            self._seqs = {seq for seq in self._seqs if seq > watermark}

    def __len__(self) -> int:
        return len(self._seqs)


class Pace:
    """How long a runners-only reader lets pass between two waits for notifications
    (`spacing`, seconds; `feed` module doc), and that wait, which a shorter pace set
    meanwhile (a pool's secondary needed again: `store.space_wakes`) ends by its own
    end, so a worker needed again is woken at its new pace, not one slow pause later."""

    def __init__(self, spacing: float) -> None:
        self.spacing = spacing
        self._sooner = asyncio.Event()

    def set(self, spacing: float) -> None:
        if spacing < self.spacing:
            self._sooner.set()
        self.spacing = spacing

    async def wait(self, since: float) -> None:
        """Until `spacing` after `since` (`time.monotonic()`), by the latest `spacing`."""
        while (left := self.spacing - (time.monotonic() - since)) > 0:
            self._sooner = asyncio.Event()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):
                    await self._sooner.wait()


def wants_quiet(sub: Subscriber[Any]) -> bool:
    """Whether `sub` wants a kind a quiet notification may announce."""
    return sub.kinds is None or not sub.kinds <= WAKING_ONLY


def any_wants_quiet(subs: set[Subscriber[Any]]) -> bool:
    """Whether a subscriber wants a kind a quiet notification may announce."""
    return any(wants_quiet(sub) for sub in subs)


def takes_new_tasks(sub: Subscriber[Any]) -> bool:
    """Whether `sub` takes `NEW_TASKS` for a creation's rows (`NEW_TASKS_KIND`)."""
    return sub.kinds is not None and NEW_TASKS_KIND in sub.kinds


def takes_announcements(subs: set[Subscriber[Any]]) -> bool:
    """Whether every subscriber wants only waking kinds and each that wants `queued`
    rows takes `NEW_TASKS` for them: a creation need not be read."""
    return not any_wants_quiet(subs) and all(
        sub.kinds is not None and ("queued" not in sub.kinds or takes_new_tasks(sub))
        for sub in subs
    )


def announce(subs: set[Subscriber[Any]], seq: int) -> None:
    """New tasks were created (up to `seq`), not read yet: `NEW_TASKS` to every
    subscriber that takes it (one whose stream is closed is dropped)."""
    for sub in list(subs):
        if takes_new_tasks(sub):
            try:
                sub.send.send_nowait((seq, NEW_TASKS))
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                subs.discard(sub)


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
    "Announced",
    "Heard",
    "announce",
    "any_wants_quiet",
    "details_of",
    "takes_announcements",
    "takes_new_tasks",
    "wants_quiet",
]
