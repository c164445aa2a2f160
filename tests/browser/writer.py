"""A burst of store writes from another process, for the dashboard's load check.

    python tests/browser/writer.py --url STORE_URL --ids FILE [--rate 1000] [--seconds 10]

Writes `--rate` changes a second for `--seconds` seconds to the active tasks listed in
FILE (one id a line), through the store API: `set_status_message` with a new message,
and every 50th change a `transition` of a task to `completed` (it leaves the pool).
Changes are paced in 20 ms ticks, each tick's writes issued concurrently. Prints
`burst started <epoch>` when the first write goes out, then one JSON line:
`{"writes": N, "transitions": N, "seconds": S, "rate": N/S}`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import anyio

from fastmcp_tasks import store_from_url

TICK = 0.02


async def burst(url: str, ids: list[str], rate: float, seconds: float) -> dict[str, float]:
    store = store_from_url(url)
    await store.open()
    pool, writes, transitions = list(ids), 0, 0
    try:
        print(f"burst started {time.time()!r}", flush=True)
        start = time.monotonic()
        while (elapsed := time.monotonic() - start) < seconds:
            due = int(rate * min(elapsed + TICK, seconds)) - writes
            async with anyio.create_task_group() as group:
                for n in range(writes, writes + due):
                    task_id = pool[n % len(pool)]
                    if n % 50 == 49 and len(pool) > 100:
                        pool.remove(task_id)
                        result = {"content": [{"type": "text", "text": f"done in burst {n}"}]}
                        group.start_soon(
                            lambda t=task_id, r=result: store.transition(t, "completed", result=r)
                        )
                        transitions += 1
                    else:
                        group.start_soon(store.set_status_message, task_id, f"burst step {n}")
            writes += due
            await anyio.sleep(max(0.0, start + elapsed + TICK - time.monotonic()))
        took = time.monotonic() - start
    finally:
        await store.close()
    return {"writes": writes, "transitions": transitions, "seconds": took, "rate": writes / took}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--ids", required=True)
    parser.add_argument("--rate", type=float, default=1000)
    parser.add_argument("--seconds", type=float, default=10)
    args = parser.parse_args()
    ids = Path(args.ids).read_text().split()
    print(json.dumps(anyio.run(burst, args.url, ids, args.rate, args.seconds)), flush=True)


if __name__ == "__main__":
    main()
