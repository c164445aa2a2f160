"""A PgBouncer of our own in front of the shared PostgreSQL: `PrivateBouncer()`.

The tests of the store behind a pooler (`test_postgres_pgbouncer`) need a real PgBouncer,
not the machine's: the Debian package's service is never started or touched. This one:

- is configured in a fresh directory `tempfile.mkdtemp()` makes (`pgbouncer.ini`, an
  `auth_file` listing `postgres`, its log): `pool_mode = transaction`,
  `auth_type = trust`, listening on a free 127.0.0.1 port only (no Unix socket), with
  its databases pointing at the shared server (`$POSTGRES_URL`'s host and port,
  default 127.0.0.1:5432; the shared server is never stopped or reconfigured):
  `test` (a pool of `POOL_SIZE` server connections, fewer than the store's clients, so
  clients really share them), `test_one` (one server connection: every client's
  transactions run on the same backend, which makes what a pooler does to sessions
  deterministic for the negative controls) and `test_session` (`pool_mode =
  session`). `server_round_robin = 0` (the default, said explicitly): an idle server
  connection is reused most-recently-released first.
- runs `pgbouncer` itself (no daemonizing, so the process we start IS the pooler and
  its pid is ours to end). PgBouncer refuses to run as root ("PgBouncer should not run
  as root"): as root it runs as the `postgres` OS user (`Popen(user=..., group=...,
  extra_groups=[])`), owning the directory; otherwise as ourselves.
- `ready()` waits, with a deadline, until a connection through it runs `SELECT 1`
  (failing with its log if the process exits); `stop()` ends it by pid (SIGTERM,
  PgBouncer's immediate shutdown, then SIGKILL if it hangs) and removes the directory.

Skips loudly without the `pgbouncer` binary (`apt-get install pgbouncer`), or as root
without a `postgres` OS user, and fails instead when `CI=true`.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

import psycopg

from tests.private_postgres import SHARED_URL, _missing
from tests.wire import free_port

LOOPBACK = "127.0.0.1"
RUN_AS = "postgres"
#: Server connections PgBouncer keeps per database and user for `test`.
POOL_SIZE = 3
UNTESTED = "the PostgreSQL store behind PgBouncer (transaction pooling)"


def pgbouncer_binary() -> str:
    """The `pgbouncer` executable (PATH, then Debian's /usr/sbin); skips loudly without."""
    found = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin:/usr/bin")
    if found is None:
        _missing("NO pgbouncer binary (apt-get install pgbouncer)", UNTESTED)
        raise AssertionError("unreachable")
    return found


def _run_as() -> dict[str, Any]:
    """`Popen` options that run PgBouncer as `RUN_AS` (as root), else nothing."""
    if os.geteuid() != 0:
        return {}
    try:
        entry = pwd.getpwnam(RUN_AS)
    except KeyError:
        _missing(f"running as root and no {RUN_AS!r} OS user to run PgBouncer as", UNTESTED)
        raise
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


class PrivateBouncer:
    """A `pgbouncer` of our own (module doc); `url(database)` is an address through it."""

    def __init__(self) -> None:
        self.binary = pgbouncer_binary()
        self.as_user = _run_as()
        shared = urlsplit(SHARED_URL)
        self.server_host = shared.hostname or LOOPBACK
        self.server_port = shared.port or 5432
        self.server_db = shared.path.lstrip("/") or "test"
        self.user = shared.username or "postgres"
        self.port = free_port()
        self.directory = Path(tempfile.mkdtemp(prefix="fastmcp-tasks-pgbouncer-"))
        self.log_path = self.directory / "pgbouncer.log"
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._configure()

    def url(self, database: str = "test") -> str:
        return f"postgresql://{self.user}@{LOOPBACK}:{self.port}/{database}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def _configure(self) -> None:
        server = f"host={self.server_host} port={self.server_port} dbname={self.server_db}"
        ini = "\n".join(
            [
                "[databases]",
                f"test = {server} pool_size={POOL_SIZE}",
                f"test_one = {server} pool_size=1",
                f"test_session = {server} pool_mode=session",
                "[pgbouncer]",
                f"listen_addr = {LOOPBACK}",
                f"listen_port = {self.port}",
                "unix_socket_dir =",
                "auth_type = trust",
                f"auth_file = {self.directory / 'userlist.txt'}",
                f"admin_users = {self.user}",
                "pool_mode = transaction",
                "server_round_robin = 0",
                "max_client_conn = 500",
                *self._prepared_statements(),
                "default_pool_size = 20",
                f"logfile = {self.log_path}",
                "",
            ]
        )
        (self.directory / "pgbouncer.ini").write_text(ini)
        (self.directory / "userlist.txt").write_text(f'"{self.user}" ""\n')
        if self.as_user:
            for path in [self.directory, *self.directory.iterdir()]:
                os.chown(path, self.as_user["user"], self.as_user["group"])

    def _prepared_statements(self) -> list[str]:
        """`max_prepared_statements = 0` where PgBouncer has it (1.21 and later can keep
        protocol-level prepared statements in transaction mode; 1.18, Debian 12's, cannot),
        so every version shows what a pooler without that support does."""
        done = subprocess.run(
            [self.binary, "--version"], capture_output=True, text=True, timeout=30, **self.as_user
        )
        found = re.search(r"PgBouncer (\d+)\.(\d+)", done.stdout)
        new = found is not None and (int(found[1]), int(found[2])) >= (1, 21)
        return ["max_prepared_statements = 0"] if new else []

    def start(self) -> None:
        assert not self.running, "already running"
        self._log = open(self.directory / "stdout.log", "ab")
        self.process = subprocess.Popen(
            [self.binary, str(self.directory / "pgbouncer.ini")],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=self.directory,
            **self.as_user,
        )

    def _answers(self) -> bool:
        try:
            with psycopg.connect(self.url(), connect_timeout=1, autocommit=True) as conn:
                return conn.execute("SELECT 1").fetchone() == (1,)
        except psycopg.OperationalError:
            return False

    def ready(self, within: float = 20.0) -> None:
        """Wait until a connection through it runs `SELECT 1` (module doc)."""
        deadline = time.monotonic() + within
        while not self._answers():
            assert self.running, f"pgbouncer exited:\n{self.log()}"
            assert time.monotonic() < deadline, f"pgbouncer not ready in {within} s:\n{self.log()}"
            time.sleep(0.05)

    def admin(self, command: str) -> list[dict[str, Any]]:
        """The rows of an admin console command (`SHOW POOLS`, ...), as dicts."""
        with psycopg.connect(
            self.url("pgbouncer"), connect_timeout=5, autocommit=True, prepare_threshold=None
        ) as conn:
            cur = conn.execute(command, prepare=False)
            names = [column.name for column in cur.description or []]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    def stop(self) -> None:
        """End it by pid (SIGTERM, then SIGKILL after 10 s), then remove its directory."""
        try:
            if self.process is not None and self.running:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.process.pid, signal.SIGTERM)
                try:
                    self.process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.kill(self.process.pid, signal.SIGKILL)
                    self.process.wait(timeout=10)
        finally:
            if self._log is not None:
                self._log.close()
                self._log = None
            shutil.rmtree(self.directory, ignore_errors=True)

    def log(self) -> str:
        parts = [p.read_text(errors="replace") for p in sorted(self.directory.glob("*.log"))]
        return "".join(parts)[-3000:] or "(no log)"


__all__ = ["POOL_SIZE", "PrivateBouncer", "pgbouncer_binary"]
