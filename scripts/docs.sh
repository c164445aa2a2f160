#!/usr/bin/env bash
# The documentation site (MkDocs + Material, mkdocs.yml; pages in docs/).
#   scripts/docs.sh          serve it at http://127.0.0.1:8000/, rebuilt on every change
#   scripts/docs.sh build    build it strictly into site/ (what scripts/check.sh does)
# The `dev` extra installs MkDocs, Material and mkdocstrings.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${DOCS_PYTHON:-$ROOT/.venv/bin/python}"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export NO_MKDOCS_2_WARNING=1  # Material's banner about its successor
case "${1:-serve}" in
  serve) exec "$PY" -m mkdocs serve --strict ;;
  build) exec "$PY" -m mkdocs build --strict --site-dir "${DOCS_SITE_DIR:-$ROOT/site}" ;;
  *) echo "usage: scripts/docs.sh [serve|build]" >&2; exit 2 ;;
esac
