"""The PostgreSQL store's rows: a `TaskRecord` as the `tasks` columns hold it, and back.

`to_params` gives the parameters of an INSERT of every column (`schema.COLUMNS` in
order, then `expires_at`); `from_row` reads a row of `schema.SELECT_COLUMNS` (psycopg
decodes the `json` columns). Dict fields are compact JSON text (`base.encode_json`);
plain text is cleaned of what a `text` column refuses (`clean_text`).
"""

from __future__ import annotations

from typing import Any

from fastmcp_tasks.stores.base import TaskRecord, encode_json, storable_text


def clean_text(text: str | None) -> str | None:
    """Plain text as a `text` column takes it: valid UTF-8 (`storable_text`), no NUL."""
    text = storable_text(text)
    if text is not None and "\x00" in text:
        return text.replace("\x00", "\ufffd")
    return text


def dumps(value: Any) -> str | None:
    """JSON text for a `json` column (`None` stays NULL)."""
    return None if value is None else encode_json(value)


def to_params(record: TaskRecord) -> tuple[Any, ...]:
    """The `INSERT` parameters of a record: `COLUMNS` then `expires_at`."""
    r = record
    return (
        r.task_id,
        r.tool,
        r.status,
        r.created_at,
        r.updated_at,
        dumps(r.arguments),
        clean_text(r.status_message),
        r.poll_interval_ms,
        r.retention_ms,
        r.terminal_at,
        r.result_json,
        dumps(r.error),
        dumps(r.input_requests),
        dumps(r.answers),
        bool(r.cancel_requested),
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


def from_row(row: tuple[Any, ...] | Any) -> TaskRecord:
    """The record a row of `SELECT_COLUMNS` holds (json columns arrive decoded)."""
    return TaskRecord(
        task_id=row[0],
        tool=row[1],
        status=row[2],
        created_at=row[3],
        updated_at=row[4],
        arguments=row[5],
        status_message=row[6],
        poll_interval_ms=row[7],
        retention_ms=row[8],
        terminal_at=row[9],
        result_json=row[10],
        error=row[11],
        input_requests=row[12],
        answers=row[13],
        cancel_requested=bool(row[14]),
        owner=row[15],
        context=row[16],
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


__all__ = ["clean_text", "dumps", "from_row", "to_params"]
