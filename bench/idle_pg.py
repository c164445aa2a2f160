"""Counting PostgreSQL store work for `bench/idle.py`, from psycopg's public API and the
server's own statement log; nothing reads the store's counters.

- `PgTap` wraps `psycopg.AsyncCursor.execute` and `executemany` (every statement an
  asyncio psycopg connection runs goes through one of them: `AsyncConnection.execute`
  makes a cursor and calls `execute`) and `psycopg.AsyncConnection.connect`: each call
  is one **client statement**, and new connections are counted.
- `PrivatePostgres` is a `postgres` of this run's own: `initdb` into a temporary
  directory, a free 127.0.0.1 port, `log_statement=all` with `log_line_prefix`
  `'%m|%p|%a| '`, its log read by `counters()`: every `statement:` / `execute ...:`
  line is one statement the **server** ran, by `application_name` (the store names its
  pool `fastmcp-tasks:<schema>` and its LISTEN connection `fastmcp-tasks-feed:<schema>`).
  The transaction statements (`BEGIN`, `COMMIT`) the client sends without a cursor
  show there only. As root, `initdb` and the server run as the `postgres` OS user
  (setuid in the child); stopped by pid (`pg_ctl stop -m fast`, SIGKILL after 10 s).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any

STATEMENT_MARKERS = ("LOG:  statement: ", "LOG:  execute ")


def _label(query: Any) -> str:
    text = query if isinstance(query, str) else getattr(query, "as_string", lambda _: "")(None)
    if not isinstance(text, str):
        text = str(query)
    return " ".join(text.split()[:3]).upper()[:40]


class PgTap:
    """Statements run and connections opened by every asyncio psycopg connection."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.statements = 0
        self.connections = 0
        self.by_statement: Counter[str] = Counter()
        self._restore: Callable[[], None] | None = None

    def install(self) -> None:
        import psycopg

        cursor, connection = psycopg.AsyncCursor, psycopg.AsyncConnection
        execute, executemany = cursor.execute, cursor.executemany
        connect = connection.connect.__func__  # type: ignore[attr-defined]
        tap = self

        @wraps(execute)
        async def tapped_execute(cur: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            tap.record(query)
            return await execute(cur, query, *args, **kwargs)

        @wraps(executemany)
        async def tapped_many(cur: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            tap.record(query)
            return await executemany(cur, query, *args, **kwargs)

        @wraps(connect)
        async def tapped_connect(cls: Any, *args: Any, **kwargs: Any) -> Any:
            with tap.lock:
                tap.connections += 1
            return await connect(cls, *args, **kwargs)

        cursor.execute = tapped_execute  # type: ignore[method-assign]
        cursor.executemany = tapped_many  # type: ignore[method-assign]
        connection.connect = classmethod(tapped_connect)  # type: ignore[method-assign,assignment]

        def restore() -> None:
            cursor.execute = execute  # type: ignore[method-assign]
            cursor.executemany = executemany  # type: ignore[method-assign]
            connection.connect = classmethod(connect)  # type: ignore[method-assign,assignment]

        self._restore = restore

    def uninstall(self) -> None:
        if self._restore is not None:
            self._restore()
            self._restore = None

    def record(self, query: Any) -> None:
        label = _label(query)
        with self.lock:
            self.statements += 1
            self.by_statement[label] += 1

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {
                "statements": self.statements,
                "connections_opened": self.connections,
                "by_statement": dict(self.by_statement),
            }


def _bin() -> Path:
    found = shutil.which("initdb")
    candidates = [Path(os.path.realpath(found)).parent] if found else []
    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
    for candidate in candidates:
        if (candidate / "postgres").exists() and (candidate / "pg_ctl").exists():
            return candidate
    raise FileNotFoundError("no initdb/postgres (PATH, /usr/lib/postgresql/*/bin)")


class PrivatePostgres:
    """A `postgres` of our own logging every statement (module doc), stopped by pid."""

    def __init__(self) -> None:
        self.bin = _bin()
        self.as_user: dict[str, Any] = {}
        if os.geteuid() == 0:  # PostgreSQL refuses to run as root
            entry = pwd.getpwnam("postgres")
            self.as_user = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}
        self.dir = Path(tempfile.mkdtemp(prefix="fastmcp-tasks-idle-pg-"))
        if self.as_user:
            os.chown(self.dir, self.as_user["user"], self.as_user["group"])
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = int(sock.getsockname()[1])
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self.log_path = self.dir / "postgres.log"
        data = str(self.dir / "data")
        initdb = [str(self.bin / "initdb"), "-D", data, "-A", "trust", "-U", "postgres"]
        subprocess.run(
            [*initdb, "--no-sync", "--locale=C", "-E", "UTF8"],
            check=True,
            capture_output=True,
            cwd=self.dir,
            **self.as_user,
        )
        self.log = open(self.log_path, "ab")  # the server's stderr
        self.proc = subprocess.Popen(
            [
                *(str(self.bin / "postgres"), "-D", data, "-k", str(self.dir)),
                *("-p", str(self.port)),
                *("-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"),
                *("-c", "log_statement=all", "-c", "log_line_prefix=%m|%p|%a| "),
            ],
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            cwd=self.dir,
            start_new_session=True,
            **self.as_user,
        )
        atexit.register(self.stop)
        self._wait_ready()
        self.version = self._query("SHOW server_version")

    def _query(self, sql: str) -> str:
        import psycopg

        with contextlib.closing(psycopg.connect(self.url, application_name="bench")) as conn:
            return str(conn.execute(sql).fetchone()[0])  # type: ignore[index]

    def _wait_ready(self) -> None:
        import psycopg

        deadline = time.monotonic() + 20
        while True:
            try:
                self._query("SELECT 1")
                return
            except psycopg.OperationalError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    text = self.log_path.read_text(errors="replace")[-2000:]
                    self.stop()
                    raise RuntimeError(f"private postgres did not start:\n{text}") from None
                time.sleep(0.05)

    def counters(self) -> dict[str, Any]:
        """Statements the server logged so far, in all, by application and by statement
        (the harness's own `bench` connections left out)."""
        self.log.flush()
        by_app: Counter[str] = Counter()
        by_statement: Counter[str] = Counter()
        for line in self.log_path.read_text(errors="replace").splitlines():
            marker = next((m for m in STATEMENT_MARKERS if m in line), None)
            parts = line.split("|", 3)
            if marker is None or len(parts) < 4 or parts[2] == "bench":
                continue
            app = parts[2].partition(":")[0] or "?"
            by_app[app] += 1
            text = line.split(marker, 1)[1]
            if marker.endswith("execute "):
                text = text.partition(": ")[2]
            by_statement[" ".join(text.split()[:3]).upper()[:40]] += 1
        return {
            "statements": sum(by_app.values()),
            "by_application": dict(by_app),
            "by_statement": dict(by_statement),
        }

    def stop(self) -> None:
        """A fast shutdown by pid (SIGKILL after 10 s), then the directory removed."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # what `pg_ctl stop -m fast` sends
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        with contextlib.suppress(OSError):
            self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def pg_rates(row: dict[str, Any], elapsed: float) -> dict[str, Any]:
    """The per-second figures of one PostgreSQL case (see `bench/idle.py`'s table)."""
    client, server = row["client"], row["server"]
    feed = server["by_application"].get("fastmcp-tasks-feed", 0)
    return {
        "metric": "statements (server)",
        "per_s": server["statements"] / elapsed,
        "ops_per_s": client["statements"] / elapsed,
        "check_per_s": feed / elapsed,
        # the server also sees BEGIN/COMMIT, which the client sends without a cursor
        "crosscheck_ok": server["statements"] >= client["statements"],
    }
