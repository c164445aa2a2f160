"""The PostgreSQL store's URL: the options it reads itself, the ones libpq takes, its secrets.

A `postgresql://` (or `postgres://`) URL is a libpq connection URI whose query may
also carry the store's own options (`STORE_OPTIONS`: `schema`, `listen_url`, ...).
`parse_store_url` splits the two and refuses, at construction, any option that is
neither ours nor one of libpq's: libpq would only refuse it at connect time
("invalid URI query parameter"), and a server that starts degraded would retry that
forever. libpq's options are asked of the installed libpq (`PQconndefaults`, through
`psycopg.pq.Conninfo.get_defaults()`), plus `ssl`, the one URI-only alias libpq
accepts (`ssl=true` means `sslmode=require`). `redact` shows a URL in messages
(`stores.urls.masked`, without the query); `secrets` lists what messages must never
carry, for scrubbing the server's own error texts.
"""

from __future__ import annotations

import functools
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from psycopg import pq

from fastmcp_tasks.errors import ConfigurationError
from fastmcp_tasks.stores.urls import SECRET_OPTION, masked, refuse_unknown

#: URL query options the store reads itself (the rest go to libpq).
STORE_OPTIONS = ("schema", "listen_url", "pool_min", "pool_max", "timeout", "prepare")
#: libpq's URI-only alias for `sslmode=require` (not a conninfo keyword of its own).
URI_ALIASES = ("ssl",)


@functools.cache
def libpq_options() -> frozenset[str]:
    """The connection keywords the installed libpq takes (and `URI_ALIASES`)."""
    keywords = {option.keyword.decode() for option in pq.Conninfo.get_defaults()}
    return frozenset(keywords | set(URI_ALIASES))


def parse_store_url(url: str) -> tuple[str, dict[str, str]]:
    """`(the libpq URL, the store's own query options)` of a `postgresql://` URL.

    Raises:
        ConfigurationError: another scheme, or a query option neither the store nor
            libpq takes (named, with every option that is taken).
    """
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise ConfigurationError(
            f"PostgreSQL task store URL must start with postgresql:// or postgres://, got "
            f"{redact(url)!r}"
        )
    query = parse_qsl(parts.query, keep_blank_values=True)
    refuse_unknown(url, [key for key, _ in query], STORE_OPTIONS, libpq_options(), "libpq")
    own = {key: value for key, value in query if key in STORE_OPTIONS}
    rest = [(key, value) for key, value in query if key not in STORE_OPTIONS]
    return urlunsplit(parts._replace(query=urlencode(rest))), own


def redact(url: str) -> str:
    """The URL as messages show it: masked (`stores.urls`), without its query."""
    return masked(url, query=False)


def secrets(url: str) -> list[str]:
    """The password and secret option values in `url`, to scrub from error texts."""
    try:
        parts = urlsplit(url)
        found = [parts.password or ""]
    except ValueError:
        return []
    found += [v for k, v in parse_qsl(parts.query) if SECRET_OPTION.search(k)]
    return [secret for secret in found if secret]


__all__ = ["STORE_OPTIONS", "libpq_options", "parse_store_url", "redact", "secrets"]
