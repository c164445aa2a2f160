#!/usr/bin/env bash
# The test command (README.md, run verbatim by .ci/run). In order, stopping at the
# first failure:
#   1. ruff check, ruff format --check       (the whole repo)
#   2. mypy                                  (fastmcp_tasks; config: pyproject [tool.mypy])
#   3. scripts/check_imports.py              (every third-party import is declared)
#   4. scripts/docs.sh build                 (mkdocs build --strict into site/, git-ignored)
#   5. the pytest suite                      (newest FastMCP, .venv; in parallel; it runs
#                                             every example of README.md and docs/ too)
#   6. scripts/lowest.sh                     (a subset on the lowest declared FastMCP)
#   7. scripts/conformance.sh                (the official MCP conformance tasks-* scenarios)
#
# The suite runs in CHECK_WORKERS pytest-xdist workers (default 4: its tests wait on
# processes, servers and deadlines more than they compute, so twice the cores of a
# 2-core machine); tests/conftest.py's scheduler keeps a module that shares a server in
# one worker.
#
# `scripts/check.sh --quick`: steps 1-4, then only the tests marked `quick` (no real
# faults, no processes of ours, no browser, no other SDKs' clients), for use while
# working; about 2 minutes. CI always runs the whole check.
#
# Creates .venv with the `dev` extra when it is missing or lacks the dev tools.
# Environment: CHECK_WORKERS (default 4), CHECK_SKIP_LOWEST=1 leaves step 6 out.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="$ROOT/.venv/bin/python"
# the repo's own code, whatever an editable install elsewhere points to
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"

QUICK=0
case "${1:-}" in
  "") ;;
  --quick) QUICK=1 ;;
  *) echo "usage: scripts/check.sh [--quick]" >&2; exit 2 ;;
esac
WORKERS="${CHECK_WORKERS:-4}"
PARALLEL=(-n "$WORKERS")

if ! "$PY" -c 'import mypy, ruff, pytest, xdist, mkdocs, mkdocstrings, material' 2>/dev/null; then
  echo "check: installing .venv with the dev extra"
  python3 -m venv .venv
  "$PY" -m pip install --quiet --upgrade pip
  "$PY" -m pip install --quiet -e '.[dev]'
fi

TIMES=()
step() { # step NAME CMD...: run CMD, record its duration
  local name="$1" start=$SECONDS rc=0
  shift
  echo
  echo "==> $name"
  "$@" || rc=$?
  TIMES+=("$(printf '%-14s %4ss' "$name" "$((SECONDS - start))")")
  if (( rc != 0 )); then
    if (( rc == 5 )); then echo "check: $name collected no tests" >&2; fi
    echo "check: $name failed (exit $rc)" >&2
    exit "$rc"
  fi
}

step "ruff check" "$PY" -m ruff check .
step "ruff format" "$PY" -m ruff format --check .
step "mypy" "$PY" -m mypy
step "imports" "$PY" scripts/check_imports.py
step "docs" env DOCS_PYTHON="$PY" scripts/docs.sh build
if (( QUICK )); then
  step "pytest quick" "$PY" -m pytest "${PARALLEL[@]}" -m quick
  echo
  echo "check: quick loop green (the whole check: scripts/check.sh)"
  printf '  %s\n' "${TIMES[@]}"
  exit 0
fi
# The real clients' environments (.interop/) are built here, before the suite, when node
# and npm are there: on a machine whose package caches are cold the build can take longer
# than one test may (its session fixture would build them inside a test's time limit).
# A failed build is not fatal here: the fixture then says why, and fails the run in CI.
if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
  step "interop envs" bash -c 'scripts/interop_envs.sh || echo "check: scripts/interop_envs.sh failed; the real-client tests will say why" >&2'
fi
step "pytest" "$PY" -m pytest "${PARALLEL[@]}"
if [[ "${CHECK_SKIP_LOWEST:-0}" != 1 ]]; then
  step "lowest fastmcp" env PYTHON3="${PYTHON3:-python3}" LOWEST_WORKERS="$WORKERS" scripts/lowest.sh
fi
step "conformance" scripts/conformance.sh

echo
echo "check: all green"
printf '  %s\n' "${TIMES[@]}"
