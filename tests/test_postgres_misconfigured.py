"""A PostgreSQL server that answers "no" is misconfigured, not down: startup fails, clearly.

A database or role that does not exist, or a role without the privileges the store
needs (SQLSTATE 3D000, 28000, 28P01, 42501), is refused at `open` with a
`ConfigurationError` naming the server's answer and what to fix, as a malformed URL is:
under `startup="degraded"` the server would otherwise start and retry forever. A server
that does not answer still is an outage (`StoreError`, retried). On the real shared
server; each test uses fresh names and removes what it made.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator

import psycopg
import pytest
from fastmcp import FastMCP

from fastmcp_tasks import TasksExtension, _compat
from fastmcp_tasks.errors import ConfigurationError, StoreError
from fastmcp_tasks.server.health import HealthMonitor
from fastmcp_tasks.stores.postgres import PostgresTaskStore
from tests.test_store_contract import POSTGRES_URL, postgres_available

pytestmark = pytest.mark.anyio

BASE = POSTGRES_URL.rpartition("/")[0]  # postgresql://postgres@127.0.0.1:5432
HOST = BASE.partition("@")[2]


def fresh(kind: str) -> str:
    return f"fmt_{kind}_{uuid.uuid4().hex[:10]}"


async def refusal(url: str) -> tuple[str, str]:
    """What `open` of a store at `url` refuses with, and how the store names itself."""
    postgres_available()
    store = PostgresTaskStore(url, schema=fresh("schema"), timeout=5)
    with pytest.raises(ConfigurationError) as info:
        await store.open()
    await store.close()
    return str(info.value), store.describe()


@pytest.fixture
async def unprivileged_role() -> AsyncIterator[str]:
    """A role that may log in to the test database but create nothing in it."""
    postgres_available()
    role = fresh("role")
    async with await psycopg.AsyncConnection.connect(POSTGRES_URL, autocommit=True) as conn:
        await conn.execute(f"CREATE ROLE {role} LOGIN")
        try:
            yield role
        finally:
            await conn.execute(f"DROP ROLE {role}")


async def test_a_database_that_does_not_exist_is_a_configuration_error() -> None:
    database = fresh("db")
    message, where = await refusal(f"{BASE}/{database}")
    assert where.startswith(f"postgresql://postgres@{HOST}/{database} (schema fmt_schema_")
    assert message == (
        f'PostgreSQL task store {where} is misconfigured: database "{database}" does not '
        "exist (SQLSTATE 3D000); the server answered, so retrying cannot help: create the "
        "database, or name an existing one in the URL"
    )


async def test_a_role_that_does_not_exist_is_a_configuration_error() -> None:
    role = fresh("nobody")
    message, where = await refusal(f"postgresql://{role}:s3cretpw@{HOST}/test")
    assert where.startswith(f"postgresql://{role}:***@{HOST}/test (schema fmt_schema_")
    assert message == (
        f'PostgreSQL task store {where} is misconfigured: role "{role}" does not exist '
        "(SQLSTATE 28000); the server answered, so retrying cannot help: check the user in "
        "the URL, and that the server's pg_hba.conf lets it connect"
    )


async def test_a_role_without_privileges_is_a_configuration_error(unprivileged_role: str) -> None:
    message, where = await refusal(f"postgresql://{unprivileged_role}@{HOST}/test")
    assert message == (
        f"PostgreSQL task store {where} is misconfigured: permission denied for database "
        "test (SQLSTATE 42501); the server "
        "answered, so retrying cannot help: grant the role what the store needs (CONNECT on "
        "the database; CREATE on it to make the schema, or USAGE and CREATE on an existing "
        "schema), or use a role that has it"
    )


async def test_a_misconfigured_store_stops_startup_even_when_degraded_is_allowed() -> None:
    postgres_available()
    mcp = FastMCP("misconfigured")
    mcp.add_extension(TasksExtension(url=f"{BASE}/{fresh('db')}", startup="degraded"))
    with pytest.raises(ConfigurationError, match="does not exist"):
        async with _compat.server_lifespan(mcp):
            pass


async def test_a_server_that_does_not_answer_is_still_an_outage() -> None:
    store = PostgresTaskStore("postgresql://postgres@127.0.0.1:1/test", timeout=2)
    with pytest.raises(StoreError) as info:
        await store.open()
    assert not isinstance(info.value, ConfigurationError)
    await store.close()


def test_a_misconfiguration_found_after_startup_is_logged_as_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Degraded start: the server was down, then answers "no such database"."""
    monitor = HealthMonitor("postgresql://postgres@db/x (schema s)")
    caplog.set_level(logging.ERROR, logger="fastmcp_tasks.health")
    error = ConfigurationError("PostgreSQL task store ... is misconfigured: database ...")
    monitor.loop_failed("open", error)
    monitor.loop_failed("open", error)  # once per streak
    assert [(r.getMessage(), r.exc_info) for r in caplog.records] == [
        (
            "task store postgresql://postgres@db/x (schema s): PostgreSQL task store ... is "
            "misconfigured: database ...; the engine retries with backoff until it is fixed",
            None,
        )
    ]
    assert monitor.last_error == f"loop open: ConfigurationError: {error}"


def test_the_command_line_says_what_is_misconfigured() -> None:
    postgres_available()
    url = f"{BASE}/{fresh('db')}"
    for command in (["ls", "--url", url], ["show", "x", "--url", url]):
        done = subprocess.run(
            [sys.executable, "-m", "fastmcp_tasks", *command],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith("fastmcp-tasks: PostgreSQL task store postgresql://")
        assert "does not exist (SQLSTATE 3D000)" in done.stderr
        assert "Traceback" not in done.stderr
