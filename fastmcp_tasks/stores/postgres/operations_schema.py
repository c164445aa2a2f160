"""The PostgreSQL store's tables of operator records (`stores.operations`): schema version 3.

`V3` is the migration step `schema.MIGRATIONS` runs to bring a schema from version 2
to 3 (`{s}`: the schema). It adds four tables and changes nothing in `tasks`, so a
task without events costs no more than before:

- `task_events`: each task's history, keyed by task then `seq` (an identity, so a
  history is one range of the primary key, in order). The row trigger
  `tasks_forget_events` deletes a task's events when its row is deleted, whatever
  deletes it (the expiry sweep, `purge_finished`, `delete_finished`, the `max_tasks`
  sweep of `create`): one primary-key range per deleted task. `TRUNCATE` fires no
  trigger: `PostgresConnections.clear` truncates `task_events` too.
- `workers`: each process's last heartbeat (`info`: `WorkerInfo` as JSON).
- `pauses`: the paused tools, by application ("" for tasks without one) and tool.
- `audit`: the operator actions, in `seq` order.

JSON columns are `json` for the reasons `postgres.schema` gives for the task payloads.
"""

from __future__ import annotations

#: The statements of the step from version 2 to 3 (`{s}`: the schema), in order.
V3: list[str] = [
    """CREATE TABLE {s}.task_events (
    task_id text NOT NULL,
    seq bigint GENERATED ALWAYS AS IDENTITY,
    at double precision NOT NULL,
    kind text NOT NULL,
    details json NOT NULL,
    PRIMARY KEY (task_id, seq)
)""",
    """CREATE FUNCTION {s}.forget_events() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    DELETE FROM {s}.task_events WHERE task_id = OLD.task_id;
    RETURN NULL;
END
$fn$""",
    """CREATE TRIGGER tasks_forget_events AFTER DELETE ON {s}.tasks
    FOR EACH ROW EXECUTE FUNCTION {s}.forget_events()""",
    """CREATE TABLE {s}.workers (
    worker_id text PRIMARY KEY,
    last_seen double precision NOT NULL,
    info json NOT NULL
)""",
    """CREATE TABLE {s}.pauses (
    app text NOT NULL,
    tool text NOT NULL,
    since double precision NOT NULL,
    paused_by text NOT NULL,
    PRIMARY KEY (app, tool)
)""",
    """CREATE TABLE {s}.audit (
    seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at double precision NOT NULL,
    actor text NOT NULL,
    action text NOT NULL,
    count bigint NOT NULL,
    details json NOT NULL
)""",
]

__all__ = ["V3"]
