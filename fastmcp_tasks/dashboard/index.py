"""The dashboard's in-memory index of every retained task: slim summaries, sorted, counted.

`TaskIndex` keeps one `TaskSummary` per task of a `ListableTaskStore`, in two parallel
lists sorted by page key `(created_at, task_id)` ascending (the newest last; `bisect`
finds a cursor), with per-outcome (the status, or `error` for a tool error: a
`completed` task counts as `error` or `completed`, never both), per-tool and per-owner
counters kept as summaries
come and go, and the active tasks apart (their `queued` / `running` state depends on
the time a lease runs out, so it is counted when asked).

How it stays current (the hub in `live.py` drives it):

- `load()` reads the store once, page by page, yielding to the event loop every 1,000
  tasks; until it finishes, `page()` lists straight from the store;
- `refresh(ids)` re-reads the tasks the change feed named (`base.get_many`); a task the
  index has not seen yet (created, then changed before a poll found it) is added;
- `poll_new()` finds tasks created since (creating a task emits no change): it lists
  the active statuses newest first, cheap on every store, until it meets known ids;
- `reload()` rescans, dropping tasks gone without a change (purge, expiry); refreshes
  and polls may run while it does (the hub runs it beside them).

Each of these returns what it changed (`Change`: a new summary, or `Gone` with the
last summary of a task removed), for the hub to publish.

A record applies only when it is not older than what the index holds (`updated_at`,
and a terminal task never goes back to active), so a slow page cannot undo a refresh,
and a task removed while a scan runs is not brought back by the scan's later pages.
"""

from __future__ import annotations

import operator
import time
from bisect import bisect_left, bisect_right, insort
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import anyio
import anyio.lowlevel

from fastmcp_tasks.dashboard.summary import (
    MAX_LIMIT,
    Change,
    Gone,
    TaskPage,
    TaskQuery,
    TaskSummary,
    before_text,
    iso,
    parse_before,
)
from fastmcp_tasks.stores.base import TaskRecord, get_many
from fastmcp_tasks.stores.listing import MAX_PAGE, ListableTaskStore, PageKey
from fastmcp_tasks.stores.outcomes import OUTCOMES
from fastmcp_tasks.wire.names import ACTIVE_STATUSES, TERMINAL_STATUSES

#: Records pulled from the store for one page while the index loads (tool / prefix filters).
STORE_SCAN_LIMIT = 20_000
#: How far back (seconds) `poll_new` looks past the newest task it knew (clock skew).
POLL_SKEW = 60.0
_STATES = ("queued", "running", "parked")
_key = operator.attrgetter("created_at", "task_id")


