"""One notification for the creations of a batch of statements (`postgres.batching`).

A creation notifies the store's channel with the seq of its `queued` row and the creation
marker (`created`; `feed_parts.QUEUED_ONLY`). PostgreSQL signals every listening backend
of the database for each notification, and each listening process receives it: every
worker's change feed reader, so each creation cost every worker and its backend a
notification. A batch's statements run in one transaction, so its creations can share
one: in a batch with more than one creation, each creation's statement appends its seq to
a transaction-local setting (`SETTING`, `deferred`) instead of notifying, and one more
statement at the end of the batch (`flush`) notifies them together: their seqs,
comma-separated, then the creation marker (`feed_parts.Heard` reads both forms). It is
delivered at commit, as each of theirs was; a refused batch commits nothing, and its
creations are made again alone, each notifying for itself. A batch holds at most
`call_batching.LARGEST_BATCH` calls, so the payload stays below PostgreSQL's 8,000 bytes.

A reader of a version from before this reads no seq in such a payload and ignores it (as
it does the open-time probe's): its runners find those tasks by the next notification
they read or their safety poll (`queue_poll`).
"""

from __future__ import annotations

import functools

from fastmcp_tasks.stores.call_batching import LARGEST_BATCH
from fastmcp_tasks.stores.postgres.feed_parts import QUEUED_ONLY

#: The transaction-local setting a batch's creations append their seqs to.
SETTING = "fastmcp_tasks.created"
#: A bigint seq has at most 19 digits; with its comma, a batch's list fits a payload.
assert LARGEST_BATCH * 20 + len(QUEUED_ONLY) < 8000


def created(channel: str) -> str:
    """The notify of one creation statement (in its `note` CTE, over its change rows)."""
    return f"pg_notify('{channel}', max(seq)::text || '{QUEUED_ONLY}')"


def _appended() -> str:
    """What a deferred creation runs instead of `created`: its seq appended to `SETTING`."""
    return (
        f"set_config('{SETTING}', COALESCE(current_setting('{SETTING}', true), '') "
        "|| max(seq)::text || ',', true)"
    )


@functools.lru_cache(maxsize=32)
def deferred(query: str, channel: str) -> str | None:
    """`query` appending its creation's seq to `SETTING` instead of notifying, or `None`
    when `query` is no creation statement."""
    alone = created(channel)
    if alone not in query:
        return None
    if query.count(alone) != 1:
        raise AssertionError("a creation statement notifies exactly once")
    return query.replace(alone, _appended())


def flush(channel: str) -> str:
    """The statement that ends a batch with deferred creations: one notification of
    their seqs (none when none of them inserted a task)."""
    return (
        f"SELECT pg_notify('{channel}', rtrim(made, ',') || '{QUEUED_ONLY}') "
        f"FROM (SELECT current_setting('{SETTING}', true) AS made) AS batch "
        "WHERE made <> ''"
    )


__all__ = ["SETTING", "created", "deferred", "flush"]
