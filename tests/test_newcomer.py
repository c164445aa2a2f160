"""A newcomer's path, as written: build the wheel, install it (not editable) into a fresh
virtual environment with its dependencies from the package index, save the README's
example as `app.py` and run it with `python app.py`, outside the repository.

Needs the package index (pip); without it the test skips, and with `CI=true` it fails.
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from tests import docs_examples, spawn

ROOT = docs_examples.ROOT


def _run(argv: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    """Run `argv` in a fresh interpreter (pip's build backends must not fork the tests)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FASTMCP_TASKS_", "PYTHON"))}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    with spawn.fresh_interpreter():
        return subprocess.run(
            argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
        )


def _need(done: subprocess.CompletedProcess[str], what: str) -> None:
    if done.returncode == 0:
        return
    output = f"{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    offline = any(
        sign in output
        for sign in ("Could not find a version", "NewConnectionError", "Temporary failure")
    )
    if offline and os.environ.get("CI") != "true":
        pytest.skip(f"NO PACKAGE INDEX: {what} failed, the newcomer's path is untested")
    pytest.fail(f"{what} failed (exit {done.returncode}):\n{output}")


def readme_example() -> str:
    """The README's first python block: the complete server + client example."""
    return next(b.code for b in docs_examples.blocks(ROOT / "README.md") if b.is_python)


@pytest.mark.timeout(600)
def test_the_readme_example_runs_from_the_built_wheel(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    built = _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(ROOT)],
        cwd=tmp_path,
        timeout=240,
    )
    _need(built, "building the wheel (pip wheel --no-deps .)")
    (wheel,) = dist.glob("fastmcp_tasks-*.whl")

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, symlinks=True).create(env_dir)
    python = env_dir / "bin" / "python"
    installed = _run([str(python), "-m", "pip", "install", "-q", str(wheel)], tmp_path, 400)
    _need(installed, f"pip install {wheel.name}")

    work = tmp_path / "newcomer"
    work.mkdir()
    (work / "app.py").write_text(readme_example())
    done = _run([str(python), "app.py"], cwd=work, timeout=120)
    assert done.returncode == 0, done.stderr[-5000:]
    lines = done.stdout.splitlines()
    assert lines[-1] == "Rendered 3 pages", done.stdout
    assert "working Rendering page 2 of 3" in lines, done.stdout
    assert any(line.startswith("completed") for line in lines), done.stdout
    where = _run(
        [str(python), "-c", "import fastmcp_tasks; print(fastmcp_tasks.__file__)"], work, 60
    )
    assert str(env_dir) in where.stdout, where.stdout  # the wheel's copy, not the repository's
