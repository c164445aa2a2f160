"""Counting store work for `bench/idle.py`, from the client libraries' public APIs only.

- `RedisTap` wraps `redis.asyncio.connection.AbstractConnection.send_packed_command`,
  through which redis-py's asyncio client sends everything (`send_command` packs one
  command and calls it; a pipeline packs all its commands and calls it once): each call
  is **one round trip**, and the RESP arrays in the bytes sent are its **commands**
  (named by their first argument; an `EVALSHA` by the store's script when its SHA-1 is
  known).
- `SqliteTap` wraps `sqlite3.connect` so that every connection opened afterwards gets a
  `set_trace_callback` (SQLite's statement trace, called in whichever thread runs the
  statement): each call is **one statement**; `BEGIN IMMEDIATE`/`EXCLUSIVE` is a
  **write-lock take**, `PRAGMA data_version` a **change-feed poll**.
- `PrivateRedis` is a `redis-server` of this run's own on a free 127.0.0.1 port (no
  persistence, its own temporary directory, stopped by pid), whose `INFO` gives the
  server-side cross-check. It is read with the *synchronous* redis-py client, which
  `RedisTap` does not see.

`EngineLog` collects the warnings and errors the package logs during a case.

Nothing here reads counters of the stores themselves (`store.stats` or the like).
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import logging
import shutil
import socket
import sqlite3
import subprocess
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from functools import wraps
from pathlib import Path
from typing import Any


def _resp_commands(chunks: Iterable[bytes | memoryview]) -> list[bytes]:
    """The command name (first argument) of every RESP array in `chunks`, in order."""
    data = b"".join(bytes(c) for c in chunks)
    names: list[bytes] = []
    pos = 0
    while pos < len(data):
        if data[pos : pos + 1] != b"*":
            raise ValueError(f"not a RESP array at byte {pos}: {data[pos : pos + 20]!r}")
        end = data.index(b"\r\n", pos)
        count, pos = int(data[pos + 1 : end]), end + 2
        for i in range(count):
            end = data.index(b"\r\n", pos)
            size = int(data[pos + 1 : end])  # `$<size>`
            if i == 0:
                names.append(data[end + 2 : end + 2 + size])
            pos = end + 2 + size + 2
    return names


class RedisTap:
    """Round trips and commands sent by every redis-py asyncio connection of this process."""

    def __init__(self, scripts: dict[str, str] | None = None) -> None:
        self.lock = threading.Lock()
        self.round_trips = 0
        self.commands = 0
        self.bytes_sent = 0
        self.by_command: Counter[str] = Counter()
        self.errors = 0  # sends whose bytes did not parse (counted as one command)
        self._shas = {
            hashlib.sha1(text.encode()).hexdigest().encode(): name
            for name, text in (scripts or {}).items()
        }
        self._restore: Callable[[], None] | None = None

    def install(self) -> None:
        from redis.asyncio.connection import AbstractConnection

        original = AbstractConnection.send_packed_command
        tap = self

        @wraps(original)
        async def send_packed_command(
            conn: Any, command: bytes | str | Iterable[bytes], check_health: bool = True
        ) -> None:
            tap.record(command)
            await original(conn, command, check_health)

        AbstractConnection.send_packed_command = send_packed_command  # type: ignore[method-assign]

        def restore() -> None:
            AbstractConnection.send_packed_command = original  # type: ignore[method-assign]

        self._restore = restore

    def uninstall(self) -> None:
        if self._restore is not None:
            self._restore()
            self._restore = None

    def record(self, command: bytes | str | Iterable[bytes]) -> None:
        if isinstance(command, str):
            chunks: list[bytes | memoryview] = [command.encode()]
        elif isinstance(command, bytes | memoryview):
            chunks = [command]
        else:
            chunks = list(command)
        try:
            names = [self._label(chunks, name) for name in _resp_commands(chunks)]
        except ValueError:
            names, parse_error = ["?"], True
        else:
            parse_error = False
        with self.lock:
            self.round_trips += 1
            self.commands += len(names)
            self.bytes_sent += sum(len(c) for c in chunks)
            self.by_command.update(names)
            self.errors += parse_error

    def _label(self, chunks: list[bytes | memoryview], name: bytes) -> str:
        label = name.decode(errors="replace").lower()
        if label == "evalsha":
            for sha, script in self._shas.items():
                if any(sha in bytes(c) for c in chunks):
                    return f"evalsha {script}"
        return label

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {
                "round_trips": self.round_trips,
                "commands": self.commands,
                "bytes_sent": self.bytes_sent,
                "by_command": dict(self.by_command),
                "parse_errors": self.errors,
            }


class SqliteTap:
    """Statements run on every `sqlite3` connection opened after `install()`."""

    WRITE_LOCK = ("BEGIN IMMEDIATE", "BEGIN EXCLUSIVE")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.statements = 0
        self.write_locks = 0
        self.data_version = 0
        self.connections = 0
        self.by_statement: Counter[str] = Counter()
        self._restore: Callable[[], None] | None = None

    def install(self) -> None:
        original = sqlite3.connect

        @wraps(original)
        def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
            conn = original(*args, **kwargs)
            conn.set_trace_callback(self.trace)
            with self.lock:
                self.connections += 1
            return conn

        sqlite3.connect = connect  # type: ignore[assignment]

        def restore() -> None:
            sqlite3.connect = original

        self._restore = restore

    def uninstall(self) -> None:
        if self._restore is not None:
            self._restore()
            self._restore = None

    def trace(self, statement: str) -> None:
        head = " ".join(statement.split()[:4]).upper()
        label = " ".join(head.split()[:3])[:40]
        with self.lock:
            self.statements += 1
            self.by_statement[label] += 1
            if head.startswith(self.WRITE_LOCK):
                self.write_locks += 1
            elif head.startswith("PRAGMA DATA_VERSION"):
                self.data_version += 1

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {
                "statements": self.statements,
                "write_locks": self.write_locks,
                "data_version_polls": self.data_version,
                "connections_opened": self.connections,
                "by_statement": dict(self.by_statement),
            }


def delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """`after - before` for every number and every counter (dict of numbers) of a snapshot."""
    out: dict[str, Any] = {}
    for key, value in after.items():
        if isinstance(value, dict):
            old = before.get(key, {})
            diff = {k: v - old.get(k, 0) for k, v in value.items()}
            out[key] = {k: v for k, v in sorted(diff.items(), key=lambda kv: -kv[1]) if v}
        else:
            out[key] = value - before.get(key, 0)
    return out


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrivateRedis:
    """A `redis-server` of our own: free port, no persistence, own directory, stopped by pid."""

    def __init__(self, binary: str = "redis-server") -> None:
        found = shutil.which(binary)
        if found is None:
            raise FileNotFoundError(f"{binary} not found on PATH")
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="fastmcp-tasks-idle-redis-"))
        command = [
            found, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--dir", str(self.dir), "--logfile", str(self.dir / "log"),
            "--daemonize", "no",
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True
        )
        atexit.register(self.stop)
        self.url = f"redis://127.0.0.1:{self.port}/0"
        import redis

        self.client = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(redis.ConnectionError):
                if self.client.ping():
                    break
            if self.proc.poll() is not None or time.monotonic() > deadline:
                log = (self.dir / "log").read_text(errors="replace")[-2000:] if self.dir else ""
                self.stop()
                raise RuntimeError(f"private redis-server did not start:\n{log}")
            time.sleep(0.05)
        self.version = str(self.client.info("server")["redis_version"])

    def counters(self) -> dict[str, Any]:
        """`total_commands_processed`, `total_net_input_bytes` and calls per command
        (`INFO commandstats`, which also counts commands run inside Lua scripts), read by
        ONE `INFO` call; that call itself shows in the next reading as one `info` call."""
        info = self.client.info("stats", "commandstats")
        calls = {
            key.removeprefix("cmdstat_"): int(value["calls"])
            for key, value in info.items()
            if key.startswith("cmdstat_")
        }
        return {
            "total_commands_processed": int(info["total_commands_processed"]),
            "net_input_bytes": int(info["total_net_input_bytes"]),
            "by_command": calls,
        }

    def stop(self) -> None:
        """SIGTERM to our pid (SIGKILL after 5 s), then remove the directory. Idempotent."""
        with contextlib.suppress(Exception):
            self.client.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        shutil.rmtree(self.dir, ignore_errors=True)


class EngineLog(logging.Handler):
    """Warnings and errors the package logs during a case: an engine loop that fails
    does no store work, which must not read as a PASS."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage().splitlines()[0][:200]
        if record.exc_info and record.exc_info[1] is not None:
            message += f" ({type(record.exc_info[1]).__name__}: {record.exc_info[1]})"[:300]
        self.records.append({"level": record.levelname, "logger": record.name, "msg": message})

    @contextlib.contextmanager
    def attached(self) -> Any:
        logger = logging.getLogger("fastmcp_tasks")
        logger.addHandler(self)
        try:
            yield self
        finally:
            logger.removeHandler(self)
