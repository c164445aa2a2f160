"""The CPU bench's numbers (`bench/cpu.py`): one run's CPU per task by process
(`per_task`, from the phases' sums: `merge`), its one-line summary (`line`), the
markdown table of all runs (`table`, median and range of each configuration's runs) and
the profiles of a `--profile` run (`write_profiles`: per role, the functions by own and
by cumulative time, per task).
"""

from __future__ import annotations

import pstats
import statistics
from pathlib import Path
from typing import Any

#: Task CPU / sync CPU the issue asks for, per store.
TARGETS = {"memory": 1.3, "sqlite": 2.0, "redis": 2.0, "postgres": 2.5}
#: Per-task CPU with the most workers at most this times that with one worker.
FLAT = 1.15


def merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The sum of phase results (numbers and lists element-wise; latency samples joined)."""
    out: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            if key.endswith("_ns"):
                out[key] = out.get(key, []) + value
            elif isinstance(value, dict):
                out[key] = merge([out.get(key, {}), value]) if key in out else dict(value)
            elif isinstance(value, list):
                old = out.get(key, [0.0] * len(value))
                out[key] = [a + b for a, b in zip(old, value, strict=True)]
            else:
                out[key] = out.get(key, 0) + value
    return out


def per_task(
    store: str,
    workers: int,
    n: int,
    sync: dict[str, Any],
    sync_p50_us: float,
    tasks: dict[str, Any],
) -> dict[str, Any]:
    """Milliseconds of CPU per task (per sync call for `sync_ms`) of one run."""
    total = tasks["total"]

    def ms(seconds: float) -> float:
        return round(seconds / n * 1000, 3)

    out: dict[str, Any] = {
        "store": store,
        "workers": workers,
        "tasks": n,
        "sync_ms": ms(sync["front_end"]),
        "sync_others_ms": ms(sum(sync["workers"]) + sync.get("store_server", 0.0)),
        "front_end_ms": ms(total["front_end"]),
        "front_end_create_ms": ms(tasks["front_end_create"]),
        "front_end_wait_ms": ms(tasks["front_end_wait"]),
        "front_end_get_ms": ms(tasks["front_end_get"]),
        "workers_ms": ms(sum(total["workers"])),
        "each_worker_ms": [ms(w) for w in total["workers"]],
        "store_server_ms": ms(total.get("store_server", 0.0)),
    }
    if "pg_backends" in total:
        out["pg_backends_ms"] = ms(total["pg_backends"])
        out["pg_background_ms"] = ms(total["pg_background"])
    out["task_ms"] = round(out["front_end_ms"] + out["workers_ms"] + out["store_server_ms"], 3)
    if out["sync_ms"] <= 0:  # /proc counts CPU in clock ticks (10 ms): too few calls
        raise ValueError(
            f"{store}: the sync phase used less CPU than /proc resolves; run more --tasks"
        )
    out["ratio"] = round(out["task_ms"] / out["sync_ms"], 2)
    # the least a task can cost over this transport: the work of the sync call plus one
    # more request (its `tasks/get`), at the cost of the cheapest request (`FLOOR_METHOD`)
    out["request_ms"] = ms(tasks["floor"])
    out["floor"] = round((out["sync_ms"] + out["request_ms"]) / out["sync_ms"], 2)
    out["over_floor_ms"] = round(out["task_ms"] - out["sync_ms"] - out["request_ms"], 3)
    out["sync_p50_us"] = sync_p50_us
    out["create_p50_us"] = tasks["create_p50_us"]
    out["get_p50_us"] = tasks["get_p50_us"]
    out["regets"] = tasks["regets"]
    out["store_ops"] = round(tasks["store_operations"] / n, 2)
    # blocking waits of the front end's and the workers' threads: per task, and per sync
    # call (the front end and the idle workers while the sync calls ran)
    out["switches"] = round(total["switches"] / n, 2)
    out["sync_switches"] = round(sync["switches"] / n, 2)
    return out


def line(run: dict[str, Any]) -> str:
    return (
        f"{run['store']} {run['workers']}w: task {run['task_ms']:.2f} ms "
        f"(front {run['front_end_ms']:.2f}, workers {run['workers_ms']:.2f}, "
        f"store {run['store_server_ms']:.2f}) / sync {run['sync_ms']:.2f} = {run['ratio']:.2f} "
        f"(floor {run['floor']:.2f}: a request {run['request_ms']:.2f} ms; "
        f"{run['over_floor_ms']:.2f} ms over it; {run['store_ops']:.2f} store round trips; "
        f"{run['switches']:.1f} context switches, a sync call {run['sync_switches']:.1f})"
    )


def _cell(values: list[float], digits: int = 2) -> str:
    mid = statistics.median(values)
    if len(values) == 1 or min(values) == max(values):
        return f"{mid:.{digits}f}"
    return f"{mid:.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def table(runs: list[dict[str, Any]]) -> str:
    """Markdown: one row per configuration (median, and the range over its runs)."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for run in runs:
        groups.setdefault((run["store"], run["workers"]), []).append(run)
    head = (
        "| store | workers | sync ms | request ms | front end ms (create + wait + get) "
        "| workers ms | store server ms | task ms | task / sync | floor | over floor ms "
        "| target | create p50 us | get p50 us | store round trips |"
    )
    rows = [head, "|" + "---|" * 15]
    for (store, workers), mine in groups.items():

        def col(key: str, mine: list[dict[str, Any]] = mine) -> list[float]:
            return [float(r[key]) for r in mine]

        front = (
            f"{_cell(col('front_end_ms'))} ({_cell(col('front_end_create_ms'))} + "
            f"{_cell(col('front_end_wait_ms'))} + {_cell(col('front_end_get_ms'))})"
        )
        ratio = statistics.median(col("ratio"))
        target = TARGETS.get(store)
        verdict = "" if target is None else f"<= {target} {'PASS' if ratio <= target else 'MISS'}"
        store_cell = _cell(col("store_server_ms")) if store in ("redis", "postgres") else "-"
        rows.append(
            f"| {store} | {workers or '-'} | {_cell(col('sync_ms'))} "
            f"| {_cell(col('request_ms'))} | {front} "
            f"| {_cell(col('workers_ms')) if workers else '-'} | {store_cell} "
            f"| {_cell(col('task_ms'))} | {_cell(col('ratio'))} | {_cell(col('floor'))} "
            f"| {_cell(col('over_floor_ms'))} | {verdict} "
            f"| {_cell(col('create_p50_us'), 0)} | {_cell(col('get_p50_us'), 0)} "
            f"| {_cell(col('store_ops'))} |"
        )
    flat = []
    for store in dict.fromkeys(s for s, _ in groups):
        counts = sorted(w for s, w in groups if s == store and w)
        if len(counts) > 1:
            few, many = groups[(store, counts[0])], groups[(store, counts[-1])]

            def grew(key: str, few: list[Any] = few, many: list[Any] = many) -> float:
                most = statistics.median(r[key] for r in many)
                return float(most / statistics.median(r[key] for r in few))

            ratio = grew("task_ms")
            ok = "PASS" if ratio <= FLAT else "MISS"
            flat.append(
                f"{store}: {counts[-1]} workers / {counts[0]} = {ratio:.2f} (<= {FLAT} {ok}; "
                f"the front end, whose work is the same: {grew('front_end_ms'):.2f}; store "
                f"round trips, which no core count moves: {grew('store_ops'):.2f})"
            )
    if flat:
        rows += [
            "",
            "Per-task CPU, most workers against one (and the front end's, whose work is "
            "the same in both: what sharing the cores with more processes, and noise, "
            "move): " + "; ".join(flat),
        ]
    return "\n".join(rows)


