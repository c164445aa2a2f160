"""Where the suite's time goes: wall and CPU seconds per test, the child processes included.

A pytest plugin, off unless asked for:

    TEST_CPU_REPORT=/tmp/cpu python -m pytest -p tests.cpu_report [-n 4]
    python -m tests.cpu_report /tmp/cpu          # the table: by file, then the top tests

Each process (the serial run, or each xdist worker) appends one JSON line per test to
`<TEST_CPU_REPORT>.<worker>.jsonl`: its wall seconds (setup, call and teardown), the
CPU seconds of the pytest process, and those of the child processes it waited for in
that time (`RUSAGE_CHILDREN`: servers, workers, the CLI; a child still running when
the test ends is counted by the test that reaps it).
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections import defaultdict
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[Any]:
    target = os.environ.get("TEST_CPU_REPORT")
    if not target:
        return (yield)
    started = time.monotonic()
    own, children = _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN)
    try:
        return (yield)
    finally:
        line = {
            "test": item.nodeid,
            "wall": round(time.monotonic() - started, 3),
            "cpu": round(_cpu(resource.RUSAGE_SELF) - own, 3),
            "children": round(_cpu(resource.RUSAGE_CHILDREN) - children, 3),
        }
        worker = os.environ.get("PYTEST_XDIST_WORKER", "serial")
        with open(f"{target}.{worker}.jsonl", "a", encoding="utf-8") as out:
            out.write(json.dumps(line) + "\n")


def table(prefix: str, top: int = 30) -> str:
    """The report of the files `<prefix>.*.jsonl`: totals, per file, the top tests."""
    rows = [
        json.loads(line)
        for path in sorted(Path(prefix).parent.glob(Path(prefix).name + ".*.jsonl"))
        for line in path.read_text(encoding="utf-8").splitlines()
    ]
    files: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    for row in rows:
        total = files[row["test"].split("::")[0]]
        total[0] += 1
        total[1] += row["wall"]
        total[2] += row["cpu"]
        total[3] += row["children"]
    out = [
        f"{len(rows)} tests: wall {sum(r['wall'] for r in rows):.0f} s, CPU "
        f"{sum(r['cpu'] for r in rows):.0f} s in pytest + "
        f"{sum(r['children'] for r in rows):.0f} s in child processes",
        "",
        f"{'file':<52} {'tests':>5} {'wall s':>8} {'cpu s':>7} {'child s':>8}",
    ]
    by_cpu = sorted(files.items(), key=lambda kv: -kv[1][2] - kv[1][3])
    for name, (count, wall, cpu, child) in by_cpu:
        out.append(f"{name:<52} {count:>5.0f} {wall:>8.1f} {cpu:>7.1f} {child:>8.1f}")
    out += ["", f"top {top} tests by CPU (own + children):"]
    for row in sorted(rows, key=lambda r: -r["cpu"] - r["children"])[:top]:
        cpu = row["cpu"] + row["children"]
        out.append(f"{cpu:>7.1f} s  wall {row['wall']:>6.1f}  {row['test']}")
    return "\n".join(out)


if __name__ == "__main__":
    print(table(sys.argv[1]))
