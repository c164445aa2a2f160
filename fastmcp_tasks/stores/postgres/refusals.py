"""A PostgreSQL server that answers but refuses the store: a misconfiguration, not an outage.

At `open`, a server that says the database or the role does not exist, that the
password is wrong, or that the role lacks a privilege the store needs (SQLSTATE
3D000, 28000, 28P01, 42501) will say the same on every retry: `check` turns that
failure into a `ConfigurationError` naming the server's answer and what to fix, so
startup stops as it does for a malformed URL, whatever `startup=` says. Anything
else (refused, reset, timed out, "the database system is starting up", too many
clients) stays a `StoreError`: an outage, retried.

psycopg has no SQLSTATE for a failed connection (libpq keeps only the message of
the server's startup error), so those are read from the message the server sent,
which is English unless the server's `lc_messages` says otherwise; errors of
statements (creating the schema) carry their SQLSTATE. Only `open` consults this: a
privilege revoked while the store runs fails those calls as `StoreError`s.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import psycopg

from fastmcp_tasks.errors import ConfigurationError, StoreError

#: What to do about each misconfiguration, by SQLSTATE.
FIXES = {
    "3D000": "create the database, or name an existing one in the URL",
    "28000": "check the user in the URL, and that the server's pg_hba.conf lets it connect",
    "28P01": "check the password (in the URL, PGPASSWORD or the passfile)",
    "42501": "grant the role what the store needs (CONNECT on the database; CREATE on it "
    "to make the schema, or USAGE and CREATE on an existing schema), or use a role that "
    "has it",
}
#: The server's messages for refused connections (which carry no SQLSTATE), and theirs.
CONNECTION_REFUSALS = (
    (re.compile(r'database ".*" does not exist|no such database'), "3D000"),  # (PgBouncer's)
    (re.compile(r'role ".*" (does not exist|is not permitted to log in)'), "28000"),
    (re.compile(r"no pg_hba\.conf entry"), "28000"),
    (re.compile(r"password authentication failed"), "28P01"),
    (re.compile(r"permission denied for database"), "42501"),
)
_FATAL = re.compile(r"FATAL:\s+(.+)")


def misconfiguration(error: BaseException) -> tuple[str, str] | None:
    """`(SQLSTATE, the server's message)` when `error` says the store is misconfigured."""
    if not isinstance(error, psycopg.Error):
        return None
    text = str(error)
    fatal = _FATAL.search(text)
    shown = (fatal[1] if fatal else error.diag.message_primary or text).strip()
    if error.sqlstate is not None:
        return (error.sqlstate, shown) if error.sqlstate in FIXES else None
    if fatal is None:
        return None
    code = next((code for pattern, code in CONNECTION_REFUSALS if pattern.search(shown)), None)
    return None if code is None else (code, shown)


def check(failure: StoreError, where: str, scrub: Callable[[str], str]) -> None:
    """Raise a `ConfigurationError` when the `failure` of `open` is a misconfiguration (its
    cause, the psycopg error, says so); return when it is an outage."""
    found = misconfiguration(failure.__cause__) if failure.__cause__ is not None else None
    if found is None:
        return
    code, shown = found
    raise ConfigurationError(
        f"PostgreSQL task store {where} is misconfigured: {scrub(shown)} (SQLSTATE {code}); "
        f"the server answered, so retrying cannot help: {FIXES[code]}"
    ) from failure.__cause__


__all__ = ["CONNECTION_REFUSALS", "FIXES", "check", "misconfiguration"]
