"""`Config`: every sample count and knob of a `bench.run` run (built from the command line
by `bench.run.config`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.server import STORES


@dataclass
class Config:
    warmup: int
    latency_samples: int
    get_samples: int
    get_ids: int
    retained_small: int
    retained_large: int
    throughput_calls: int
    concurrency: int
    poll_sleep_ms: float
    memory_tasks: int
    transports: list[str]
    input_rounds: int = 200
    push_tasks: int = 100
    poll_tasks: int = 20
    poll_transports: tuple[str, ...] = ("memory", "http")
    flood_updates: int = 10_000
    flood_runs: int = 3
    stores: list[str] = field(default_factory=lambda: list(STORES))
    store_transports: tuple[str, ...] = ("memory", "http")
    redis_skipped: str | None = None  # why the default run left Redis out
    postgres_skipped: str | None = None  # why the run left PostgreSQL out
    scaleout_tasks: int = 2000
    scaleout_sleep_ms: float = 50.0
    scaleout_transport: str = "memory"
    worker_concurrency: int = 10
    watch_batch: int = 100
    scaleout_observe: str = "poll"
    scaleout_pollers: int = 2
    scaleout_poll_ms: float = 20.0
    scaleout_order: tuple[int, ...] = (1, 2, 2, 1)

    def stores_for(self, kind: str) -> list[str]:
        """The stores of the latency, tasks/get and throughput phases on transport `kind`
        (outside `store_transports`: the memory store only, as before the store dimension)."""
        return self.stores if kind in self.store_transports else ["memory"]
