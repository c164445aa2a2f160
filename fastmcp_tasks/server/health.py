"""The engine's health: is the store reachable, since when not, which loops are alive.

One `HealthMonitor` per extension collects what every store call and every
supervised loop reports, and turns it into what operators need:

- one WARNING when the store becomes unreachable (with the store's own error,
  which may name hosts and paths: the server log is the place for those, never a
  client), DEBUG for each further failure of the same outage, one WARNING when it
  answers again with how long the outage lasted and how many calls failed (a
  store that flaps, failing again within `QUIET_AFTER` seconds of answering, is
  logged at DEBUG until it has been quiet that long, so one failing operation
  among succeeding ones does not flood the log);
- the same once-per-streak logging for a background loop that fails with
  something other than a store error (a bug), with its traceback; a
  `ConfigurationError` (a store that opens late, after a degraded start, and is
  then found misconfigured: a database that does not exist) is logged as its
  message alone, since it says what to fix;
- metrics `fastmcp_tasks.store.errors` (counter, attribute `operation`) and
  `fastmcp_tasks.engine.degraded` (up-down counter: 1 while the store is
  unreachable, 0 otherwise);
- one WARNING when tasks of the application wait and no live worker can run their
  tool (`no_workers`, from the check in `engine.staffing`), and one when workers are
  back; `EngineHealth.no_worker` says which tools and how many tasks meanwhile;
- `snapshot()`: an `EngineHealth` for `TasksExtension.health()`.

The store is named by its description (`stores.urls.describe`: its masked URL and
prefix or schema, never a password), the same in every log line of every store.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from opentelemetry import metrics

from fastmcp_tasks.errors import ConfigurationError, StoreError

logger = logging.getLogger("fastmcp_tasks.health")

_meter = metrics.get_meter("fastmcp_tasks")
store_errors = _meter.create_counter(
    "fastmcp_tasks.store.errors", description="store calls that failed (StoreError or timeout)"
)
degraded_gauge = _meter.create_up_down_counter(
    "fastmcp_tasks.engine.degraded", description="1 while the task store is unreachable"
)

#: Seconds after an outage during which a new one is logged at DEBUG (a flapping store).
QUIET_AFTER = 60.0

HealthStatus = Literal["starting", "ok", "degraded", "stopped"]


@dataclass(frozen=True)
class EngineHealth:
    """What `TasksExtension.health()` reports.

    Attributes:
        status: `starting` (the store has not answered yet), `ok`, `degraded` (the
            store is failing; task calls answer "Task store unavailable" meanwhile)
            or `stopped` (the server lifespan is not running).
        store_reachable: whether the last store call succeeded.
        degraded_since: epoch seconds when the current outage began (`None`: none).
        last_error: the last store or loop error seen, for the operator.
        loops: each background loop of the engine and whether it is running.
        pending_outcomes: finished tasks whose outcome waits for the store to be written.
        store_errors: store calls that failed since the server started.
        no_worker: tasks of this application that wait while no live worker can run
            their tool, by tool (checked on a `concurrency=0` front end; empty: none).
    """

    status: HealthStatus
    store_reachable: bool
    degraded_since: float | None
    last_error: str | None
    loops: dict[str, bool] = field(default_factory=dict)
    pending_outcomes: int = 0
    store_errors: int = 0
    no_worker: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class HealthMonitor:
    """Collects store outcomes and loop states; logs each outage once."""

    def __init__(self, store: str = "") -> None:
        #: The store as it describes itself (`stores.urls.describe`: never a password).
        self.store = store
        self.label = f"task store {store}" if store else "task store"
        self.opened = False
        self.running = False
        self.degraded_since: float | None = None
        self.last_error: str | None = None
        self.errors = 0
        self._outage_errors = 0
        self._recovered_at = -QUIET_AFTER
        self._loops: dict[str, bool] = {}
        self._failing_loops: set[str] = set()
        self.no_worker: dict[str, int] = {}

    # --- the store ----------------------------------------------------------------

    def store_failed(self, operation: str, error: BaseException) -> None:
        """A store call failed (StoreError or timeout)."""
        self.errors += 1
        self._outage_errors += 1
        self.last_error = f"{operation}: {error}"
        store_errors.add(1, {"operation": operation})
        if self.degraded_since is None:
            self.degraded_since = time.time()
            degraded_gauge.add(1)
            flapping = time.monotonic() - self._recovered_at < QUIET_AFTER
            logger.log(
                logging.DEBUG if flapping else logging.WARNING,
                "%s unavailable (%s failed: %s); task calls answer 'Task store "
                "unavailable' and the engine retries with backoff until it answers",
                self.label,
                operation,
                error,
            )
        else:
            logger.debug("%s still unavailable (%s): %s", self.label, operation, error)

    def store_ok(self) -> None:
        """A store call succeeded: ends an outage if there was one."""
        if self.degraded_since is None:
            return
        lasted = time.time() - self.degraded_since
        flapping = time.monotonic() - self._recovered_at < QUIET_AFTER
        self._recovered_at = time.monotonic()
        logger.log(
            logging.DEBUG if flapping else logging.WARNING,
            "%s reachable again after %.1f s (%d failed calls); resuming",
            self.label,
            lasted,
            self._outage_errors,
        )
        self.degraded_since = None
        self._outage_errors = 0
        degraded_gauge.add(-1)

    # --- loops --------------------------------------------------------------------

    def loop_running(self, name: str) -> None:
        self._loops[name] = True

    def loop_stopped(self, name: str) -> None:
        self._loops[name] = False
        self._failing_loops.discard(name)

    def loop_failed(self, name: str, error: BaseException) -> None:
        """A supervised loop raised; store errors count as an outage, others as a bug."""
        if isinstance(error, StoreError):
            self.store_failed(f"loop {name}", error)
            return
        self.last_error = f"loop {name}: {type(error).__name__}: {error}"
        if name in self._failing_loops:
            logger.debug("engine loop %r failed again: %r", name, error)
            return
        self._failing_loops.add(name)
        if isinstance(error, ConfigurationError):  # a store found misconfigured when it opens
            logger.error(
                "%s: %s; the engine retries with backoff until it is fixed", self.label, error
            )
            return
        logger.error("engine loop %r failed; restarting it with backoff", name, exc_info=error)

    def loop_ok(self, name: str) -> None:
        """A supervised loop made progress: its failure streak (if any) is over."""
        if name in self._failing_loops:
            self._failing_loops.discard(name)
            logger.warning("engine loop %r works again", name)

    # --- workers -------------------------------------------------------------------

    def no_workers(self, app: str | None, waiting: dict[str, int]) -> None:
        """What the last check found: tasks waiting, by tool, that no live worker can run."""
        new = sorted(set(waiting) - set(self.no_worker))
        if new:  # an episode begins, or another tool joins it: once each
            count = sum(waiting[tool] for tool in new)
            logger.warning(
                "%d task%s of app %r (%s %s) wait and no live worker can run them; start "
                "`fastmcp-tasks worker` for this server, or check that its workers reach the "
                "task store",
                count,
                "" if count == 1 else "s",
                app,
                "tool" if len(new) == 1 else "tools",
                ", ".join(repr(tool) for tool in new),
            )
        elif self.no_worker and not waiting:
            logger.warning(
                "Tasks of app %r no longer wait without a live worker (%s)",
                app,
                ", ".join(repr(tool) for tool in sorted(self.no_worker)),
            )
        self.no_worker = dict(waiting)

    # --- the report ---------------------------------------------------------------

    def snapshot(self, pending_outcomes: int = 0) -> EngineHealth:
        if not self.running:
            status: HealthStatus = "stopped"
        elif self.degraded_since is not None:
            status = "degraded"
        elif not self.opened:
            status = "starting"
        else:
            status = "ok"
        return EngineHealth(
            status=status,
            store_reachable=self.opened and self.degraded_since is None,
            degraded_since=self.degraded_since,
            last_error=self.last_error,
            loops=dict(self._loops),
            pending_outcomes=pending_outcomes,
            store_errors=self.errors,
            no_worker=dict(self.no_worker),
        )
