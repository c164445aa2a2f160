"""Limits on what clients can make the server store and do.

Active tasks. `max_active_tasks` caps the tasks in `working` or
`input_required` across the whole store (every process sharing it), and
`max_active_per_principal` caps those of one authenticated principal (OAuth
`client_id` and `sub`; see `ownership`). Without authentication every caller is
the same anonymous principal, so only the global cap applies to them. The store
checks both atomically with the insert (one event-loop turn, one SQLite
transaction, one Redis script); a refused `tools/call` gets -32000 naming the
limit and its value, and nothing is created.

Polling. `min_poll_fraction` (off by default) refuses a `tasks/get` of one task
that comes sooner than that fraction of its `pollIntervalMs` after the previous
one, once a small burst (`poll_burst`) is used up (C19): -32000 with
`retryAfterMs`. The bookkeeping is per process; each replica limits on its own.

Sizes. Arguments of a task and answers to its input requests are kept in the store
while the task is active, and a completed result for its retention: each has a
cap (defaults generous enough for a multi-megabyte document). Sizes are the
compact JSON encoding, the form every store persists. Over a cap, arguments and
answers are refused with -32602 naming the limit and nothing is stored; a
result over its cap ends the task `failed` with -32603 naming the limit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from fastmcp_tasks.errors import ConfigurationError
from fastmcp_tasks.stores.base import ActiveCaps
from fastmcp_tasks.stores.text import EncodedJSON

MIB = 1024 * 1024


def json_size(value: Any) -> int:
    """Bytes of `value` as compact JSON."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return len(text.encode("utf-8", "surrogatepass"))  # a lone surrogate must not crash


@dataclass(frozen=True)
class Limits:
    """The caps (`None`: no cap). Sizes are bytes of compact JSON.

    Attributes:
        max_argument_bytes: a task's `arguments`.
        max_input_bytes: the `inputResponses` of one `tasks/update`.
        max_result_bytes: a completed task's stored result.
        max_active_tasks: tasks active at once in the store, all principals.
        max_active_per_principal: tasks active at once for one authenticated principal.
        min_poll_fraction: a `tasks/get` sooner than this fraction of the task's
            `pollIntervalMs` after the previous one is refused (e.g. `0.5`).
        poll_burst: how many quick polls of one task pass before that applies.
    """

    max_argument_bytes: int | None = 32 * MIB
    max_input_bytes: int | None = 8 * MIB
    max_result_bytes: int | None = 64 * MIB
    max_active_tasks: int | None = 10_000
    max_active_per_principal: int | None = 1_000
    min_poll_fraction: float | None = None
    poll_burst: int = 3

    def __post_init__(self) -> None:
        for name in (
            "max_argument_bytes",
            "max_input_bytes",
            "max_result_bytes",
            "max_active_tasks",
            "max_active_per_principal",
        ):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigurationError(f"{name} must be at least 1 (or None), got {value}")
        if self.min_poll_fraction is not None and not 0 < self.min_poll_fraction <= 1:
            raise ConfigurationError(
                f"min_poll_fraction must be in (0, 1] (or None), got {self.min_poll_fraction}"
            )
        if self.poll_burst < 1:
            raise ConfigurationError(f"poll_burst must be at least 1, got {self.poll_burst}")

    @property
    def active_caps(self) -> ActiveCaps:
        """The active-task caps a store checks when it creates a task."""
        return ActiveCaps(self.max_active_tasks, self.max_active_per_principal)

    def over(self, limit: str, value: Any) -> tuple[int, int] | None:
        """`(cap, size)` when `value` is over the cap called `limit`, else `None` (an
        `EncodedJSON` is measured by the text it carries)."""
        cap = getattr(self, limit)
        if cap is None:
            return None
        size = value.size if type(value) is EncodedJSON else json_size(value)
        return (cap, size) if size > cap else None
