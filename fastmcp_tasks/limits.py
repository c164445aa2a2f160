"""Size limits on what a client can make the server store.

Arguments of a task and answers to its input requests are kept in the store
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

MIB = 1024 * 1024


def json_size(value: Any) -> int:
    """Bytes of `value` as compact JSON."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return len(text.encode("utf-8", "surrogatepass"))  # a lone surrogate must not crash


@dataclass(frozen=True)
class Limits:
    """The size caps, in bytes (`None`: no cap)."""

    max_argument_bytes: int | None = 32 * MIB
    max_input_bytes: int | None = 8 * MIB
    max_result_bytes: int | None = 64 * MIB

    def over(self, limit: str, value: Any) -> tuple[int, int] | None:
        """`(cap, size)` when `value` is over the cap called `limit`, else `None`."""
        cap = getattr(self, limit)
        if cap is None:
            return None
        size = json_size(value)
        return (cap, size) if size > cap else None