def write_profiles(directory: Path, label: str, n: int, top: int = 90) -> None:
    """Merge the `*.prof` files just written (by role) into `label-<role>.txt`: the
    functions by own time and by cumulative time, in microseconds and calls per task."""
    fresh = sorted(p for p in directory.glob("*.prof") if p.name.count("-") == 1)
    for role in ("front_end", "worker"):
        files = [p for p in fresh if p.name.startswith(role + "-")]
        if not files:
            continue
        stats = pstats.Stats(*(str(p) for p in files))
        entries = stats.stats  # type: ignore[attr-defined]
        out = [f"# {label} {role}: {len(files)} process(es), {n} tasks; us and calls per task"]
        for key, title in ((2, "own time"), (3, "cumulative time")):
            out += ["", f"## by {title}", "   own_us    cum_us   calls  function"]
            ranked = sorted(entries.items(), key=lambda kv: kv[1][key], reverse=True)
            for (file, lineno, func), (_, nc, tt, ct, _) in ranked[:top]:
                where = f"{Path(file).parent.name}/{Path(file).name}:{lineno}({func})"
                out.append(f"{tt / n * 1e6:9.1f} {ct / n * 1e6:9.1f} {nc / n:7.2f}  {where}")
        (directory / f"{label}-{role}.txt").write_text("\n".join(out) + "\n")
        for p in files:
            p.rename(directory / f"{label}-{p.name}")
