"""`fastmcp-tasks ui` as a person runs it: the installed script in a subprocess.

It serves a real SQLite file on a free loopback port: the test waits (with a deadline)
for the line with the URL, reads pages over HTTP, and stops it with SIGTERM. The
refusals (memory://, a public address without a token) exit 2 before serving.
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
import pytest

from fastmcp_tasks import store_from_url
from fastmcp_tasks.testing import make_record
from tests.wire import free_port

SCRIPT = Path(sys.executable).with_name("fastmcp-tasks")


async def _populate(url: str) -> str:
    store = store_from_url(url)
    await store.open()
    try:
        task = make_record()
        await store.create(task)
        return task.task_id
    finally:
        await store.close()


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), "ui", *args], capture_output=True, text=True, timeout=30, env=env
    )


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTMCP_TASKS_")}
    env.update(extra)
    return env


def _serve(*args: str, env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    """Start `fastmcp-tasks ui ARGS`; the process and the URL it printed (10 s deadline)."""
    process = subprocess.Popen(
        [str(SCRIPT), "ui", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert process.stdout is not None
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        line = process.stdout.readline()  # the URL line comes first, flushed
        match = re.search(r"at (http://\S+/)", line)
        if match:
            return process, match.group(1)
        if not line and process.poll() is not None:
            break
    process.kill()
    raise AssertionError(f"no URL printed; stderr: {process.communicate()[1]}")


def _stop(process: subprocess.Popen[str]) -> str:
    process.send_signal(signal.SIGTERM)
    try:
        _, err = process.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    assert process.returncode == 0, err  # the dashboard closed the store, then exited
    return err


def test_ui_serves_a_sqlite_store_on_loopback(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tasks.db'}"
    task_id = anyio.run(_populate, url)
    port = free_port()
    process, base = _serve("--url", url, "--port", str(port), env=_env())
    try:
        assert base == f"http://127.0.0.1:{port}/"
        with httpx.Client(base_url=base, timeout=10) as http:
            assert http.get("/").status_code == 200
            assert task_id in http.get("/tasks").text
            detail = http.get(f"/tasks/{task_id}")
            assert detail.status_code == 200 and 'id="cancel-form"' in detail.text
            assert http.get("/static/dashboard.css").status_code == 200
            # DNS rebinding: a page asked for under another name is refused
            assert http.get("/", headers={"Host": f"evil.example:{port}"}).status_code == 400
            assert http.get("/", headers={"Host": f"localhost:{port}"}).status_code == 200
    finally:
        _stop(process)


def test_ui_with_a_token_prints_no_token_and_requires_it(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tasks.db'}"
    anyio.run(_populate, url)
    env = _env(FASTMCP_TASKS_URL=url, FASTMCP_TASKS_UI_TOKEN="env-secret-1234")
    process, base = _serve("--port", "0", "--read-only", env=env)
    try:
        with httpx.Client(base_url=base, timeout=10) as http:
            assert http.get("/tasks").status_code == 401
            bearer = {"Authorization": "Bearer env-secret-1234"}
            page = http.get("/tasks", headers=bearer)
            assert page.status_code == 200 and 'method="post"' not in page.text
    finally:
        err = _stop(process)
    assert "env-secret-1234" not in err


def test_ui_refuses_memory_and_a_public_address_without_a_token(tmp_path: Path) -> None:
    memory = _run("--url", "memory://", env=_env())
    assert memory.returncode == 2 and "memory://" in memory.stderr
    url = f"sqlite:///{tmp_path / 'tasks.db'}"
    anyio.run(_populate, url)
    public = _run("--url", url, "--host", "0.0.0.0", env=_env())
    assert public.returncode == 2 and "without a token" in public.stderr
    missing = _run("--url", f"sqlite:///{tmp_path / 'none.db'}", env=_env())
    assert missing.returncode == 1 and "does not exist" in missing.stderr
    assert _run(env=_env()).returncode == 2  # no store named


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "0.0.0.0", "example.com"])
def test_loopback_is_recognised(host: str) -> None:
    from fastmcp_tasks.cli.ui import is_loopback

    assert is_loopback(host) == (host in ("127.0.0.1", "localhost", "::1"))


def test_ui_serves_labelled_tokens_from_a_file(tmp_path: Path) -> None:
    """`--token-file` (`label:token` lines) and `--read-only-label`: each token is its
    label's session, a viewer's pages have no form; a bad file or an unknown label
    exits 2 before serving."""
    url = f"sqlite:///{tmp_path / 'tasks.db'}"
    anyio.run(_populate, url)
    tokens = tmp_path / "tokens"
    tokens.write_text("# who may use it\nalice:alice-secret\nviewer:viewer-secret\n")
    bad = tmp_path / "bad"
    bad.write_text("alice\n")
    refused = _run("--url", url, "--token-file", str(bad), env=_env())
    assert refused.returncode == 2 and "line 1" in refused.stderr
    unknown = _run(
        "--url", url, "--token-file", str(tokens), "--read-only-label", "bob", env=_env()
    )
    assert unknown.returncode == 2 and "bob" in unknown.stderr
    env = _env(FASTMCP_TASKS_UI_TOKEN_FILE=str(tokens))
    process, base = _serve("--url", url, "--port", "0", "--read-only-label", "viewer", env=env)
    try:
        with httpx.Client(base_url=base, timeout=10) as http:
            assert http.get("/tasks").status_code == 401
            alice = http.get("/tasks", headers={"Authorization": "Bearer alice-secret"})
            assert alice.status_code == 200 and 'data-read-only="false"' in alice.text
            viewer = http.get("/tasks", headers={"Authorization": "Bearer viewer-secret"})
            assert viewer.status_code == 200 and 'method="post"' not in viewer.text
    finally:
        err = _stop(process)
    assert "alice-secret" not in err
