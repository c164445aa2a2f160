"""Optional pacing of `tasks/get` per task (C19: clients polling faster may be rate-limited).

`PollPacer` keeps one token bucket per task id: `burst` polls pass at once, then
one more each `fraction * pollIntervalMs`. A client honouring `pollIntervalMs`
never meets it (the default `fraction` is well under 1); one spinning on
`tasks/get` gets -32000 with `retryAfterMs` instead of costing a store read per
spin. Buckets live in this process only, at most `max_tracked` of them (the
least recently polled are forgotten first), so memory stays bounded whatever
ids clients send.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict


class PollPacer:
    """Token buckets for `tasks/get`, one per task id.

    Args:
        fraction: the share of a task's `pollIntervalMs` that must pass between
            polls once the burst is spent (0 < fraction <= 1).
        burst: polls allowed back to back.
        max_tracked: most task ids remembered at once.
    """

    def __init__(self, fraction: float, burst: int, *, max_tracked: int = 100_000) -> None:
        self.fraction = fraction
        self.burst = burst
        self.max_tracked = max_tracked
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._buckets)

    def retry_after_ms(
        self, task_id: str, poll_interval_ms: int | None, now: float | None = None
    ) -> int | None:
        """Take one poll of `task_id`: `None` when it may pass, else ms until the next may."""
        if not poll_interval_ms:
            return None
        now = time.monotonic() if now is None else now
        spacing = poll_interval_ms * self.fraction / 1000  # seconds per token
        tokens, last = self._buckets.pop(task_id, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - last) / spacing)
        if tokens >= 1:
            self._remember(task_id, tokens - 1, now)
            return None
        self._remember(task_id, tokens, now)
        return max(1, math.ceil((1 - tokens) * spacing * 1000))

    def _remember(self, task_id: str, tokens: float, now: float) -> None:
        self._buckets[task_id] = (tokens, now)
        while len(self._buckets) > self.max_tracked:
            self._buckets.popitem(last=False)
