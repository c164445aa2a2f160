"""Every example of README.md and docs/ runs (the rules: tests/docs_examples.py).

One test per page runs its blocks in order in a directory of their own; a page about
Redis or PostgreSQL runs against the suite's servers (`REDIS_URL`, `POSTGRES_URL`) with a
prefix or schema of its own, skipping without them unless `CI=true`.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn  # what the examples import, imported once: their processes fork this one
from fastmcp import Client, FastMCP  # (tests/spawn.py) and start with it in memory

import fastmcp_tasks.cli
import fastmcp_tasks.dashboard
import fastmcp_tasks.testing
from tests import docs_examples
from tests.docs_examples import Block

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/15")
POSTGRES_URL = os.environ.get("POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
DOC_REDIS = "redis://localhost:6379/0"
DOC_POSTGRES = "postgresql://postgres@localhost:5432/app"
BIN = Path(sys.executable).parent
PRELOADED = (
    fastmcp_tasks.cli,
    fastmcp_tasks.dashboard,
    fastmcp_tasks.testing,
    uvicorn,
    Client,
    FastMCP,
)
_SHELLISH = re.compile(r"[|&;<>()`$*]")

PAGES = [page for page in docs_examples.pages() if docs_examples.blocks(page)]


def _page_id(page: Path) -> str:
    return str(page.relative_to(docs_examples.ROOT))


def _unavailable(what: str, problem: str) -> None:
    message = f"{what} UNREACHABLE ({problem}): its documentation examples are untested"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture
def stores(page_blocks: list[Block]) -> Iterator[dict[str, str]]:
    """`{doc URL: this run's URL}` for the stores the page's blocks name."""
    wanted = {block.options.get("env") for block in page_blocks} - {None}
    swaps: dict[str, str] = {}
    cleanups: list[Any] = []
    tag = uuid.uuid4().hex[:10]
    if "redis" in wanted:
        import redis

        try:
            client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1)
            client.ping()
        except Exception as exc:
            _unavailable(f"Redis at REDIS_URL={REDIS_URL}", repr(exc))
        prefix = f"docs-{tag}"
        swaps[DOC_REDIS] = f"{REDIS_URL}?prefix={prefix}"
        cleanups.append(lambda: [client.delete(k) for k in client.scan_iter(f"{{{prefix}}}*")])
    if "postgres" in wanted:
        import psycopg

        try:
            psycopg.connect(POSTGRES_URL, connect_timeout=2).close()
        except Exception as exc:
            _unavailable(f"PostgreSQL at POSTGRES_URL={POSTGRES_URL}", repr(exc))
        schema = f"docs_{tag}"
        swaps[DOC_POSTGRES] = f"{POSTGRES_URL}?schema={schema}"

        def drop() -> None:
            with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

        cleanups.append(drop)
    yield swaps
    for cleanup in cleanups:
        cleanup()


@pytest.fixture
def page_blocks(request: pytest.FixtureRequest) -> list[Block]:
    return docs_examples.blocks(request.param)


def _environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTMCP_TASKS_")}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(docs_examples.ROOT)
    env["COLUMNS"] = "120"
    return env


def _argv(command: str, env: dict[str, str]) -> list[str]:
    if _SHELLISH.search(command):
        return ["bash", "-euo", "pipefail", "-c", command]
    argv = shlex.split(command)
    if argv[0] == "fastmcp-tasks":
        argv[0] = str(BIN / "fastmcp-tasks")
    elif argv[0] in ("python", "python3"):
        argv[0] = sys.executable
    return argv


def _swap(text: str, swaps: dict[str, str]) -> str:
    for doc_url, url in swaps.items():
        text = text.replace(doc_url, url)
    return text


def _check(block: Block, what: str, done: subprocess.CompletedProcess[str], expect: int) -> None:
    if done.returncode != expect:
        pytest.fail(
            f"{block.where}: {what} exited {done.returncode} (expected {expect})\n"
            f"--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-6000:]}"
        )


