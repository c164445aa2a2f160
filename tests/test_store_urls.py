"""Store URLs as people see them: never a password, one description per store.

`stores.urls.masked` is the one function that makes a store URL fit to show; every
place that shows one (the worker's startup line, `ls`/`show`/`ui`, the health log,
spans, exceptions) goes through it or through a store's `describe()`, which every
built-in store has in the same form: the masked URL and, for a shared server, the
prefix or schema that sets this store apart.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest
from fastmcp import FastMCP

from fastmcp_tasks import TasksExtension, _compat
from fastmcp_tasks.errors import ConfigurationError, StoreError
from fastmcp_tasks.stores import MemoryTaskStore, SQLiteTaskStore, store_from_url
from fastmcp_tasks.stores.urls import describe, masked
from tests.test_store_contract import REDIS_URL

pytestmark = pytest.mark.anyio

SECRET = "s3cretpw"


def test_masked_hides_the_password_and_keeps_the_rest() -> None:
    assert masked(f"postgresql://postgres:{SECRET}@db:5432/test?schema=x") == (
        "postgresql://postgres:***@db:5432/test?schema=x"
    )
    assert masked(f"redis://:{SECRET}@127.0.0.1:6379/0") == "redis://:***@127.0.0.1:6379/0"
    assert masked(f"redis://h:6379/0?password={SECRET}&prefix=p") == (
        "redis://h:6379/0?password=***&prefix=p"
    )
    nested = (
        f"postgresql://u@h/db?listen_url=postgresql%3A%2F%2Fu%3A{SECRET}%40h2%3A5432%2Fdb"
        f"&sslpassword={SECRET}"
    )
    shown = masked(nested)
    assert SECRET not in shown
    assert shown == (
        "postgresql://u@h/db?listen_url=postgresql%3A%2F%2Fu%3A***%40h2%3A5432%2Fdb&sslpassword=***"
    )
    assert masked(f"postgresql://postgres:{SECRET}@db/test?schema=x", query=False) == (
        "postgresql://postgres:***@db/test"
    )
    for plain in ("memory://", "sqlite:///tasks.db", "redis://127.0.0.1:6379/0?prefix=p"):
        assert masked(plain) == plain
    assert masked(None) == ""
    assert SECRET not in masked(f"postgresql://u:{SECRET}@[::1")  # unparsable: still masked


def test_every_store_describes_itself_the_same_way(tmp_path: Path) -> None:
    memory = MemoryTaskStore()
    assert describe(memory) == "memory://"
    assert repr(memory) == "MemoryTaskStore(memory://)"
    sqlite = SQLiteTaskStore(tmp_path / "tasks.db")
    assert describe(sqlite) == f"sqlite:///{tmp_path}/tasks.db"
    assert repr(sqlite) == f"SQLiteTaskStore(sqlite:///{tmp_path}/tasks.db)"
    redis = store_from_url(f"redis://:{SECRET}@127.0.0.1:6379/0?prefix=p")
    assert describe(redis) == "redis://:***@127.0.0.1:6379/0 (prefix 'p')"
    assert repr(redis) == "RedisTaskStore(redis://:***@127.0.0.1:6379/0 (prefix 'p'))"
    postgres = store_from_url(f"postgresql://postgres:{SECRET}@127.0.0.1:5432/test?schema=s")
    assert describe(postgres) == "postgresql://postgres:***@127.0.0.1:5432/test (schema s)"
    assert repr(postgres) == (
        "PostgresTaskStore(postgresql://postgres:***@127.0.0.1:5432/test (schema s))"
    )

    class ThirdPartyStore:
        scheme = "dynamo"

    assert describe(ThirdPartyStore()) == "ThirdPartyStore (dynamo://)"
    assert describe(object()) == "object (custom://)"


def test_the_health_log_names_the_store_by_its_description(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    extension = TasksExtension(url=f"sqlite:///{tmp_path}/tasks.db")
    assert extension.health_monitor.label == f"task store sqlite:///{tmp_path}/tasks.db"
    caplog.set_level(logging.WARNING, logger="fastmcp_tasks.health")
    extension.health_monitor.store_failed("get", StoreError("locked"))
    assert [r.getMessage() for r in caplog.records] == [
        f"task store sqlite:///{tmp_path}/tasks.db unavailable (get failed: locked); task "
        "calls answer 'Task store unavailable' and the engine retries with backoff until "
        "it answers"
    ]


async def test_an_unreachable_store_is_logged_and_reported_without_its_password(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="fastmcp_tasks")
    url = f"postgresql://postgres:{SECRET}@127.0.0.1:1/test?connect_timeout=1"
    mcp = FastMCP("masked")
    extension = TasksExtension(url=url, startup="degraded")
    mcp.add_extension(extension)
    async with _compat.server_lifespan(mcp):
        health = extension.health()
    assert health.status == "degraded"
    assert health.last_error is not None and SECRET not in health.last_error
    assert caplog.records
    for record in caplog.records:
        assert SECRET not in record.getMessage()
    warnings = [r.getMessage() for r in caplog.records if r.name == "fastmcp_tasks.health"]
    assert warnings[0].startswith(
        "task store postgresql://postgres:***@127.0.0.1:1/test (schema fastmcp_tasks) "
        "unavailable (open failed: "
    )


def test_configuration_errors_never_quote_a_password() -> None:
    for url, message in (
        (
            f"mysql://root:{SECRET}@db/tasks",
            "Unsupported task store URL 'mysql://root:***@db/tasks': supported schemes are "
            "memory://, postgres://, postgresql://, redis://, rediss://, sqlite://",
        ),
        (
            f"redis://:{SECRET}@127.0.0.1:notaport/0",
            "Redis task store URL 'redis://:***@127.0.0.1:notaport/0': Port could not be cast "
            "to integer value as 'notaport'",
        ),
        (
            f"memory://root:{SECRET}@host",
            "memory:// takes no host or path, got 'memory://root:***@host'",
        ),
        (
            f"postgresql://postgres:{SECRET}@db/test?pool_max=lots",
            "PostgreSQL task store URL 'postgresql://postgres:***@db/test': invalid literal for "
            "int() with base 10: 'lots'",
        ),
    ):
        with pytest.raises(ConfigurationError) as info:
            store_from_url(url)
        assert str(info.value) == message
    with pytest.raises(ConfigurationError) as info:
        TasksExtension(url=f"redis://:{SECRET}@127.0.0.1:6379/x")
    assert str(info.value) == (
        "Redis task store URL 'redis://:***@127.0.0.1:6379/x': the path must be a database number"
    )


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "fastmcp_tasks", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def test_ls_and_show_never_print_a_password() -> None:
    with_password = REDIS_URL.replace("redis://", f"redis://:{SECRET}@")
    done = _cli("ls", "--url", f"{with_password}?prefix=p&db=x")
    assert done.returncode == 2
    shown = with_password.replace(SECRET, "***")
    assert done.stderr == (
        f"fastmcp-tasks: Redis task store URL '{shown}?prefix=p&db=x': Invalid value for 'db' "
        "in connection URL.\n"
    )
    user = REDIS_URL.replace("redis://", f"redis://nobody:{SECRET}@")  # refused (or down)
    done = _cli("show", "some-task", "--url", f"{user}?prefix=p")
    assert done.returncode == 1
    assert done.stderr.startswith(
        f"fastmcp-tasks: Redis task store {user.replace(SECRET, '***')} (prefix 'p') is "
    ), done.stderr
    assert SECRET not in done.stderr


# --- unknown URL options ------------------------------------------------------------------


def _refusal(url: str) -> str:
    with pytest.raises(ConfigurationError) as info:
        store_from_url(url)
    with pytest.raises(ConfigurationError) as again:
        TasksExtension(url=url)  # the same answer at construction of the extension
    assert str(again.value) == str(info.value)
    return str(info.value)


def test_an_unknown_redis_option_is_named_with_every_option_redis_takes() -> None:
    from fastmcp_tasks.stores.redis.keys import url_options

    taken = url_options("redis")
    assert {"db", "socket_timeout", "client_name", "username", "max_connections"} <= taken
    assert not {"retry", "parser_class", "host", "port", "connection_class"} & taken
    assert {"ssl_ca_certs", "ssl_certfile"} <= url_options("rediss") - taken
    assert _refusal(f"redis://:{SECRET}@127.0.0.1:6379/0?prefx=x") == (
        "Task store URL 'redis://:***@127.0.0.1:6379/0?prefx=x': unknown option 'prefx' "
        "(did you mean 'prefix'?); redis:// URLs take prefix (fastmcp-tasks) and "
        f"redis-py's {', '.join(sorted(taken))}"
    )
    assert _refusal("rediss://127.0.0.1:6379/0?ssl_ca_cert=/ca.pem&colour=blue") == (
        "Task store URL 'rediss://127.0.0.1:6379/0?ssl_ca_cert=/ca.pem&colour=blue': unknown "
        "options 'ssl_ca_cert', 'colour' (did you mean 'ssl_ca_certs'?); rediss:// URLs take "
        f"prefix (fastmcp-tasks) and redis-py's {', '.join(sorted(url_options('rediss')))}"
    )
    store_from_url("redis://127.0.0.1:6379/0?prefix=p&socket_timeout=2&client_name=me")


def test_an_unknown_postgres_option_is_named_with_ours_and_libpqs() -> None:
    from psycopg import pq

    libpq = {option.keyword.decode() for option in pq.Conninfo.get_defaults()} | {"ssl"}
    assert {"sslmode", "application_name", "connect_timeout", "options"} <= libpq
    assert _refusal("postgresql://postgres@127.0.0.1:5432/test?shema=x") == (
        "Task store URL 'postgresql://postgres@127.0.0.1:5432/test?shema=x': unknown option "
        "'shema' (did you mean 'schema'?); postgresql:// URLs take listen_url, pool_max, "
        "pool_min, prepare, schema, timeout (fastmcp-tasks) and libpq's "
        f"{', '.join(sorted(libpq))}"
    )
    nested = "postgres://h/db?listen_url=postgresql%3A%2F%2Fh%2Fdb%3Fsslmod%3Ddisable"
    assert "unknown option 'sslmod' (did you mean 'sslmode'?)" in _refusal(nested)
    store_from_url(
        "postgresql://h/db?schema=s&sslmode=disable&ssl=true&application_name=a&pool_max=2"
    )


def test_sqlite_and_memory_urls_take_no_options(tmp_path: Path) -> None:
    assert _refusal(f"sqlite:///{tmp_path}/x.db?foo=1") == (
        f"Task store URL 'sqlite:///{tmp_path}/x.db?foo=1': unknown option 'foo'; sqlite:// "
        "URLs take no options"
    )
    assert _refusal("memory://?max_tasks=5") == (
        "Task store URL 'memory://?max_tasks=5': unknown option 'max_tasks'; memory:// URLs "
        "take no options"
    )
