#!/usr/bin/env bash
# Run a representative subset of the suite on the lowest FastMCP release the package
# declares (the `fastmcp>=X` floor in pyproject.toml), in its own venv, .venv-lowest.
#
# The venv gets `fastmcp==<floor>` and the package's other dependencies (the `dev`
# extra included) from pyproject.toml; the repo itself is imported through PYTHONPATH.
# It is kept between runs and rebuilt only when pyproject.toml changes (a stamp file).
#
# Usage: scripts/lowest.sh [pytest args]   (default: the subset below, Redis and PostgreSQL left out)
# Environment: LOWEST_VENV (default .venv-lowest), PYTHON3 (the base interpreter),
# LOWEST_WORKERS (pytest-xdist workers for the subset, default 4).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${LOWEST_VENV:-$ROOT/.venv-lowest}"
BASE="${PYTHON3:-python3}"

FLOOR="$("$BASE" - <<'EOF'
import re, tomllib
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
floors = [m.group(1) for d in deps if (m := re.match(r"fastmcp\s*>=\s*([0-9][0-9.]*)", d))]
assert len(floors) == 1, f"no single 'fastmcp>=X' floor in {deps}"
print(floors[0])
EOF
)"
STAMP="$VENV/.fastmcp-tasks-stamp"
WANT="fastmcp==$FLOOR $(sha256sum pyproject.toml | cut -d' ' -f1)"

if [[ ! -f "$STAMP" || "$(cat "$STAMP")" != "$WANT" ]]; then
  echo "lowest: building $(basename "$VENV") with fastmcp==$FLOOR"
  rm -rf "$VENV"
  "$BASE" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
  # the editable install only records the dependencies; PYTHONPATH below wins anyway
  "$VENV/bin/python" -m pip install --quiet "fastmcp==$FLOOR" -e ".[dev]"
  echo "$WANT" >"$STAMP"
fi

HAVE="$("$VENV/bin/python" -c 'import fastmcp; print(fastmcp.__version__)')"
[[ "$HAVE" == "$FLOOR" ]] || { echo "lowest: $VENV has fastmcp $HAVE, not $FLOOR" >&2; exit 2; }
echo "lowest: FastMCP $HAVE (the declared floor)"

if (( $# == 0 )); then
  # result parity, the task modes, input_required, the lifecycle, durability across
  # restarts, the store contract and the engine's store faults, on memory and SQLite;
  # the seams of issue 14: mounts, the caller's identity, the client API, the proxy;
  # the 2025-11-25 surface (its result sieve, capabilities and raw params seams);
  # flow control, expired ids and related tasks (issue 16); idempotency keys, the client's
  # transport (FastMCP's default HTTP client seam), lost replies, the recorded run phase
  # and the configuration messages. The browser tests (tests/browser,
  # the dashboard in Chromium) are left out: they test our HTML, not FastMCP's seams.
  set -- tests/test_parity.py tests/test_modes.py tests/test_input.py \
    tests/test_lifecycle.py tests/test_durability.py tests/test_store_contract.py \
    tests/test_engine_faults.py tests/test_composition.py tests/test_composition_auth.py \
    tests/test_dropin_client.py tests/test_proxy.py tests/test_compat.py \
    tests/test_legacy.py tests/test_legacy_progress.py \
    tests/test_flow_control.py tests/test_flow_processes.py tests/test_store_flow.py \
    tests/test_expired.py tests/test_related.py \
    tests/test_idempotency.py tests/test_client_http.py tests/test_client_resend.py \
    tests/test_lost_replies.py tests/test_recorded_state.py tests/test_configuration.py \
    -k "not redis and not postgres" -q -p no:cacheprovider \
    -n "${LOWEST_WORKERS:-4}"
fi
PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" exec "$VENV/bin/python" -m pytest "$@"
