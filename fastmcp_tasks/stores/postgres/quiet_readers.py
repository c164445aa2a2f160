"""Who wants quiet notifications: the `quiet_readers` table of the PostgreSQL store.

A change of a kind no task engine waits for (a status or message change, a finish:
`feed_parts.WAKING_KINDS` are the others) is wanted only by a process with a
subscriber of such kinds: a `subscriptions/listen` stream, a `tasks/result` waiter, a
dashboard. PostgreSQL signals every listening backend of the database for every
`NOTIFY`, and each listening process then wakes, so a statement notifies such a
"quiet" change only while some reader wants it: the statements' notify CTE
(`sql.Statements.note`) checks that `quiet_readers` has a row whose `until` (server
epoch seconds) has not passed. A worker's reader never wants them, so in a fleet
whose clients poll, a finish or a progress message costs no process a wake-up. A
reader that is told of no such rows still reads past them now and then (`postgres.feed`:
at least every quarter of the change retention), so it never finds its next rows behind
the retention trim of the `changes` table, a gap it would have to prove.

A reader registers (`QuietRegistration`) through the store's pool before a subscriber
that wants quiet kinds gets its start (so what is changed after it subscribed is
notified) whenever it had no such subscriber (nobody was renewing its row) or its row
is due for renewal, and its reader loop renews the row every half `QUIET_TTL` on its
own connection for as long as it has such subscribers, reading the feed at the same
time: a statement that began before the registration committed may have skipped its
notification, and that read delivers its rows within half `QUIET_TTL` at the latest.
A registration (not a renewal) notifies the channel with a payload that is no seq,
which every reader ignores except to wait again with the renewal due in mind. A reader
that stops wanting them lets its row lapse; one that closes deletes it; a process that
died leaves it to lapse (`until` passed), and later registrations delete lapsed rows.

Upgrading. Readers of versions before this table wanted every notification and do not
register; `UPGRADE_GRACE` keeps quiet notifications on for an hour after the schema
is migrated, so a rolling upgrade's older front ends keep hearing them meanwhile.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

#: Seconds a registration lasts; the reader renews it every half of this.
QUIET_TTL = 20.0
#: Seconds after a schema migration during which every change notifies (module doc).
UPGRADE_GRACE = 3600.0
#: The payload of a registration's notification (no seq: readers read nothing for it).
REGISTERED = "quiet-readers"

#: What the table is (created by schema version 5, `postgres.schema`).
TABLE = "CREATE TABLE {s}.quiet_readers (reader text PRIMARY KEY, until float8 NOT NULL)"
#: What a migration from an older version adds: the grace row (module doc).
GRACE = (
    "INSERT INTO {s}.quiet_readers (reader, until) VALUES "
    f"('upgrade', extract(epoch FROM clock_timestamp()) + {UPGRADE_GRACE:g})"
)

_NOW = "extract(epoch FROM clock_timestamp())"


def wanted(schema: str) -> str:
    """The condition under which a statement notifies a quiet change (in its note CTE)."""
    return (
        f"EXISTS (SELECT 1 FROM {schema}.quiet_readers "
        "WHERE until > extract(epoch FROM statement_timestamp()))"
    )


class QuietRegistration:
    """One reader's row in `quiet_readers` (module doc)."""

    def __init__(self, schema: str, channel: str, ttl: float = QUIET_TTL) -> None:
        self.reader = uuid.uuid4().hex[:16]
        self.ttl = ttl
        self.lapses = 0.0  # `time.monotonic()` by which the row lapses, as far as known
        gone = f"gone AS (DELETE FROM {schema}.quiet_readers WHERE until < {_NOW} - 60)"
        upsert = (
            f"INSERT INTO {schema}.quiet_readers (reader, until) VALUES (%s, {_NOW} + %s) "
            "ON CONFLICT (reader) DO UPDATE SET until = excluded.until"
        )
        self.renew_sql = f"WITH {gone} {upsert}"
        self.register_sql = (  # the same, and a reader waiting with no renewal due wakes
            f"WITH {gone}, up AS ({upsert} RETURNING 1) "
            f"SELECT pg_notify('{channel}', '{REGISTERED}') FROM up"
        )
        self.unregister_sql = f"DELETE FROM {schema}.quiet_readers WHERE reader = %s"

    def renew_at(self) -> float:
        """`time.monotonic()` at which the row should be renewed."""
        return self.lapses - self.ttl / 2

    def due(self) -> bool:
        return time.monotonic() >= self.renew_at()

    async def register(
        self, execute: Callable[[str, tuple[Any, ...]], Awaitable[Any]], *, renew: bool = False
    ) -> None:
        """Write the row through `execute` (one statement); `renew`: the reader loop's
        renewal, which notifies nobody."""
        started = time.monotonic()
        await execute(self.renew_sql if renew else self.register_sql, (self.reader, self.ttl))
        self.lapses = started + self.ttl

    async def unregister(self, execute: Callable[[str, tuple[Any, ...]], Awaitable[Any]]) -> None:
        if self.lapses > time.monotonic():
            self.lapses = 0.0
            await execute(self.unregister_sql, (self.reader,))


__all__ = [
    "GRACE",
    "QUIET_TTL",
    "REGISTERED",
    "TABLE",
    "UPGRADE_GRACE",
    "QuietRegistration",
    "wanted",
]