def _run_python(block: Block, workdir: Path, env: dict[str, str], swaps: dict[str, str]) -> None:
    code = _swap(block.code, swaps)
    timeout = float(block.options.get("timeout", 90))
    if "file" in block.options:
        (workdir / block.options["file"]).write_text(code)
        argv = [sys.executable, "-c", f"import runpy; runpy.run_path({block.options['file']!r})"]
    else:
        script = workdir / f"block_{block.line}.py"
        script.write_text(code)
        argv = [sys.executable, script.name]
    done = subprocess.run(
        argv, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout
    )
    _check(block, "the example", done, 0)


def _run_shell(
    block: Block,
    workdir: Path,
    env: dict[str, str],
    swaps: dict[str, str],
    background: list[subprocess.Popen[str]],
) -> None:
    expect = int(block.options.get("expect-exit", 0))
    timeout = float(block.options.get("timeout", 90))
    for command in docs_examples.console_commands(block):
        command = _swap(command, swaps)
        exported = re.fullmatch(r"export (\w+)=(\S+)", command)
        if exported:
            env[exported.group(1)] = _swap(shlex.split(exported.group(2))[0], swaps)
            continue
        argv = _argv(command, env)
        if "background" in block.options:
            log = (workdir / f"background_{block.line}.log").open("w")
            background.append(
                subprocess.Popen(argv, cwd=workdir, env=env, stdout=log, stderr=log, text=True)
            )
            continue
        done = subprocess.run(
            argv, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout
        )
        _check(block, f"`{command}`", done, expect)


def _stop(processes: list[subprocess.Popen[str]]) -> None:
    """Stop the page's background commands; one that had already failed fails the page."""
    died = [process.args for process in processes if process.poll() not in (None, 0)]
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=45)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    assert not died, f"background commands that failed before the page ended: {died}"


@pytest.mark.parametrize("page_blocks", PAGES, ids=_page_id, indirect=True)
def test_page_examples_run(
    page_blocks: list[Block], stores: dict[str, str], tmp_path: Path
) -> None:
    env = _environment()
    background: list[subprocess.Popen[str]] = []
    try:
        for block in page_blocks:
            if block.is_python:
                _run_python(block, tmp_path, env, stores)
            elif block.is_shell and "shell" in block.options:
                _run_shell(block, tmp_path, env, stores, background)
    finally:
        _stop(background)


def test_every_block_is_run_or_marked() -> None:
    """100 % of the python blocks run; every shell block says whether it runs."""
    every = docs_examples.all_blocks()
    unmarked = [
        block.where
        for block in every
        if block.is_shell and "shell" not in block.options and "not-run" not in block.options
    ]
    assert not unmarked, f"shell blocks with neither `shell` nor `not-run`: {unmarked}"
    assert not [b.where for b in every if b.is_python and "not-run" in b.options]
    counts = docs_examples.count()
    print(f"documentation examples: {counts}")
    assert counts["python"] > 0
    assert counts["python_run"] == counts["python"]
    assert counts["shell_run"] + counts["shell_not_run"] == counts["shell"]


def test_the_cli_reference_shows_each_command_s_own_help() -> None:
    shown = docs_examples.cli_sections(docs_examples.CLI_PAGE.read_text(encoding="utf-8"))
    assert sorted(shown) == sorted(docs_examples.CLI_COMMANDS)
    stale = [c for c in docs_examples.CLI_COMMANDS if shown[c] != docs_examples.cli_help(c)]
    assert not stale, f"refresh with `python -m tests.docs_examples --write-cli`: {stale}"


def test_the_api_reference_has_every_public_name() -> None:
    page = (docs_examples.ROOT / "docs" / "reference" / "api.md").read_text(encoding="utf-8")
    shown = set(re.findall(r"^::: fastmcp_tasks\.(\w+)$", page, re.M))
    missing = set(fastmcp_tasks.__all__) - shown - {"__version__"}
    assert not missing, f"docs/reference/api.md lacks `::: fastmcp_tasks.NAME` for {missing}"
