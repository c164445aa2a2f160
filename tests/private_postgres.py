"""A PostgreSQL server of our own, for the real-fault tests: `PrivatePostgres(directory)`.

The shared PostgreSQL (127.0.0.1:5432) is never stopped or reconfigured; a test that
needs the database to go away runs one of these instead:

- `initdb` once, into a fresh directory `tempfile.mkdtemp()` makes under the system temp
  dir (`/tmp/fastmcp-tasks-pg-*`): short, so the Unix socket fits the 107-byte limit
  (pytest's own temp paths do not), and traversable by the server's OS user (pytest's
  are 0700, root's). Trust authentication, user `postgres`, `--locale=C`, UTF-8.
- `start()` runs the `postgres` binary itself (no `pg_ctl start`, so the process we
  start IS the postmaster, and its pid is ours to end) on a free 127.0.0.1 port with
  its socket in that directory and `fsync=off` (an immediate stop loses nothing the
  kernel holds; only an OS crash would). Its log goes to `directory/postgres.log`
  (opened by us, so the server needs no access to `directory`).
- PostgreSQL refuses to run as root: as root, `initdb`, the server and `pg_ctl` run as
  the `postgres` OS user (`subprocess.Popen(user=..., group=..., extra_groups=[])`:
  setuid in the child, no `su`/`runuser` process in between); otherwise as ourselves.
- `await ready()`: a psycopg connection answers `SELECT 1`.
- `stop_immediate()`: `pg_ctl stop -m immediate` (SIGQUIT to the postmaster: no
  checkpoint, every backend dropped at once, crash recovery at the next start), then
  the postmaster is reaped and its pid checked gone; `start()` again reuses the port
  and the data directory. `stop()`: a fast shutdown (SIGKILL by pid if it hangs),
  then the data directory is removed. Idempotent.

Skips loudly without the PostgreSQL binaries (or, as root, without a `postgres` OS user),
and fails instead when `CI=true`.

`shared_schema()` is the other half: a fresh schema on the SHARED server
(`$POSTGRES_URL`, default `postgresql://postgres@127.0.0.1:5432/test`) for tests whose
processes share one database; it yields the store URL (`...?schema=<name>`) and drops
the schema (CASCADE) afterwards. It skips loudly when that server does not answer, and
fails instead when `CI=true`.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import IO, Any

import anyio
import psycopg
import pytest

from tests.wire import free_port

LOOPBACK = "127.0.0.1"
SERVER_USER = "postgres"
SHARED_URL = os.environ.get("POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


def _missing(message: str, untested: str = "the real PostgreSQL fault tests") -> None:
    message = f"{message}: {untested} are untested"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def postgres_bin() -> Path:
    """The directory holding `initdb`, `pg_ctl` and `postgres` (PATH first, then Debian's
    `/usr/lib/postgresql/<version>/bin`, newest first); skips loudly without one."""
    found = shutil.which("initdb")
    candidates = [Path(os.path.realpath(found)).parent] if found else []
    debian = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: _version(p))
    candidates += [Path(p) for p in reversed(debian)]
    for candidate in candidates:
        if all((candidate / name).exists() for name in ("initdb", "pg_ctl", "postgres")):
            return candidate
    _missing("NO initdb/pg_ctl/postgres (PATH, /usr/lib/postgresql/*/bin)")
    raise AssertionError("unreachable")


def _version(path: str) -> tuple[int, ...]:
    name = Path(path).parent.name
    return tuple(int(p) for p in name.split(".") if p.isdigit())


def _run_as() -> dict[str, Any]:
    """`Popen` options that run a child as the server's OS user (as root), else nothing."""
    if os.geteuid() != 0:
        return {}
    try:
        entry = pwd.getpwnam(SERVER_USER)
    except KeyError:
        _missing(f"running as root and no {SERVER_USER!r} OS user to run PostgreSQL as")
        raise
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


