"""Durations as users give them: a `timedelta`, or a plain number of seconds.

Every duration the package takes goes through `duration()` when it is constructed:
`TasksExtension(retention=, sweep_interval=, input_timeout=, lease=, shutdown_grace=,
store_timeout=, tombstone_retention=)`, `task_options(dedupe=, input_timeout=)` and
`Retry(backoff=, max_backoff=)`. An `int` or a `float` is seconds and becomes a
`timedelta` there, so nothing deeper ever compares a number with a `timedelta`. A
bool (an `int` to Python, never meant as one second), another type, NaN or an
infinity is refused with a `ConfigurationError` saying what the parameter takes, and
so is a negative value (or zero, where the duration must be positive).
`TaskConfig(poll_interval=)` is FastMCP's own and left as FastMCP takes it.
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any, TypeAlias

from fastmcp_tasks.errors import ConfigurationError

#: What a duration parameter accepts: a `timedelta`, or seconds (`int` is a `float` here).
Duration: TypeAlias = timedelta | float


def duration(name: str, value: Any, *, positive: bool = False) -> timedelta:
    """`value` (a `timedelta` or seconds) as a `timedelta`; `name` is the parameter as the
    user wrote it, for the message. Zero is refused too when `positive`.

    Raises:
        ConfigurationError: not a duration, not finite, negative (or zero when `positive`).
    """
    if isinstance(value, timedelta):
        delta, shown = value, f"timedelta(seconds={value.total_seconds():g})"
    elif isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        try:
            delta, shown = timedelta(seconds=value), repr(value)
        except OverflowError:  # over 999,999,999 days
            raise ConfigurationError(
                f"{name} is longer than a timedelta can be: {value!r}"
            ) from None
    else:
        raise ConfigurationError(f"{name} takes a timedelta or a number of seconds, got {value!r}")
    if positive and delta <= timedelta(0):
        raise ConfigurationError(
            f"{name} must be positive: a timedelta or a number of seconds above 0, got {shown}"
        )
    if delta < timedelta(0):
        raise ConfigurationError(
            f"{name} must not be negative: a timedelta or a number of seconds, got {shown}"
        )
    return delta


def optional_duration(name: str, value: Any, *, positive: bool = False) -> timedelta | None:
    """`duration()`, where `None` (no limit, keep forever) is allowed and stays `None`."""
    return None if value is None else duration(name, value, positive=positive)


__all__ = ["Duration", "duration", "optional_duration"]
