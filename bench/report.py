"""The report of a run: the rows of metrics 4-7 and of the scale-out (`input_rows`,
`push_rows`, `flood_rows`, `scaleout_rows`, `memory_rows`; metrics 1-3 in
`bench.report_rows`), `ratios_and_rows` (every row, in table order), `print_table`, the
notes printed under it (`print_notes`) and the `machine` block of the JSON (also used by
`bench.load` and `bench.idle`).
"""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any

from bench.config import Config
from bench.report_rows import Rows, check, get_rows, latency_rows, ratio_text, throughput_rows


def _git_head() -> str | None:
    root = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "fastmcp_tasks"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip() + ("+dirty" if dirty else "")


def machine() -> dict[str, Any]:
    from importlib.metadata import version

    import fastmcp

    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "fastmcp": fastmcp.__version__,
        "mcp": version("mcp"),
        "fastmcp_tasks": version("fastmcp-tasks"),
        "fastmcp_tasks_commit": _git_head(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
    }


def input_rows(t: Rows, kind: str, inp: dict[str, Any]) -> None:
    ref, applied, resumed = inp["sync_reference"], inp["applied"], inp["next_key"]
    t.row(
        kind,
        "sync tools/call p50 / p99 (interleaved with updates)",
        f"{ref['p50_us']:.0f} / {ref['p99_us']:.0f} us",
    )
    t.row(
        kind,
        f"input: tasks/update -> resumed p50 / p99 ({inp['rounds']} rounds, "
        f"{inp['gets_per_round_mean']:.1f} gets)",
        f"{applied['p50_us']:.0f} / {applied['p99_us']:.0f} us",
        applied["p50_us"] / ref["p50_us"],
        "input_applied_p50/sync_p50",
    )
    if resumed != applied:  # the first get did not already show the next key
        t.row(
            kind,
            "input: tasks/update -> parked on next key p50 / p99",
            f"{resumed['p50_us']:.0f} / {resumed['p99_us']:.0f} us",
            resumed["p50_us"] / ref["p50_us"],
            "input_next_key_p50/sync_p50",
        )


def push_rows(t: Rows, kind: str, push: dict[str, Any]) -> None:
    p = push["push"]
    t.row(
        kind,
        f"push: completion -> listen frame p50 / p99 ({p['n']} tasks)",
        f"{p['p50_us']:.0f} / {p['p99_us']:.0f} us",
    )
    poll = push.get("poll")
    if poll:
        t.row(
            kind,
            f"poll every {poll['poll_interval_ms']} ms: completion -> tasks/get "
            f"p50 / p99 ({poll['tasks']} tasks)",
            f"{poll['p50_us'] / 1000:.0f} / {poll['p99_us'] / 1000:.0f} ms",
            p["p50_us"] / poll["p50_us"],
            "push_p50/poll_p50",
        )


def flood_rows(t: Rows, kind: str, flood: dict[str, Any]) -> None:
    frames, n = flood["frames_max"], flood["updates"]
    last_ok = flood["last_statuses"] == ["completed"]
    verdict = "PASS" if frames / n <= 0.1 and last_ok else "MISS"
    t.ratios.setdefault(kind, {})["flood_frames/updates"] = {
        "value": frames / n,
        "target": "<= 0.1 and last frame completed",
        "pass": verdict == "PASS",
    }
    t.rows.append(
        (
            kind,
            f"flood: frames to 1 subscriber for {n:,} messages (max run)",
            f"{frames} = {flood['frames_active_of_max']} working + "
            f"{flood['frames_terminal_of_max']} terminal"
            + ("" if last_ok else f"; last: {'/'.join(flood['last_statuses'])}"),
            ratio_text(frames / n),
            "<= 0.1",
            verdict,
        )
    )
    t.row(
        kind,
        "flood, subscribed: tool done / 1st completed frame / stream end",
        f"{flood['subscribed_tool_s'] * 1000:.0f} / "
        f"{flood['subscribed_observed_s'] * 1000:.0f} / "
        f"{flood['subscribed_stream_end_s'] * 1000:.0f} ms",
    )
    t.row(
        kind,
        "flood, no subscriber: tool done (subscribed/unsubscribed)",
        f"{flood['unsubscribed_tool_s'] * 1000:.0f} ms",
        flood["subscribed_tool_s"] / flood["unsubscribed_tool_s"],
        "flood_tool_s_subscribed/unsubscribed",
    )
    t.row(
        kind,
        "flood: traced peak growth while subscriber reads (whole process)",
        f"{flood['traced_peak_kib']:.0f} KiB "
        f"(no subscriber: {flood['traced_peak_kib_no_subscriber']:.0f} KiB)",
    )


