"""Instructions a request costs, counted by callgrind: `python -m bench.instructions`.

CPU time moves by 2-10 % from run to run on a shared machine, more than most single
changes move it. An instruction count moves less: valgrind's callgrind counts the
instructions a process executes (two runs of one code agreed within 0.5 % on the memory
store, about 1 % on SQLite and Redis, 2-11 % on PostgreSQL, whose periodic work depends
on timing). This bench counts them for the
front end's side of a task, against a plain call of the same tool, so that a change to
it can be judged in one run.

For each store (`--stores`) and each kind of request it starts
`bench.instructions_probe` under `valgrind --tool=callgrind --instr-atstart=no`: the
bench server (`bench.cpu_app`, `echo`), on a fresh store, served through its ASGI app in
that one process (no HTTP server: uvicorn's share is left out, and is the same for every
kind), running its tasks itself (`concurrency` 20), so a task's run is counted with the
request that made it. Instrumentation is on only while the probe answers `--requests`
requests (`callgrind_control -i on/off`). Kinds: `floor` (a method no server has),
`sync` (a plain `tools/call`), `create` (a task-creating `tools/call` and the task's
run, claim to history) and `get` (a `tasks/get` of a finished task). The table gives
thousands of instructions per request and a task's count, `create + get`, against a
sync call's. What it leaves out: the store server (Redis, PostgreSQL), and what a
separate worker process adds of its own (its feed, its claims across processes);
`bench.cpu` measures those, in CPU time.

Needs `valgrind` (with `callgrind_control`); a run takes about 2 minutes per store.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import server
from bench.instructions_probe import KINDS

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results" / "instructions.json"
TOTALS = re.compile(rb"^(?:summary|totals):\s+(\d+)", re.MULTILINE)


def wait_for(signals: Path, state: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 600
    while not (signals.exists() and signals.read_text() == state):
        if proc.poll() is not None:
            raise RuntimeError(f"the probe exited:\n{log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"the probe never said {state!r}")
        time.sleep(0.1)


def control(*args: str) -> None:
    subprocess.run(["callgrind_control", *args], check=True, capture_output=True, timeout=120)


def count(url: str, kind: str, n: int, tmp: Path) -> int:
    """Instructions the probe executed answering `n` requests of `kind` on `url`."""
    signals, out, log = tmp / f"{kind}.signal", tmp / f"{kind}.out", tmp / f"{kind}.log"
    env = {**os.environ, "BENCH_CPU_URL": url, "BENCH_CPU_CONCURRENCY": "20"}
    command = ["valgrind", "--tool=callgrind", "--instr-atstart=no"]
    command += [f"--callgrind-out-file={out}", sys.executable]
    command += ["-m", "bench.instructions_probe", kind, str(n), str(signals)]
    with open(log, "wb") as sink:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT)
    try:
        wait_for(signals, "ready", proc, log)
        pid = str(proc.pid)
        control("--zero", pid)
        control("--instr=on", pid)
        signals.with_name(f"{signals.name}.go").touch()
        wait_for(signals, "done", proc, log)
        control("--instr=off", pid)
        control("--dump", pid)
        signals.with_name(f"{signals.name}.stop").touch()
        proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    totals = [int(m) for f in tmp.glob(f"{out.name}*") for m in TOTALS.findall(f.read_bytes())]
    if not totals:
        raise RuntimeError(f"callgrind wrote no totals:\n{log.read_text()[-3000:]}")
    return max(totals)  # the dump made with instrumentation on holds the requests


async def measure(store: str, n: int) -> dict[str, Any]:
    """Thousands of instructions per request of every kind, on a fresh `store`."""
    row: dict[str, Any] = {"store": store, "requests": n}
    for kind in KINDS:
        async with server.store_url(store) as url:
            with tempfile.TemporaryDirectory(prefix="fastmcp-tasks-instr-") as tmp:
                total = await asyncio.to_thread(count, url, kind, n, Path(tmp))
        row[kind] = round(total / n / 1000)
    row["task"] = row["create"] + row["get"]
    row["ratio"] = round(row["task"] / row["sync"], 3)
    return row


def table(rows: list[dict[str, Any]]) -> str:
    head = "| store | floor | sync | create (with its run) | get | task (create + get) |"
    lines = [head + " task / sync |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        cells = [r["store"], *(f"{r[k]:,}" for k in (*KINDS, "task")), f"{r['ratio']:.3f}"]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines) + "\n\n(thousands of instructions per request)"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.instructions", description=__doc__)
    p.add_argument("--stores", default="memory,sqlite,redis,postgres")
    p.add_argument("--requests", type=int, default=200, help="requests of each kind")
    p.add_argument("--out", default=str(RESULTS))
    cfg = p.parse_args(argv)
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("bench.instructions needs valgrind (apt-get install valgrind)")
    rows = []
    for store in [s for s in cfg.stores.split(",") if s]:
        rows.append(asyncio.run(measure(store, cfg.requests)))
        print(f"  {rows[-1]}", file=sys.stderr)
    print(table(rows))
    out = Path(cfg.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"requests": cfg.requests, "rows": rows}, indent=1))
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
