#!/usr/bin/env bash
# Build the environments of the real 2025-11-25 clients that tests/test_legacy_clients.py
# drives against our server: each installed from its registry, never vendored.
#
#   .interop/fastmcp3   a venv with FastMCP 3's Python client (plain `fastmcp`, no extras)
#   .interop/mcp1       a venv with the `mcp` 1.x Python SDK (its experimental tasks client)
#   .interop/ts         `npm install` of tests/interop/ts/package.json (the TypeScript SDK 1.x)
#
# Each is kept between runs and rebuilt only when its pinned versions change (a stamp
# file in it); the versions below are the ones the tests were written against.
#
# Usage: scripts/interop_envs.sh [fastmcp3|mcp1|ts ...]   (default: all three)
# Environment: INTEROP_DIR (default .interop), PYTHON3 (the base interpreter).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
DIR="${INTEROP_DIR:-$ROOT/.interop}"
BASE="${PYTHON3:-python3}"

FASTMCP3_PINS="fastmcp==3.4.11"
MCP1_PINS="mcp==1.30.0"
TS_PACKAGE="$ROOT/tests/interop/ts/package.json"  # pins @modelcontextprotocol/sdk exactly

fresh() {  # fresh DIR WANT: is DIR built from WANT already?
  [[ -f "$1/.interop-stamp" && "$(cat "$1/.interop-stamp")" == "$2" ]]
}

python_env() {  # python_env NAME PINS...
  local name="$1" venv="$DIR/$1"
  shift
  local want="$* $("$BASE" -c 'import sys; print(sys.version.split()[0])')"
  fresh "$venv" "$want" && return 0
  echo "interop: building $name ($*)"
  rm -rf "$venv"
  "$BASE" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$@"
  echo "$want" >"$venv/.interop-stamp"
}

ts_env() {
  local target="$DIR/ts"
  local want
  want="$(sha256sum "$TS_PACKAGE" | cut -d' ' -f1) node $(node --version)"
  fresh "$target" "$want" && return 0
  echo "interop: building ts ($(grep -o '"@modelcontextprotocol/sdk": "[^"]*"' "$TS_PACKAGE"))"
  rm -rf "$target"
  mkdir -p "$target"
  cp "$TS_PACKAGE" "$target/package.json"
  npm install --prefix "$target" --no-audit --no-fund --loglevel=error >/dev/null
  echo "$want" >"$target/.interop-stamp"
}

(( $# )) || set -- fastmcp3 mcp1 ts
mkdir -p "$DIR"
# one build at a time: parallel test runs (or two checkouts sharing INTEROP_DIR) wait here
exec 9>"$DIR/.lock"
flock 9
for env in "$@"; do
  case "$env" in
    fastmcp3) python_env fastmcp3 $FASTMCP3_PINS ;;
    mcp1) python_env mcp1 $MCP1_PINS ;;
    ts) ts_env ;;
    *) echo "interop: unknown environment $env" >&2; exit 2 ;;
  esac
done
echo "interop: ready in $DIR ($*)"
