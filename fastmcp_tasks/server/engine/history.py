"""A task's history as this process sees it happen, written to the store in batches.

`HistoryWriter` is one per process (one per `TasksExtension`). The engine and the
request handlers call `note(task_id, kind, **details)` where something happens to a
task (the kinds and their details: `stores.operations.EventKind`): it stamps the
event with `time.time()` and appends it to a buffer, synchronously and cheaply, so
no request or run ever waits for the history. A supervised loop (`run`, under
`supervision.periodic`) writes the buffer with one `store.add_events(batch)` every
`FLUSH_SECONDS`, or sooner once `BATCH` events wait; shutdown writes what is left
(`close`, bounded).

Status messages (`message`) are coalesced per task: one is recorded at most every
`MESSAGE_SECONDS`, never the same text twice in a row; the latest one of a busy
window is recorded when the window ends, or before the task's next event, with the
time it was set. A task's end (`finished`) forgets what was kept for it.

Faults. The buffer holds at most `MAX_BUFFERED` events: while the store does not
take them (an outage), the oldest are dropped and counted (one WARNING per outage),
so the engine never blocks and memory stays bounded. A `StoreError` puts the batch
back and the loop backs off like every other loop; any other error (a bug: an event
the store cannot encode) drops that batch, counted, and the loop goes on.

A store without the capability (`stores.operations.operable` is `None`, a third-party
store), or a writer built with `enabled=False` (`TasksExtension(history=False)`), does
no work at all: `note` returns at once.

Every event is written by the engine here, from what the engine decided or was told
by the store; no text a tool or a client controls is read back from it to decide
anything, except the one rule in `outcomes`: an operator's `cancel_requested` event
(written by operator commands, never by a client) names who cancelled.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict, deque
from typing import Any, cast

import anyio

from fastmcp_tasks.errors import StoreError
from fastmcp_tasks.server.monitored_store import innermost
from fastmcp_tasks.server.observability import shown_id
from fastmcp_tasks.stores.base import TaskStore
from fastmcp_tasks.stores.operations import OperableTaskStore, TaskEvent, operable

logger = logging.getLogger("fastmcp_tasks.history")

#: Seconds between two writes of the buffer.
FLUSH_SECONDS = 0.2
#: Events written in one `add_events`; this many waiting wakes the writer at once.
BATCH = 500
#: Most events waiting for the store; beyond it the oldest are dropped.
MAX_BUFFERED = 20_000
#: A task's status messages are recorded at most once per this many seconds.
MESSAGE_SECONDS = 2.0
#: Tasks whose last recorded message is remembered (the oldest are forgotten).
TRACKED_TASKS = 10_000
#: Longest text an event carries (a message, an error).
SHOWN_TEXT = 200
#: How long shutdown waits for the store to take what is left.
CLOSE_SECONDS = 2.0

#: An event as noted: task id, when, kind, details.
Noted = tuple[str, float, str, dict[str, Any]]


def operations_of(store: TaskStore) -> OperableTaskStore | None:
    """`store` when it keeps operator records (`stores.operations`), else `None`.

    A wrapper (`MonitoredStore`, `SealedStore`) is asked about the store it wraps (it
    forwards every method, which a runtime protocol check does not see on every Python),
    and returned itself, so the calls stay bounded, reported and sealed.
    """
    if operable(innermost(store)) is None:
        return None
    return cast(OperableTaskStore, store)


def cut(text: Any) -> str:
    """`text` as one short line (at most `SHOWN_TEXT` characters)."""
    line = " ".join(str(text).split())
    return line if len(line) <= SHOWN_TEXT else line[: SHOWN_TEXT - 1] + "…"


def ending(
    status: str,
    result: dict[str, Any] | None = None,
    error: dict[str, Any] | None = None,
    message: str | None = None,
) -> dict[str, Any]:
    """The details of a `finished` event for a task that ended with `status`.

    `outcome`: `completed`, `error` (completed with a result whose `isError` is true),
    `failed` or `cancelled`; `message`: the error's, or the status message, cut short.
    """
    outcome = status
    text: Any = message
    if status == "completed" and isinstance(result, dict) and result.get("isError"):
        outcome = "error"
        content = result.get("content") or []
        text = next(
            (c.get("text") for c in content if isinstance(c, dict) and c.get("type") == "text"),
            None,
        )
    elif status == "failed" and isinstance(error, dict) and error.get("message") is not None:
        text = error.get("message")
    details: dict[str, Any] = {"outcome": outcome}
    if text:
        details["message"] = cut(text)
    return details


class HistoryWriter:
    """Buffers this process's task events and writes them in batches (module doc)."""

    def __init__(
        self,
        store: TaskStore,
        *,
        enabled: bool = True,
        flush_seconds: float = FLUSH_SECONDS,
        max_buffered: int = MAX_BUFFERED,
        sealed: bool = False,
    ) -> None:
        self.store = operations_of(store) if enabled else None
        #: payloads are sealed (`seal="all"`): a `finished` event keeps no error text
        self.sealed = sealed
        self.flush_seconds = flush_seconds
        self.max_buffered = max_buffered
        self.dropped = 0  # events given up since the start
        #: (task id, at, kind, details): the `TaskEvent`s are built when written, off the
        #: paths that note them
        self._buffer: deque[Noted] = deque()
        self._wake = anyio.Event()
        self._dropping = False  # an outage is dropping events (logged once)
        #: task id -> (when, text) of its last recorded message
        self._messages: OrderedDict[str, tuple[float, str]] = OrderedDict()
        #: task id -> (when, text) of a message waiting for its window to end
        self._held: dict[str, tuple[float, str]] = {}

    @property
    def enabled(self) -> bool:
        """Whether the store keeps histories (else every `note` is a no-op)."""
        return self.store is not None

    @property
    def waiting(self) -> int:
        """Events noted and not written yet."""
        return len(self._buffer)

    # --- noting (synchronous, cheap) ----------------------------------------------------

    def note(self, task_id: str, kind: str, **details: Any) -> None:
        """Record that `kind` happened to the task now (see `EventKind` for `details`)."""
        if self.store is None:
            return
        if self._held:
            self._release(task_id)  # its pending message happened first
        if kind == "finished":
            self._messages.pop(task_id, None)
            if self.sealed and details.get("outcome") in ("error", "failed"):
                details.pop("message", None)  # the tool's or the error's words: sealed
        self._append((task_id, time.time(), kind, details))

    def message(self, task_id: str, text: str | None) -> None:
        """A status message the task's tool set (coalesced, see the module doc)."""
        if self.store is None or not text:
            return
        now = time.time()
        last = self._messages.get(task_id)
        if last is not None and now - last[0] >= MESSAGE_SECONDS and task_id in self._held:
            self._release(task_id)  # the held one's window has ended: it came first
            last = self._messages.get(task_id)
        if last is not None and now - last[0] < MESSAGE_SECONDS:
            if text == last[1]:
                self._held.pop(task_id, None)  # back to what was recorded: nothing new
            else:
                self._held[task_id] = (now, text)
            return
        if last is None or text != last[1]:
            self._record_message(task_id, now, text)

    def _record_message(self, task_id: str, at: float, text: str) -> None:
        messages = self._messages
        messages[task_id] = (at, text)
        messages.move_to_end(task_id)
        if len(messages) > TRACKED_TASKS:
            messages.popitem(last=False)
        self._append((task_id, at, "message", {"message": cut(text)}))

    def _release(self, task_id: str) -> None:
        held = self._held.pop(task_id, None)
        if held is not None:
            self._record_message(task_id, *held)

    def _release_due(self, now: float) -> None:
        """Record every held message whose task's window has ended."""
        for task_id, (_at, _text) in list(self._held.items()):
            last = self._messages.get(task_id)
            if last is None or now - last[0] >= MESSAGE_SECONDS:
                self._release(task_id)

    def _append(self, noted: Noted) -> None:
        buffer = self._buffer
        if len(buffer) >= self.max_buffered:
            buffer.popleft()
            self._dropped(1)
        buffer.append(noted)
        if len(buffer) >= BATCH:
            self._wake.set()

    def _dropped(self, count: int) -> None:
        self.dropped += count
        if not self._dropping:
            self._dropping = True
            logger.warning(
                "Task history: the store is not taking events; dropping the oldest beyond "
                "%d waiting (the tasks themselves are not affected)",
                self.max_buffered,
            )

    # --- writing (the supervised loop) -------------------------------------------------

    def starting(self) -> None:
        """The loop starts (a server may run again, in another event loop): a fresh wake-up."""
        self._wake = anyio.Event()

    async def wait(self) -> None:
        """Until the next write is due: `flush_seconds`, or a full batch waiting."""
        with anyio.move_on_after(self.flush_seconds):
            await self._wake.wait()
        self._wake = anyio.Event()

    async def flush(self) -> None:
        """Write every waiting event, a batch at a time.

        Raises:
            StoreError: the store did not take a batch (it is kept for the next try).
        """
        store = self.store
        if store is None:
            return
        if self._held:
            self._release_due(time.time())
        buffer = self._buffer
        while buffer:
            batch = [buffer.popleft() for _ in range(min(BATCH, len(buffer)))]
            try:
                await store.add_events([(t, TaskEvent(at, kind, d)) for t, at, kind, d in batch])
            except StoreError:
                self._put_back(batch)
                raise
            except Exception:
                self._dropped(len(batch))  # a bug: never retried forever
                raise
        if self._dropping:
            self._dropping = False
            logger.warning("Task history: the store takes events again (%d dropped)", self.dropped)

    def _put_back(self, batch: list[Noted]) -> None:
        buffer = self._buffer
        buffer.extendleft(reversed(batch))
        over = len(buffer) - self.max_buffered
        for _ in range(max(0, over)):
            buffer.popleft()
        if over > 0:
            self._dropped(over)

    async def close(self, within: float = CLOSE_SECONDS) -> None:
        """At shutdown: write what is left, for at most `within` seconds."""
        if self.store is None:
            return
        self._held_all()
        with anyio.CancelScope(shield=True), anyio.move_on_after(within):
            try:
                await self.flush()
            except Exception as exc:
                logger.debug("Task history: the last write failed (%r)", exc)
        if self._buffer:
            logger.warning(
                "Task history: %d events were not written before shutdown (e.g. of task %s)",
                len(self._buffer),
                shown_id(self._buffer[0][0]),
            )

    def _held_all(self) -> None:
        for task_id in list(self._held):
            self._release(task_id)


__all__ = [
    "BATCH",
    "FLUSH_SECONDS",
    "MAX_BUFFERED",
    "MESSAGE_SECONDS",
    "HistoryWriter",
    "cut",
    "ending",
    "operations_of",
]