class TaskIndex:
    """Every retained task of `store` as a `TaskSummary`, newest first (see the module)."""

    def __init__(
        self,
        store: ListableTaskStore,
        *,
        clock: Callable[[], float] = time.time,
        page_size: int = MAX_PAGE,
        poll_page: int = 500,
    ) -> None:
        self.store = store
        self.clock = clock
        self.page_size = page_size  # tasks per `list_tasks` call of a (re)load
        self.poll_page = poll_page  # tasks per `list_tasks` call of `poll_new`
        self.loaded = False
        #: Goes up with every change applied (caches key on it).
        self.version = 0
        self._by_id: dict[str, TaskSummary] = {}
        self._rows: list[TaskSummary] = []  # by page key, ascending: the newest last
        self._active: dict[str, TaskSummary] = {}
        self._counts: Counter[str] = Counter()
        self._tools: Counter[str] = Counter()
        self._owners: Counter[str] = Counter()
        self._gone: set[str] = set()  # removed while a scan runs: its pages may hold them
        self._touched: set[str] = set()  # applied by refresh / poll while a scan runs
        self._scan_lock = anyio.Lock()
        self._matching: dict[tuple[Any, ...], tuple[int, int]] = {}

    # --- reading -------------------------------------------------------------------

    def get(self, task_id: str) -> TaskSummary | None:
        return self._by_id.get(task_id)

    def __len__(self) -> int:
        return len(self._by_id)

    def summaries(self) -> Iterable[TaskSummary]:
        """Every summary, newest first (a copy: safe across awaits)."""
        return self._rows[::-1]

    def active(self) -> list[TaskSummary]:
        """The summaries of the active tasks (cheap: kept apart)."""
        return list(self._active.values())

    def counts(self) -> dict[str, int]:
        """Tasks by outcome (every status, `completed` without the tool errors, and `error`,
        0 included) plus `queued`, `running`, `parked`."""
        counts = {outcome: self._counts[outcome] for outcome in sorted(OUTCOMES)}
        now = self.clock()
        states = Counter(s.state_at(now) for s in self._active.values())
        counts.update({state: states[state] for state in _STATES})
        return counts

    def tools(self) -> list[str]:
        return sorted(self._tools)

    def owners(self) -> list[str]:
        return sorted(self._owners)

    async def page(self, query: TaskQuery) -> TaskPage:
        """One page: from the index once loaded, else straight from the store."""
        if not self.loaded:
            return await self._store_page(query)
        rows, limit, matches = self._rows, query.limit, query.matches
        i = len(rows) if query.before is None else bisect_left(rows, query.before, key=_key)
        found: list[TaskSummary] = []
        while i > 0 and len(found) <= limit:
            i -= 1
            row = rows[i]
            if matches(row):
                found.append(row)
        more = len(found) > limit
        found = found[:limit]
        return TaskPage(found, found[-1].key if more else None, self._count(query))

    def _count(self, query: TaskQuery) -> int:
        if query.tool is None and query.id_prefix is None and query.owner is None:
            outcomes = OUTCOMES if query.status is None else query.status
            return sum(self._counts[outcome] for outcome in outcomes)
        cache_key = (query.status, query.tool, query.owner, query.id_prefix)
        cached = self._matching.get(cache_key)
        if cached is not None and cached[0] == self.version:
            return cached[1]
        total = sum(1 for row in self._rows if query.matches(row))
        if len(self._matching) > 32:
            self._matching.clear()
        self._matching[cache_key] = (self.version, total)
        return total

    async def _store_page(self, query: TaskQuery) -> TaskPage:
        want = query.limit + 1
        found: list[TaskRecord] = []
        before, scanned = query.before, 0
        while len(found) < want and scanned < STORE_SCAN_LIMIT:
            size = want if query.store_filtered else min(1000, STORE_SCAN_LIMIT - scanned)
            batch = await self.store.list_tasks(
                status=query.store_status, owner=query.owner, limit=size, before=before
            )
            scanned += len(batch)
            found += [r for r in batch if query.store_filtered or query.matches(TaskSummary.of(r))]
            if len(batch) < size:
                before = None
                break
            before = (batch[-1].created_at, batch[-1].task_id)
        tasks = [TaskSummary.of(r, self._by_id.get(r.task_id)) for r in found[: query.limit]]
        if len(found) > query.limit:
            return TaskPage(tasks, tasks[-1].key, None)
        return TaskPage(tasks, before, None)  # scan bound reached: go on from where it stopped

    # --- keeping up ------------------------------------------------------------------

    async def load(self) -> None:
        """Read every retained task, a page at a time; then `loaded` and `page` uses the index."""
        async with self._scan_lock:
            if not self.loaded:
                await self._scan()

    async def reload(self) -> list[Change]:
        """Rescan the store: update every task, drop the ones gone (purged, expired);
        what changed (new summaries, and `Gone` for each task dropped)."""
        async with self._scan_lock:
            return await self._scan()

    async def _scan(self) -> list[Change]:
        self._gone.clear()
        self._touched.clear()
        seen: set[str] = set()
        changed: list[Change] = []
        before: PageKey | None = None
        while True:
            batch = await self.store.list_tasks(limit=self.page_size, before=before)
            for start in range(0, len(batch), 1000):
                fresh = [r for r in batch[start : start + 1000] if r.task_id not in self._gone]
                seen.update(r.task_id for r in fresh)
                changed += self._apply_many(fresh)
                await anyio.lowlevel.checkpoint()  # a long page never holds the loop for long
            if len(batch) < self.page_size:
                break
            before = (batch[-1].created_at, batch[-1].task_id)
        dropped = sorted(set(self._by_id) - seen - self._touched)
        self.loaded = True
        changed += self._remove_many(dropped)
        self._gone.clear()
        self._touched.clear()
        self.version += 1
        return changed

    async def refresh(self, task_ids: Iterable[str]) -> list[Change]:
        """Re-read these tasks and apply them: the changed summaries, and `Gone` for known
        tasks that are gone. A task not seen before (created, then changed) is added."""
        wanted = list(dict.fromkeys(task_ids))
        if not wanted:
            return []
        records = await get_many(self.store, wanted)
        changed: list[Change] = self._remove_many(t for t in wanted if t not in records)
        changed += self._apply_many(list(records.values()), touched=True)
        return changed

    async def poll_new(self) -> list[TaskSummary]:
        """Tasks created since the last look: the active ones newest first, until known ids."""
        newest = self._rows[-1].key if self._rows else None
        floor = None if newest is None else (newest[0] - POLL_SKEW, "")
        added: list[TaskSummary] = []
        before: PageKey | None = None
        for _ in range(50):
            batch = await self.store.list_tasks(
                status=ACTIVE_STATUSES, limit=self.poll_page, before=before
            )
            unknown = [r for r in batch if r.task_id not in self._by_id]
            added += [
                s for s in self._apply_many(unknown, touched=True) if isinstance(s, TaskSummary)
            ]
            if len(batch) < self.poll_page or len(unknown) < len(batch):
                break
            before = (batch[-1].created_at, batch[-1].task_id)
            if floor is None or before < floor:
                break
        return added

    # --- applying ----------------------------------------------------------------------

    def _apply_many(self, records: list[TaskRecord], *, touched: bool = False) -> list[Change]:
        changed: list[Change] = []
        inserted: list[TaskSummary] = []
        for record in records:
            old = self._by_id.get(record.task_id)
            if old is not None and (
                record.updated_at < old.updated_at
                or (old.status in TERMINAL_STATUSES and record.status in ACTIVE_STATUSES)
            ):
                continue  # an older read than what the index holds
            new = TaskSummary.of(record, old)
            if new == old:
                continue
            if touched:
                self._touched.add(new.task_id)
                self._gone.discard(new.task_id)
            self._count_out(old)
            self._count_in(new)
            if old is None:
                inserted.append(new)
            else:
                rows = self._rows
                i = bisect_left(rows, old.key, key=_key)
                held = i < len(rows) and rows[i] is old
                if held and new.key == old.key:
                    rows[i] = new
                else:  # never seen: a task's creation time does not change
                    if held:
                        del rows[i]
                    inserted.append(new)
            changed.append(new)
        if inserted:
            self._insert(inserted)
        if changed:
            self.version += 1
        return changed

    def _insert(self, new: list[TaskSummary]) -> None:
        """Add summaries not in `_rows`: one splice when they fall between two neighbours
        (a scan's chunk, older than all it read before), else one by one or a re-sort."""
        rows = self._rows
        new.sort(key=_key)
        low = bisect_left(rows, new[0].key, key=_key)
        if low == bisect_right(rows, new[-1].key, key=_key):
            rows[low:low] = new
        elif len(new) > 64:
            rows.extend(new)
            rows.sort(key=_key)
        else:
            for row in new:
                insort(rows, row, key=_key)

    def _remove_many(self, task_ids: Iterable[str]) -> list[Change]:
        """Drop these tasks; a `Gone` (the last summary) for each one the index held."""
        task_ids = list(task_ids)
        removed = [self._by_id[t] for t in task_ids if t in self._by_id]
        if self._scan_lock.locked():
            self._gone.update(task_ids)
        if not removed:
            return []
        for old in removed:
            self._count_out(old)
        if len(removed) > 64:
            gone = {old.task_id for old in removed}
            self._rows = [row for row in self._rows if row.task_id not in gone]
        else:
            for old in removed:
                del self._rows[bisect_left(self._rows, old.key, key=_key)]
        self.version += 1
        return [Gone(old) for old in removed]

    def _count_in(self, s: TaskSummary) -> None:
        self._by_id[s.task_id] = s
        self._counts[s.outcome] += 1
        self._tools[s.tool] += 1
        if s.owner is not None:
            self._owners[s.owner] += 1
        if s.status in ACTIVE_STATUSES:
            self._active[s.task_id] = s

    def _count_out(self, s: TaskSummary | None) -> None:
        if s is None:
            return
        del self._by_id[s.task_id]
        self._active.pop(s.task_id, None)
        for counter, name in (
            (self._counts, s.outcome),
            (self._tools, s.tool),
            (self._owners, s.owner),
        ):
            if name is not None:
                counter[name] -= 1
                if counter[name] <= 0:
                    del counter[name]


__all__ = [
    "MAX_LIMIT",
    "Change",
    "Gone",
    "TaskIndex",
    "TaskPage",
    "TaskQuery",
    "TaskSummary",
    "before_text",
    "iso",
    "parse_before",
]