def scaleout_rows(t: Rows, so: dict[str, Any]) -> None:
    kind, one, two = so["transport"], so["one_worker"], so["two_workers"]
    ceiling = so["ceiling_tps_per_worker"]
    store = so.get("store", "redis")
    t.row(
        kind,
        f"{store} scale-out: ceiling per worker ({so['worker_concurrency']} slots x "
        f"1/{so['sleep_ms']:g} ms)",
        f"{ceiling:.0f} tasks/s",
    )
    t.row(
        kind,
        f"{store} scale-out, 1 worker ({one['tasks']:,} tasks): first create -> last "
        "completed / ceiling",
        f"{one['tps']:.0f} tasks/s",
        one["tps"] / ceiling,
        f"{store}_scaleout_1w_tps/ceiling",
    )
    t.row(
        kind,
        f"{store} scale-out, 2 workers ({two['tasks']:,} tasks) / 1 worker",
        f"{two['tps']:.0f} tasks/s",
        two["tps"] / one["tps"],
        f"{store}_scaleout_2w_tps/1w_tps",
        ">=",
        1.7,
    )
    budget = cpu_budget(so)
    if budget is None:
        return
    per_task = ", ".join(f"{name} {ms:.1f}" for name, ms in budget["ms_per_task"].items())
    t.row(
        kind,
        f"{store} scale-out, 2 workers: CPU ms per task ({per_task}); busy / "
        f"{budget['cores']} cores",
        f"{budget['total_ms_per_task']:.1f} ms",
        budget["busy"],
        f"{store}_scaleout_2w_cpu_busy",
    )
    t.row(
        kind,
        f"{store} scale-out: what {budget['cores']} cores allow at that CPU per task / 1 worker "
        "(under 1.7: at this CPU per task these cores cannot give 1.7x)",
        f"{budget['ceiling_tps']:.0f} tasks/s",
        budget["ceiling_tps"] / one["tps"],
        f"{store}_scaleout_cpu_ceiling/1w_tps",
    )


def cpu_budget(so: dict[str, Any]) -> dict[str, Any] | None:
    """What the 2-worker runs cost in CPU: milliseconds per task of each process kind
    (front end, workers, the store's server), how busy the cores were while the clock
    ran, and the throughput the cores allow at that cost (every core busy)."""
    runs = [r for r in so["runs"] if r["workers"] == 2 and r.get("cpu_seconds")]
    if not runs:
        return None
    cores = os.cpu_count() or 1
    tasks = sum(r["tasks"] for r in runs)
    seconds = sum(r["seconds"] for r in runs)
    kinds: dict[str, float] = {}
    for run in runs:
        for name, cpu in run["cpu_seconds"].items():
            kind = "workers" if name.startswith("worker_") else name
            kinds[kind] = kinds.get(kind, 0.0) + cpu
    total = sum(kinds.values())
    return {
        "cores": cores,
        "ms_per_task": {name: cpu * 1000 / tasks for name, cpu in kinds.items()},
        "total_ms_per_task": total * 1000 / tasks,
        "busy": total / (seconds * cores),
        "ceiling_tps": cores * tasks / total,
    }


