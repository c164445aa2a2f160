"""Task stores, and choosing one from a URL.

`store_from_url("memory://")` is the in-memory store, `store_from_url("sqlite:///tasks.db")`
the SQLite store (durable, shared by the processes of one host); `redis://` and
`postgresql://` (or `postgres://`) the stores shared across hosts, imported only when
named (their drivers are optional extras). Each backend registers its
URL scheme in `SCHEMES`; an unknown scheme is a `ConfigurationError` (a
`ValueError`) naming the schemes this installation supports, and so is a query option
the scheme does not take (`stores.urls.refuse_unknown`: `memory://` and `sqlite://`
take none; Redis and PostgreSQL take their own and their driver's).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from fastmcp_tasks.errors import ConfigurationError
from fastmcp_tasks.stores.base import TaskChange, TaskRecord, TaskStore
from fastmcp_tasks.stores.memory import MemoryTaskStore
from fastmcp_tasks.stores.sqlite.store import SQLiteTaskStore, path_from_url
from fastmcp_tasks.stores.urls import masked, refuse_unknown


def _memory(url: str, options: dict[str, Any]) -> TaskStore:
    parts = urlsplit(url)
    refuse_unknown(url, [k for k, _ in parse_qsl(parts.query, keep_blank_values=True)])
    if parts.netloc or parts.path not in ("", "/"):
        raise ConfigurationError(f"memory:// takes no host or path, got {masked(url)!r}")
    kept = {k: options[k] for k in ("tombstone_retention",) if k in options}
    return MemoryTaskStore(max_tasks=options.get("max_tasks", 100_000), **kept)


def _sqlite(url: str, options: dict[str, Any]) -> TaskStore:
    known = (
        "max_tasks",
        "poll_interval",
        "idle_poll_interval",
        "busy_timeout",
        "busy_retries",
        "tombstone_retention",
    )
    return SQLiteTaskStore(path_from_url(url), **{k: options[k] for k in known if k in options})


def _redis(url: str, options: dict[str, Any]) -> TaskStore:
    try:  # imported here: `redis` is an optional dependency (the `redis` extra)
        from fastmcp_tasks.stores.redis.store import RedisTaskStore
    except ImportError as exc:
        if (exc.name or "").partition(".")[0] != "redis":
            raise
        raise ConfigurationError(
            f"Task store URL {masked(url)!r} needs the redis package: "
            "pip install 'fastmcp-tasks[redis]'"
        ) from exc
    known = (
        "prefix",
        "max_tasks",
        "timeout",
        "max_connections",
        "max_changes",
        "block_ms",
        "tombstone_retention",
    )
    return RedisTaskStore(url, **{k: options[k] for k in known if k in options})


def _postgres(url: str, options: dict[str, Any]) -> TaskStore:
    try:  # imported here: psycopg is an optional dependency (the `postgres` extra)
        from fastmcp_tasks.stores.postgres.store import PostgresTaskStore
    except ImportError as exc:
        if (exc.name or "").partition(".")[0] not in ("psycopg", "psycopg_pool"):
            raise
        raise ConfigurationError(
            f"Task store URL {url.partition('://')[0]}://... needs the psycopg package: "
            "pip install 'fastmcp-tasks[postgres]'"
        ) from exc
    known = (
        "schema",
        "listen_url",
        "max_tasks",
        "timeout",
        "pool_min",
        "pool_max",
        "prepare",
        "change_retention",
        "max_changes",
        "gap_timeout",
        "tombstone_retention",
    )
    return PostgresTaskStore(url, **{k: options[k] for k in known if k in options})


#: URL scheme -> factory(url, options).
SCHEMES: dict[str, Callable[[str, dict[str, Any]], TaskStore]] = {
    "memory": _memory,
    "sqlite": _sqlite,
    "redis": _redis,
    "rediss": _redis,
    "postgresql": _postgres,
    "postgres": _postgres,
}


def store_from_url(url: str, **options: Any) -> TaskStore:
    """Build the store a URL names (`memory://`, `sqlite:///path/to/tasks.db`)."""
    scheme = urlsplit(url).scheme if "://" in url else ""
    factory = SCHEMES.get(scheme)
    if factory is None:
        supported = ", ".join(f"{name}://" for name in sorted(SCHEMES))
        raise ConfigurationError(
            f"Unsupported task store URL {masked(url)!r}: supported schemes are {supported}"
        )
    return factory(url, options)


__all__ = [
    "SCHEMES",
    "MemoryTaskStore",
    "SQLiteTaskStore",
    "TaskChange",
    "TaskRecord",
    "TaskStore",
    "store_from_url",
]
