"""`bench.cpu` (and `bench.cpu_growth`) run end to end, and the report adds up.

A tiny run (100 tasks, memory and SQLite, one worker: about 10 s) through the real command,
so the benchmark the docs quote keeps working; and the report's arithmetic on fixed
numbers: task = front end + workers + store server, the ratio to the sync call, the floor
(the sync call's work plus one more request) and how far above it the task is.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import cpu_report

ROOT = Path(__file__).resolve().parent.parent


def bench(module: str, args: list[str], out: Path) -> tuple[str, list[dict[str, Any]]]:
    """`python -m <module> <args> --out <out>` run as written: its stdout and JSON runs."""
    done = subprocess.run(
        [sys.executable, "-m", module, *args, "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout, json.loads(out.read_text())["runs"]


def test_a_tiny_run_measures_every_process_and_the_floor(tmp_path: Path) -> None:
    # 100 calls: enough CPU that /proc's 10 ms ticks see every phase even on a busy machine
    tiny = ["--tasks", "100", "--callers", "4", "--stores", "memory,sqlite", "--workers", "1"]
    stdout, runs = bench("bench.cpu", tiny, tmp_path / "cpu.json")
    assert [(r["store"], r["workers"]) for r in runs] == [("memory", 0), ("sqlite", 1)]
    for run in runs:
        assert run["sync_ms"] > 0 and run["task_ms"] > 0 and run["request_ms"] >= 0
        assert run["floor"] >= 1.0
        assert run["regets"] >= 0
    assert runs[0]["store_ops"] == 0  # the memory store makes no round trip
    assert runs[1]["store_ops"] > 0  # SQLite: transactions, reads and feed polls
    assert runs[1]["workers_ms"] > 0  # the worker process ran the tasks
    assert runs[1]["switches"] > 0  # SQLite's threads and the worker blocked at times
    assert "| sqlite | 1 |" in stdout and "floor" in stdout


def test_each_repeat_is_a_run_of_its_own(tmp_path: Path) -> None:
    tiny = ["--tasks", "100", "--callers", "4", "--stores", "memory", "--repeat", "2"]
    _, runs = bench("bench.cpu", tiny, tmp_path / "cpu.json")
    assert [(r["store"], r["workers"]) for r in runs] == [("memory", 0), ("memory", 0)]
    assert all(run["task_ms"] > 0 and run["store_ops"] == 0 for run in runs)


def test_the_report_adds_up() -> None:
    seconds = {"front_end": 2.0, "workers": [0.5, 0.25], "store_server": 0.25, "switches": 9000}
    tasks = {
        "total": seconds,
        "front_end_create": 1.25,
        "front_end_wait": 0.0,
        "front_end_get": 0.75,
        "create_p50_us": 900.0,
        "get_p50_us": 400.0,
        "regets": 0,
        "floor": 0.5,  # 1,000 cheapest requests: 0.5 ms each
        "store_operations": 4500,  # every process's store round trips over the phase
    }
    sync = {"front_end": 1.0, "workers": [0.0, 0.0], "store_server": 0.0, "switches": 50}
    run = cpu_report.per_task("redis", 2, 1000, sync, 800.0, tasks)
    assert run["task_ms"] == 3.0 and run["sync_ms"] == 1.0 and run["ratio"] == 3.0
    assert run["request_ms"] == 0.5 and run["floor"] == 1.5
    assert run["over_floor_ms"] == pytest.approx(1.5)
    assert run["each_worker_ms"] == [0.5, 0.25]
    assert run["store_ops"] == 4.5
    assert run["switches"] == 9.0 and run["sync_switches"] == 0.05
    merged = cpu_report.merge([{"a": 1.0, "b": [1.0], "x_ns": [1]}, {"a": 2.0, "b": [2.0]}])
    assert merged == {"a": 3.0, "b": [3.0], "x_ns": [1]}


def test_a_tiny_growth_run_measures_each_phase_with_what_it_retained(tmp_path: Path) -> None:
    tiny = ["--stores", "sqlite", "--phases", "2", "--seconds", "1", "--callers", "2"]
    stdout, phases = bench("bench.cpu_growth", tiny, tmp_path / "growth.json")
    assert [(p["store"], p["phase"]) for p in phases] == [("sqlite", 0), ("sqlite", 1)]
    assert 0 < phases[0]["retained"] < phases[1]["retained"]
    assert phases[1]["retained"] == phases[0]["retained"] + phases[1]["tasks"]
    for phase in phases:
        assert phase["front_end_ms"] > 0 and phase["worker_ms"] >= 0
        assert phase["task_ms"] == pytest.approx(
            phase["front_end_ms"] + phase["worker_ms"] + phase["store_server_ms"]
        )
    assert "| sqlite |" in stdout
