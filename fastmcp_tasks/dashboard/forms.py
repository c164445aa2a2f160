"""Reading the dashboard's POST forms and their values, within bounds.

`read_form` is the one body reader of every POST (`/login` included, which runs
without the token): a `Content-Length` over `MAX_FORM` is refused before any of the
body is read, and a body without one is read only up to `MAX_FORM` bytes (413 past
it). `parse_age` reads a purge age (`30m`, `1d`) and `parse_cutoff` a purge's
confirmed cutoff; both refuse what no preview would give (non-finite, absurdly far,
or in the future), so a bad value is a 400 before anything is deleted.
"""

from __future__ import annotations

import math
import time
from urllib.parse import parse_qsl

from starlette.requests import Request

from fastmcp_tasks.dashboard.security import Refusal

#: The largest POST body read (bytes).
MAX_FORM = 16_384
#: The oldest purge age taken (about 100 years, in seconds).
MAX_AGE = 100 * 365.25 * 86_400
_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}


async def read_form(request: Request, limit: int = MAX_FORM) -> dict[str, str]:
    """The urlencoded form of a POST; `Refusal(413)` once the body is over `limit` bytes."""
    declared = request.headers.get("content-length", "").strip()
    if declared.isdigit() and int(declared) > limit:
        raise Refusal(413, "The form is too large.")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise Refusal(413, "The form is too large.")
    return dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))


def parse_age(text: str) -> float:
    """`90s`, `30m`, `12h`, `1d`, `2w` as seconds (at most `MAX_AGE`); ValueError otherwise."""
    text = text.strip().lower()
    number, unit = text[:-1], text[-1:]
    try:
        value = float(number) * _AGE_UNITS[unit]
    except (ValueError, KeyError):
        value = -1.0
    if not (math.isfinite(value) and 0 <= value <= MAX_AGE):
        raise ValueError(
            f"{text[:40]!r} is not an age: give a number and a unit, like 30m or 1d "
            "(at most 100 years)"
        )
    return value


def parse_cutoff(text: str, now: float | None = None) -> float:
    """A purge's confirmed cutoff (epoch seconds, finite, not after `now`); ValueError."""
    try:
        before = float(text)
    except ValueError:
        before = math.nan
    if not (math.isfinite(before) and before <= (time.time() if now is None else now)):
        raise ValueError(
            "purge needs the cutoff `before` of a preview (epoch seconds, not in the future)"
        )
    return before


__all__ = ["MAX_AGE", "MAX_FORM", "parse_age", "parse_cutoff", "read_form"]
