"""The SQLite store's rows: a `TaskRecord` as the `tasks` columns hold it, and back.

`to_row` gives the parameters of `schema.INSERT_TASK` (the columns of `schema.COLUMNS`
in order, then `expires_at`); `from_row` reads a `schema.SELECT_TASK` row. Dict fields
are compact JSON text (`base.encode_json`), `cancel_requested` an integer.
"""

from __future__ import annotations

import json
from typing import Any

from fastmcp_tasks.stores.base import TaskRecord, encode_json, storable_text


def dumps(value: dict[str, Any] | None) -> str | None:
    """JSON text for a dict column (`None` stays NULL)."""
    return None if value is None else encode_json(value)


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def to_row(record: TaskRecord) -> tuple[Any, ...]:
    """The `INSERT_TASK` parameters for a record."""
    r = record
    return (
        r.task_id,
        r.tool,
        r.status,
        r.created_at,
        r.updated_at,
        dumps(r.arguments),
        storable_text(r.status_message),
        r.poll_interval_ms,
        r.retention_ms,
        r.terminal_at,
        r.result_json,
        dumps(r.error),
        dumps(r.input_requests),
        dumps(r.answers),
        int(r.cancel_requested),
        r.owner,
        dumps(r.context),
        r.attempts,
        r.lease_owner,
        r.lease_expires,
        r.app,
        r.gate,
        r.gate_limit,
        r.not_before,
        r.retries,
        r.dedupe_key,
        r.phase,
        r.expires_at,
    )


def from_row(row: tuple[Any, ...]) -> TaskRecord:
    """The record a `SELECT_TASK` row holds."""
    return TaskRecord(
        task_id=row[0],
        tool=row[1],
        status=row[2],
        created_at=row[3],
        updated_at=row[4],
        arguments=_loads(row[5]),
        status_message=row[6],
        poll_interval_ms=row[7],
        retention_ms=row[8],
        terminal_at=row[9],
        result_json=row[10],
        error=_loads(row[11]),
        input_requests=_loads(row[12]),
        answers=_loads(row[13]),
        cancel_requested=bool(row[14]),
        owner=row[15],
        context=_loads(row[16]),
        attempts=row[17],
        lease_owner=row[18],
        lease_expires=row[19],
        app=row[20],
        gate=row[21],
        gate_limit=row[22],
        not_before=row[23],
        retries=row[24],
        dedupe_key=row[25],
        phase=row[26],
    )
