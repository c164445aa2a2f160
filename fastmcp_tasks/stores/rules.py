"""The record-level rules of the store contract, shared by the Python-side stores.

Each function changes one `TaskRecord` in place the way the contract says and
reports what happened; the store around it supplies the atomicity (one event
loop turn for memory, one transaction for SQLite) and persists the record and
its change-feed entry. The Redis store applies the same rules in Lua.
"""

from __future__ import annotations

import time
from typing import Any

from fastmcp_tasks.stores.base import ALLOWED_TRANSITIONS, ChangeKind, TaskRecord, storable_text
from fastmcp_tasks.stores.phases import QUEUED, RESTART, RETRY, RUNNING, WAITING_PHASES
from fastmcp_tasks.wire.names import ACTIVE_STATUSES, TaskStatus


def transition_sources(status: TaskStatus, expect: frozenset[str] | None) -> list[str]:
    """The statuses a task may be in for `transition(..., status, expect=expect)` to apply
    (the allowed transitions into `status`, within `expect`); empty: it never applies."""
    return [
        current
        for current, targets in ALLOWED_TRANSITIONS.items()
        if status in targets and (expect is None or current in expect)
    ]


def park(record: TaskRecord, requests: dict[str, Any], status_message: str | None) -> bool:
    """Add outstanding requests and move to `input_required`; False if not active."""
    if record.status not in ACTIVE_STATUSES:
        return False
    record.input_requests = {**(record.input_requests or {}), **requests}
    record.status = "input_required"
    record.status_message = storable_text(status_message)
    record.updated_at = time.time()
    return True


def accept_answers(record: TaskRecord, responses: dict[str, Any]) -> dict[str, Any]:
    """Accept answers for outstanding keys (others ignored, C35); the accepted subset.

    Accepted keys leave `input_requests` for `answers`; with none left the task is
    `working` again.
    """
    outstanding = record.input_requests
    if record.status != "input_required" or not outstanding:
        return {}
    accepted = {key: value for key, value in responses.items() if key in outstanding}
    if not accepted:
        return {}
    remaining = {k: v for k, v in outstanding.items() if k not in accepted}
    record.answers = {**(record.answers or {}), **accepted}
    record.input_requests = remaining or None
    record.updated_at = time.time()
    if not remaining:
        record.status = "working"
        record.status_message = None
    return accepted


def take_answers(record: TaskRecord, keys: frozenset[str]) -> dict[str, Any]:
    """Remove and return the stored answers among `keys`."""
    if not record.answers:
        return {}
    return {key: record.answers.pop(key) for key in keys if key in record.answers}


def withdraw(record: TaskRecord, keys: frozenset[str]) -> bool:
    """Drop outstanding requests among `keys`; True when anything changed."""
    outstanding = record.input_requests or {}
    if not keys & outstanding.keys():
        return False
    remaining = {k: v for k, v in outstanding.items() if k not in keys}
    record.input_requests = remaining or None
    record.updated_at = time.time()
    if not remaining and record.status == "input_required":
        record.status = "working"
        record.status_message = None
    return True


def lease(record: TaskRecord, owner: str, until: float, expect_owner: str | None) -> bool:
    """Take the run lease when free, expired, the owner's, or `expect_owner`'s (a lease is
    not a run: `phase` and `attempts` stay)."""
    if record.status not in ACTIVE_STATUSES:
        return False
    holder = record.lease_owner
    free = holder is None or holder == owner or holder == expect_owner
    if not free and (record.lease_expires or 0) > time.time():
        return False
    record.lease_owner = owner
    record.lease_expires = until
    return True


def give_back(record: TaskRecord) -> None:
    """`requeue`: unleased; a run that had begun (or may have: no phase) now waits to restart."""
    record.lease_owner = None
    record.lease_expires = None
    if record.phase not in WAITING_PHASES:
        record.phase = RESTART


def hold_back(record: TaskRecord) -> None:
    """`hold_paused`: as `give_back`, except that a run begun by the claim that leased the
    task (`phase` running: a held task's tool body never started) is taken back, one
    attempt less, waiting as before it (`queued` for a first run, else `restart`)."""
    if record.phase != RUNNING:
        give_back(record)
        return
    record.lease_owner = None
    record.lease_expires = None
    record.attempts = max(0, record.attempts - 1)
    record.phase = QUEUED if record.attempts == 0 else RESTART


def begin(record: TaskRecord, owner: str, message: str | None) -> list[ChangeKind] | None:
    """`start_run` on a loaded record: the feed entries it makes, or `None` when refused
    (not active, or leased to someone else). Already `running`: nothing changes."""
    if record.status not in ACTIVE_STATUSES or record.lease_owner != owner:
        return None
    if record.phase == RUNNING:
        return []
    record.phase = RUNNING
    record.attempts += 1
    message = storable_text(message)
    if message == record.status_message:
        return []
    record.status_message = message
    record.updated_at = time.time()
    return ["message"]


def retry(
    record: TaskRecord, owner: str, not_before: float, message: str | None
) -> list[ChangeKind] | None:
    """`retry_later` on a loaded record: the feed entries it makes (before `queued`), or
    `None` when refused (inactive, someone else's lease, a cancel requested)."""
    if record.status not in ACTIVE_STATUSES or record.lease_owner != owner:
        return None
    if record.cancel_requested:
        return None
    message, before = storable_text(message), record.status
    kinds: list[ChangeKind] = []
    if before != "working":
        kinds.append("status")
    elif message != record.status_message:
        kinds.append("message")
    record.lease_owner = None
    record.lease_expires = None
    record.not_before = not_before
    record.retries += 1
    record.phase = RETRY
    record.status = "working"
    record.input_requests = None
    record.status_message = message
    if kinds:
        record.updated_at = time.time()
    return kinds


def lease_view(record: TaskRecord) -> TaskRecord:
    """A copy of an active task as `active_leases` returns it: lease fields, no payloads."""
    return TaskRecord(
        task_id=record.task_id,
        tool=record.tool,
        status=record.status,
        created_at=record.created_at,
        updated_at=record.updated_at,
        status_message=record.status_message,
        attempts=record.attempts,
        phase=record.phase,
        app=record.app,
        lease_owner=record.lease_owner,
        lease_expires=record.lease_expires,
        cancel_requested=record.cancel_requested,
    )