def memory_rows(t: Rows, mem: dict[str, Any]) -> None:
    value = mem["kib_per_task"]
    t.ratios.setdefault("memory", {})["kib_per_task"] = {
        "value": value,
        "target": "<= 2",
        "pass": value <= 2,
    }
    t.rows.append(
        (
            "memory",
            f"RSS growth per retained task ({mem['tasks']:,} tasks)",
            f"{value:.2f} KiB/task",
            f"{value:.2f}",
            "<= 2",
            check(value, "<=", 2),
        )
    )


def ratios_and_rows(results: dict[str, Any]) -> tuple[dict[str, Any], list[tuple[str, ...]]]:
    """Every ratio (for the JSON) and every table row of `results`, in table order."""
    t = Rows()
    for kind, r in results["transports"].items():
        for name, rows in (
            ("latency", latency_rows),
            ("get", get_rows),
            ("throughput", throughput_rows),
            ("input", input_rows),
            ("push", push_rows),
            ("flood", flood_rows),
        ):
            if r.get(name):
                rows(t, kind, r[name])
    for key in ("scaleout", "postgres_scaleout"):
        if results.get(key):
            scaleout_rows(t, results[key])
    if results.get("memory"):
        memory_rows(t, results["memory"])
    return t.ratios, t.rows


def print_table(rows: list[tuple[str, ...]]) -> None:
    header = ("transport", "metric", "value", "ratio", "target", "status")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    line = "  ".join("-" * w for w in widths)
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    print(line)
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


def skipped_lines(cfg: Config) -> list[str]:
    """One loud line per store the run left out, with the reason."""
    lines = []
    if cfg.redis_skipped:
        lines.append(
            f"*** SKIPPED: the Redis store and the scale-out phase: {cfg.redis_skipped}; "
            "start Redis or pass --redis-url ***"
        )
    if cfg.postgres_skipped:
        lines.append(
            "*** SKIPPED: the PostgreSQL store and its scale-out phase: "
            f"{cfg.postgres_skipped}; start PostgreSQL or pass --postgres-url ***"
        )
    return lines


def print_notes(
    cfg: Config, results: dict[str, Any], http_client: str, total_seconds: float, output: Path
) -> None:
    """What the table's numbers are, printed under it."""
    polling = f"every {cfg.poll_sleep_ms} ms" if cfg.poll_sleep_ms else "in a tight loop (no sleep)"
    print("Latency and tasks/get: one sequential caller, samples interleaved; the get ratios use")
    print("the sync p50 measured interleaved with the gets. Client and server share one process.")
    print(f"HTTP client: {http_client}. Task throughput polls tasks/get {polling}.")
    print("Memory: in-memory transport only, measured in a fresh interpreter.")
    if cfg.stores != ["memory"]:
        on = ",".join(t for t in cfg.transports if t in cfg.store_transports) or "no transport"
        print(f"Stores {','.join(cfg.stores)} on {on}: latency, tasks/get and throughput (a server")
        print("per store, all up at once, samples interleaved; SQLite: a fresh temp file each;")
        print("Redis: a fresh key prefix each, its keys deleted afterwards; PostgreSQL: a fresh")
        print("schema each, dropped afterwards).")
        print("Input, push, flood and memory: memory store only.")
    print("Input, push and flood: see bench/README.md; 'info' ratios have no target.")
    for so in (results.get("scaleout"), results.get("postgres_scaleout")):
        if not so:
            continue
        on = "PostgreSQL" if so.get("store") == "postgres" else "Redis"
        print(
            f"Scale-out: {so['tasks']:,} tasks of `await anyio.sleep({so['sleep_ms'] / 1000:g})` "
            f"through a concurrency=0 front end ({so['transport']} transport) on {on}, run by"
        )
        print(
            "worker processes (python -m fastmcp_tasks worker bench/redis_app.py:mcp "
            f"--concurrency {so['worker_concurrency']}); runs of "
            f"{','.join(map(str, so['order']))} workers;"
        )
        print(f"clock: first create -> last completion seen by {so['observed_by']}.")
    for line in skipped_lines(cfg):
        print(line)
    print(f"Total {total_seconds} s; JSON written to {output}")
