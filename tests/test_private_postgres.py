"""The private PostgreSQL of the fault tests does what it says, without any task store:
it starts and answers psycopg, an immediate stop breaks every connection and leaves no
process behind, and a restart on the same port and data directory keeps what was
committed (and only that)."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import psycopg
import pytest

from tests.private_postgres import PrivatePostgres

pytestmark = pytest.mark.anyio


async def test_a_private_postgres_stops_at_once_and_restarts_with_its_data(
    tmp_path: Path,
) -> None:
    server = PrivatePostgres(tmp_path / "pg")
    try:
        server.start()
        await server.ready()
        assert server.port != 5432 and f":{server.port}/" in server.url()
        async with await psycopg.AsyncConnection.connect(server.url(), autocommit=True) as conn:
            await conn.execute("CREATE TABLE kept (v text)")
            await conn.execute("INSERT INTO kept VALUES ('committed')")
        held = await psycopg.AsyncConnection.connect(server.url())
        await held.execute("INSERT INTO kept VALUES ('uncommitted')")  # an open transaction
        pid = server.pid

        server.stop_immediate()
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
        assert not server.running and not await server.answers()
        with pytest.raises(psycopg.OperationalError):  # the open connection is dead
            await held.execute("SELECT 1")
        await held.close()
        with pytest.raises(psycopg.OperationalError):  # and nothing listens on the port
            await psycopg.AsyncConnection.connect(server.url(), connect_timeout=2)

        server.start()  # same port, same data directory: crash recovery
        await server.ready()
        assert server.pid != pid
        async with await psycopg.AsyncConnection.connect(server.url()) as conn:
            rows = await (await conn.execute("SELECT v FROM kept")).fetchall()
        assert rows == [("committed",)]
        log = server.log()
        assert "immediate shutdown" in log and "not properly shut down" in log, log
    finally:
        server.stop()
    assert not server.base.exists()  # the data directory is removed


async def test_a_schema_url_names_the_private_database(tmp_path: Path) -> None:
    server = PrivatePostgres(tmp_path / "pg")
    try:
        assert server.url("s1").endswith(f"127.0.0.1:{server.port}/postgres?schema=s1")
        assert not await server.answers()  # initdb'd, not started: the port is closed
        server.start()
        with anyio.fail_after(20):
            await server.ready()
    finally:
        server.stop()
    assert not server.running
