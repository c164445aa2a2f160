"""The table rows and ratios of a run (`Rows`), with the targets and the rows of the
store phases (metrics 1-3: `latency_rows`, `get_rows`, `throughput_rows`).

`bench.report` adds the other phases' rows and prints the table.
"""

from __future__ import annotations

from typing import Any

#: Per store, the target of `creation_p50/sync_p50` (none: info). PostgreSQL, a network
#: store like Redis, is held to Redis's targets.
CREATION_TARGETS: dict[str, tuple[str, float]] = {
    "memory": ("<=", 1.3),
    "redis": ("<=", 2.0),
    "postgres": ("<=", 2.0),
}
#: Per store, the target of `get_p50/sync_p50`; a store without one (SQLite) is
#: compared with the memory store's get instead (`<= 2.0`).
GET_TARGETS: dict[str, tuple[str, float]] = {
    "memory": ("<=", 0.6),
    "redis": ("<=", 1.5),
    "postgres": ("<=", 1.5),
}


def check(value: float, op: str, target: float) -> str:
    ok = value <= target if op == "<=" else value >= target
    return "PASS" if ok else "MISS"


def ratio_text(value: float) -> str:
    return f"{value:.2f}" if value >= 0.01 else f"{value:.1e}"


def on(store: str) -> str:
    """Row label prefix of a store's rows (none for the memory store)."""
    return "" if store == "memory" else f"{store} store: "


def prefix(store: str) -> str:
    """Ratio name prefix of a store's ratios (none for the memory store)."""
    return "" if store == "memory" else f"{store}_"


class Rows:
    """The table's rows (transport, metric, value, ratio, target, status) and the JSON's
    ratios (per transport: value, target, pass), both in the order they are added."""

    def __init__(self) -> None:
        self.ratios: dict[str, Any] = {}
        self.rows: list[tuple[str, ...]] = []

    def row(
        self,
        kind: str,
        metric: str,
        value: str,
        ratio: float | None = None,
        name: str = "",
        op: str = "",
        target: float | None = None,
    ) -> None:
        """A row; with a `ratio`, also the ratio `name` (informational without a `target`)."""
        if ratio is None:
            self.rows.append((kind, metric, value, "", "", ""))
            return
        if target is None:  # informational: no target, no verdict
            self.ratios.setdefault(kind, {})[name] = {"value": ratio, "target": None, "pass": None}
            self.rows.append((kind, metric, value, ratio_text(ratio), "", "info"))
            return
        self.ratios.setdefault(kind, {})[name] = {
            "value": ratio,
            "target": f"{op} {target}",
            "pass": check(ratio, op, target) == "PASS",
        }
        self.rows.append(
            (kind, metric, value, f"{ratio:.2f}", f"{op} {target}", check(ratio, op, target))
        )


# The memory store keeps the historical targets; another store's rows are labelled with
# it and carry info ratios, plus the targets against memory.


def latency_rows(t: Rows, kind: str, lat: dict[str, Any]) -> None:
    s = lat["sync"]
    t.row(kind, "sync tools/call p50 / p99", f"{s['p50_us']:.0f} / {s['p99_us']:.0f} us")
    for store, st in lat["stores"].items():
        c = st["create"]
        t.row(
            kind,
            f"{on(store)}task-creating tools/call p50 / p99",
            f"{c['p50_us']:.0f} / {c['p99_us']:.0f} us",
            c["p50_us"] / s["p50_us"],
            f"{prefix(store)}creation_p50/sync_p50",
            *CREATION_TARGETS.get(store, ()),
        )


def get_rows(t: Rows, kind: str, get: dict[str, Any]) -> None:
    ref = get["sync_reference"]
    base = ref["p50_us"]
    t.row(
        kind,
        "sync tools/call p50 / p99 (interleaved with gets)",
        f"{ref['p50_us']:.0f} / {ref['p99_us']:.0f} us",
    )
    memory = get["stores"].get("memory")
    for store, st in get["stores"].items():
        g1, g2, pre = st["small"], st["large"], prefix(store)
        for size, g in (("small", g1), ("large", g2)):
            label = f"{on(store)}tasks/get p50 / p99 ({st[f'retained_{size}']:,} retained)"
            value = f"{g['p50_us']:.0f} / {g['p99_us']:.0f} us"
            if store in GET_TARGETS:  # the target: against the same rounds' sync
                name = f"{pre}get_p50_{size}/sync_p50"
                t.row(kind, label, value, g["p50_us"] / base, name, *GET_TARGETS[store])
            elif memory is not None:  # the target: against the memory store
                t.row(
                    kind,
                    f"{label} / memory store's",
                    value,
                    g["p50_us"] / memory[size]["p50_us"],
                    f"{pre}get_p50_{size}/memory_get_p50_{size}",
                    "<=",
                    2.0,
                )
            else:
                t.row(kind, label, value, g["p50_us"] / base, f"{pre}get_p50_{size}/sync_p50")
        t.row(
            kind,
            f"{on(store)}tasks/get p50 large/small",
            "",
            g2["p50_us"] / g1["p50_us"],
            f"{pre}get_p50_large/get_p50_small",
            *(("<=", 1.1) if store == "memory" else ()),
        )


def throughput_rows(t: Rows, kind: str, thr: dict[str, Any]) -> None:
    t.row(
        kind,
        f"sync throughput ({thr['calls']} calls, {thr['concurrency']} callers)",
        f"{thr['sync_tps']:.0f} calls/s",
    )
    memory = thr["stores"].get("memory")
    for store, st in thr["stores"].items():
        pre = prefix(store)
        t.row(
            kind,
            f"{on(store)}task throughput (create+poll, {st['gets_per_task_mean']:.1f} gets/task)",
            f"{st['task_tps']:.0f} tasks/s",
            st["task_tps"] / thr["sync_tps"],
            f"{pre}task_tps/sync_tps",
            *((">=", 0.5) if store == "memory" else ()),
        )
    for store, st in thr["stores"].items():
        pre, label = prefix(store), f"{on(store)}task creation throughput (no polling)"
        value = f"{st['create_tps']:.0f} creates/s"
        if store != "memory" and memory is not None:
            t.row(
                kind,
                f"{label} / memory store's",
                value,
                st["create_tps"] / memory["create_tps"],
                f"{pre}create_tps/memory_create_tps",
                *((">=", 0.5) if store == "sqlite" else ()),
            )
        else:
            t.row(
                kind, label, value, st["create_tps"] / thr["sync_tps"], f"{pre}create_tps/sync_tps"
            )
