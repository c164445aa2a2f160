"""`bench.instructions` counts a request's instructions under callgrind.

One probe (three task-creating calls on the memory store, their runs included: about
30 s under valgrind) through the harness's own `count`, so the instrumentation toggling,
the probe's signals and the reading of callgrind's totals keep working; and the table's
arithmetic on fixed numbers.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bench import instructions


@pytest.mark.skipif(
    shutil.which("valgrind") is None or shutil.which("callgrind_control") is None,
    reason="VALGRIND NOT INSTALLED: bench.instructions was not run",
)
def test_a_probe_is_counted_only_while_it_answers(tmp_path: Path) -> None:
    three = instructions.count("memory://", "create", 3, tmp_path)
    # a creation and its run: hundreds of thousands of instructions at least, and far from
    # the hundreds of millions the interpreter's start-up and imports would add
    assert 3 * 300_000 < three < 3 * 30_000_000, three


def test_the_table_adds_up() -> None:
    row = {"store": "memory", "floor": 1700, "sync": 3600, "create": 4200, "get": 1700}
    row["task"] = row["create"] + row["get"]
    row["ratio"] = round(row["task"] / row["sync"], 3)
    table = instructions.table([row])
    assert "| memory | 1,700 | 3,600 | 4,200 | 1,700 | 5,900 | 1.639 |" in table
