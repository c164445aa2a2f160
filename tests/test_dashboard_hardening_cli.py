"""Hardening of `fastmcp-tasks ui` (review of issue 18), as a subprocess.

SIGTERM closes the store before the process exits 0; another loopback address serves
the URL it prints; the session cookie is named after the port (two dashboards on one
host keep their own sessions); a locked SQLite file is a prompt 503.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import httpx

from fastmcp_tasks.testing import make_record
from tests.test_dashboard_http import opened
from tests.wire import free_port

SCRIPT = Path(sys.executable).with_name("fastmcp-tasks")


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("FASTMCP_TASKS_")}


def _serve_cli(*args: str) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [str(SCRIPT), "ui", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    assert process.stdout is not None
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        match = re.search(r"at (http://\S+/)", line)
        if match:
            return process, match.group(1)
        if not line and process.poll() is not None:
            break
    process.kill()
    raise AssertionError(f"no URL printed; stderr: {process.communicate()[1]}")


def _populate(url: str) -> None:
    async def go() -> None:
        store = await opened(url)
        try:
            await store.create(make_record())
        finally:
            await store.close()

    anyio.run(go)


def test_sigterm_closes_the_store(tmp_path: Path) -> None:
    """uvicorn 0.29+ re-raises the SIGTERM it caught once `serve()` returns (which would
    kill the process before the store is closed, leaving -wal/-shm and status -15): the
    dashboard closes the store in the server's shutdown and the command exits 0."""
    db = tmp_path / "tasks.db"
    url = f"sqlite:///{db}"
    _populate(url)
    process, base = _serve_cli("--url", url, "--port", str(free_port()))
    try:
        with httpx.Client(base_url=base, timeout=10) as http:
            assert http.get("/tasks").status_code == 200  # the dashboard opened the store
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=10)
    leftovers = sorted(p.name for p in tmp_path.iterdir() if p.name != "tasks.db")
    assert (process.returncode, leftovers) == (0, [])


def test_ui_on_another_loopback_address_serves_the_url_it_prints(tmp_path: Path) -> None:
    """`--host 127.0.0.2` is loopback (no token needed): the Host allowlist names it with
    its port beside 127.0.0.1, localhost and [::1], so the printed URL answers."""
    url = f"sqlite:///{tmp_path / 'tasks.db'}"
    _populate(url)
    process, base = _serve_cli("--url", url, "--host", "127.0.0.2", "--port", "0")
    try:
        with httpx.Client(base_url=base, timeout=10) as http:
            assert http.get("/").status_code == 200, base
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=10)


def test_ui_names_its_session_cookie_after_its_port(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tasks.db'}"
    _populate(url)
    port = free_port()
    process, base = _serve_cli("--url", url, "--port", str(port), "--token", "tok-1234")
    try:
        with httpx.Client(base_url=base, timeout=10) as http:
            login = http.get("/tasks", params={"token": "tok-1234"}, follow_redirects=False)
            assert login.status_code == 303
            assert login.headers["set-cookie"].startswith(f"fastmcp_tasks_ui_{port}=")
            assert http.get("/tasks").status_code == 200  # the cookie is the session
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=10)
    assert process.returncode == 0


def test_ui_on_a_locked_sqlite_file_answers_503_promptly(tmp_path: Path) -> None:
    """Another process holds an exclusive lock on the file: pages say 503 (store
    unavailable) within the client's patience, then work once the lock is gone."""
    import sqlite3

    db = tmp_path / "tasks.db"
    url = f"sqlite:///{db}"
    _populate(url)
    locker = sqlite3.connect(db, isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")
    process, base = _serve_cli("--url", url, "--port", str(free_port()))
    try:
        with httpx.Client(base_url=base, timeout=20) as http:
            started = time.monotonic()
            locked = http.get("/tasks")
            took = time.monotonic() - started
            locker.execute("ROLLBACK")
            locker.close()
            deadline = time.monotonic() + 15
            while (after := http.get("/tasks")).status_code != 200:
                assert time.monotonic() < deadline, after.status_code
                time.sleep(0.1)
        assert (locked.status_code, took < 10) == (503, True), (locked.status_code, took)
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=10)
