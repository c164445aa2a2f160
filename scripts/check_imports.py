"""Every third-party package imported is declared in pyproject.toml.

The package (`fastmcp_tasks/`) may import only its `dependencies` (and, for the Redis
store, the `redis` extra; `fastmcp_tasks.testing`, the store contract, the `testing`
extra); the tests, examples and benchmarks may also use the `dev` extra. Imports are
read from the source (`ast`), so a lazy import inside a function counts too; a
top-level module is mapped to the distribution that provides it with
`importlib.metadata.packages_distributions()` of the running interpreter.

Usage: python scripts/check_imports.py   (exit 1 listing each undeclared import)
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIRST_PARTY = {"fastmcp_tasks", "tests", "bench", "examples", "conformance", "scripts"}
# the module a distribution ships under another distribution's name: `fastmcp` is a
# meta package whose code is the `fastmcp` module of `fastmcp-slim`
META = {"fastmcp-slim": "fastmcp"}
# (directory, the dependency groups its imports may come from); a subdirectory listed
# is checked on its own, not with its parent
SCOPES: list[tuple[str, tuple[str, ...]]] = [
    ("fastmcp_tasks", ("dependencies", "redis", "postgres")),
    ("fastmcp_tasks/testing", ("dependencies", "redis", "postgres", "testing")),
    ("tests", ("dependencies", "redis", "postgres", "dev")),
    ("examples", ("dependencies", "redis", "postgres", "dev")),
    ("bench", ("dependencies", "redis", "postgres", "dev")),
]


def _name(requirement: str) -> str:
    """The normalised distribution name of a requirement string (`"a_b[x]>=1"` -> `a-b`)."""
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement.strip())
    assert match, requirement
    return re.sub(r"[-_.]+", "-", match.group(0)).lower()


def declared() -> dict[str, set[str]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    groups = {"dependencies": {_name(r) for r in project["dependencies"]}}
    for extra, requirements in project.get("optional-dependencies", {}).items():
        groups[extra] = {_name(r) for r in requirements}
    return groups


def imported(directory: Path, skip: list[Path]) -> dict[str, list[str]]:
    """Top-level module -> the places (`file:line`) that import it."""
    found: dict[str, list[str]] = {}
    for path in sorted(directory.rglob("*.py")):
        if "node_modules" in path.parts or any(path.is_relative_to(s) for s in skip):
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            for module in modules:
                top = module.split(".")[0]
                where = f"{path.relative_to(ROOT)}:{node.lineno}"
                found.setdefault(top, []).append(where)
    return found


def main() -> int:
    groups = declared()
    providers = packages_distributions()
    stdlib = sys.stdlib_module_names
    problems: list[str] = []
    for directory, allowed in SCOPES:
        names = set().union(*(groups.get(group, set()) for group in allowed))
        skip = [ROOT / d for d, _ in SCOPES if d != directory and d.startswith(directory + "/")]
        for module, places in sorted(imported(ROOT / directory, skip).items()):
            if module in stdlib or module in FIRST_PARTY or module == "__future__":
                continue
            dists = {_name(d) for d in providers.get(module, [])}
            dists |= {META[d] for d in dists if d in META}
            if not dists:
                problems.append(f"{module}: not installed ({places[0]})")
            elif not dists & names:
                problems.append(
                    f"{module} (from {', '.join(sorted(dists))}) imported by {places[0]}"
                    f" is not declared in {' / '.join(allowed)}"
                )
    for problem in problems:
        print(f"check_imports: {problem}", file=sys.stderr)
    if problems:
        return 1
    print("check_imports: every third-party import is declared in pyproject.toml")
    return 0


if __name__ == "__main__":
    sys.exit(main())