class PrivatePostgres:
    """A `postgres` of our own (module doc); `url()` names its `postgres` database."""

    def __init__(self, directory: Path, port: int | None = None) -> None:
        self.bin = postgres_bin()
        self.as_user = _run_as()
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = port if port is not None else free_port()
        self.base = Path(tempfile.mkdtemp(prefix="fastmcp-tasks-pg-"))
        self.data = self.base / "data"
        self.log_path = self.directory / "postgres.log"
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        if self.as_user:
            os.chown(self.base, self.as_user["user"], self.as_user["group"])
        self._initdb()

    def url(self, schema: str | None = None, database: str = "postgres") -> str:
        base = f"postgresql://postgres@{LOOPBACK}:{self.port}/{database}"
        return f"{base}?schema={schema}" if schema else base

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def _tool(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.bin / args[0]), *args[1:]],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.base,
            stdin=subprocess.DEVNULL,
            **self.as_user,
        )

    def _initdb(self) -> None:
        done = self._tool(
            "initdb",
            *("-D", str(self.data), "-A", "trust", "-U", "postgres"),
            *("--no-sync", "--locale=C", "-E", "UTF8"),
        )
        if done.returncode != 0:
            self.remove()
            raise RuntimeError(f"initdb failed ({done.returncode}):\n{done.stdout}{done.stderr}")

    def start(self) -> None:
        """Start the postmaster on our port and data directory (again, after a stop)."""
        assert not self.running, "already running"
        if self._log is None:
            self._log = open(self.log_path, "ab")  # kept open for the server
        self.process = subprocess.Popen(
            [
                str(self.bin / "postgres"),
                *("-D", str(self.data), "-p", str(self.port), "-k", str(self.base)),
                *("-c", f"listen_addresses={LOOPBACK}", "-c", "fsync=off"),
                *("-c", "max_connections=200", "-c", "shared_buffers=32MB"),
            ],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=self.base,
            **self.as_user,
        )

    async def answers(self, within: float = 1.0) -> bool:
        """Whether a new connection runs `SELECT 1` now."""
        with anyio.move_on_after(within):
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self.url(), connect_timeout=max(1, round(within)), autocommit=True
                )
            except psycopg.OperationalError:
                return False
            async with conn:
                return (await (await conn.execute("SELECT 1")).fetchone()) == (1,)
        return False

    async def ready(self, within: float = 20) -> None:
        with anyio.fail_after(within):
            while not await self.answers():
                assert self.running, f"postgres exited:\n{self.log()}"
                await anyio.sleep(0.05)

    def stop_immediate(self) -> None:
        """`pg_ctl stop -m immediate`, the postmaster reaped and its pid gone."""
        assert self.process is not None and self.running, "not running"
        pid = self.process.pid
        done = self._tool("pg_ctl", "stop", "-D", str(self.data), "-m", "immediate", "-w")
        if done.returncode != 0:  # what pg_ctl sends, by our pid
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGQUIT)
        self.process.wait(timeout=20)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 0)
            raise AssertionError(f"postmaster {pid} still exists after an immediate stop")

    def stop(self) -> None:
        """A fast shutdown (SIGKILL by pid after 10 s), then the data directory removed."""
        try:
            if self.process is not None and self.running:
                self._tool("pg_ctl", "stop", "-D", str(self.data), "-m", "fast", "-w", "-t", "10")
                try:
                    self.process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    os.kill(self.process.pid, signal.SIGKILL)
                    self.process.wait(timeout=10)
        finally:
            if self._log is not None:
                self._log.close()
                self._log = None
            self.remove()

    def remove(self) -> None:
        shutil.rmtree(self.base, ignore_errors=True)

    def log(self) -> str:
        if self._log is not None:
            self._log.flush()
        path = self.log_path
        return path.read_text(errors="replace")[-3000:] if path.exists() else "(no log)"


# --- a fresh schema on the shared server ------------------------------------------------


async def _shared_problem() -> str | None:
    try:
        conn = await psycopg.AsyncConnection.connect(SHARED_URL, connect_timeout=2)
    except psycopg.Error as exc:
        return f"{type(exc).__name__}: {str(exc).strip()[:200]}"
    await conn.close()
    return None


async def drop_schema(url: str, schema: str) -> None:
    """`DROP SCHEMA IF EXISTS <schema> CASCADE` on the database of `url`."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute("SET lock_timeout = '20s'")
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@asynccontextmanager
async def shared_schema(prefix: str = "fastmcp_test") -> AsyncIterator[str]:
    """The store URL of a fresh schema on the shared server, dropped afterwards."""
    problem = await _shared_problem()
    if problem is not None:
        _missing(
            f"POSTGRESQL UNREACHABLE at POSTGRES_URL={SHARED_URL} ({problem})",
            "the PostgreSQL multi-process tests",
        )
    schema = f"{prefix}_{uuid.uuid4().hex[:12]}"
    separator = "&" if "?" in SHARED_URL else "?"
    try:
        yield f"{SHARED_URL}{separator}schema={schema}"
    finally:
        with anyio.CancelScope(shield=True):
            await drop_schema(SHARED_URL, schema)
