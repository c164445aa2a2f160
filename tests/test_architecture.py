"""The layout stays an architecture: no import cycles, no module over 400 lines.

The import graph is read with `ast`, so it sees every import a run could take:
module-level ones, imports inside functions (lazy), and `if TYPE_CHECKING:`
ones. Importing `a.b.c` also runs `a/__init__` and `a/b/__init__`, so those
packages are edges too, except the importer's own ancestors (they are already
being initialised when it runs; an explicit `from a.b import name` of an
ancestor is still an edge, and still a cycle when the ancestor imports back).
"""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "fastmcp_tasks"
MAX_LINES = 400


def _modules() -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _ancestors(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _resolve(importer: str, is_package: bool, level: int, module: str | None) -> str:
    if level == 0:
        return module or ""
    base = importer.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, *([module] if module else [])])


def _owner(name: str, modules: dict[str, Path]) -> str | None:
    """The module of ours that `name` (a dotted import target) lives in, if any."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph() -> dict[str, dict[str, int]]:
    """module -> {imported module: line of the first such import}, ours only."""
    modules = _modules()
    graph: dict[str, dict[str, int]] = {name: {} for name in modules}
    for importer, path in modules.items():
        is_package = path.name == "__init__.py"
        own = set(_ancestors(importer))
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(importer, is_package, node.level, node.module)
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    targets.append(sub if sub in modules else base)
            for target in targets:
                owner = _owner(target, modules)
                if owner is None:
                    continue
                implicit = [a for a in _ancestors(owner) if a in modules and a not in own]
                for dependency in [owner, *implicit]:
                    if dependency != importer:
                        graph[importer].setdefault(dependency, node.lineno)
    return graph


def find_cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One shortest cycle per strongly connected component (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    cycles = []
    for component in components:
        start, members = component[0], set(component)
        paths = {start: [start]}
        frontier = [start]
        while frontier and start not in {c for f in frontier for c in graph[f]}:
            nxt = []
            for node in frontier:
                for child in sorted(graph[node]):
                    if child in members and child not in paths:
                        paths[child] = [*paths[node], child]
                        nxt.append(child)
            frontier = nxt
        last = next(f for f in frontier if start in graph[f])
        cycles.append([*paths[last], start])
    return cycles


def test_the_import_graph_has_no_cycles() -> None:
    graph = import_graph()
    assert len(graph) > 40  # the walk found the package
    cycles = find_cycles(graph)
    shown = [
        " -> ".join(f"{a} (line {graph[a][b]})" for a, b in itertools.pairwise(cycle))
        + f" -> {cycle[-1]}"
        for cycle in cycles
    ]
    assert not cycles, "import cycles:\n" + "\n".join(shown)


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3, "d": 4}, "d": {}}
    assert find_cycles(graph) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": {"b": 1}, "b": {}}) == []


def test_no_module_is_over_400_lines() -> None:
    too_long = {
        str(path.relative_to(ROOT)): lines
        for folder in (PACKAGE, "bench")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if (lines := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert not too_long, f"modules over {MAX_LINES} lines: {too_long}"
