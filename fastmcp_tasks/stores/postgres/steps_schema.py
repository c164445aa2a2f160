"""The PostgreSQL store's table of durable steps (`stores.steps`): schema version 4.

`V4` is the migration step `schema.MIGRATIONS` runs to bring a schema from version 3
to 4 (`{s}`: the schema). It adds the `steps` table (one row per recorded step, keyed
by task then name, `seq` an identity giving the recording order, `size` the UTF-8
bytes of the value) and changes nothing in `tasks`. The row trigger
`tasks_forget_steps` deletes a task's steps when its row is deleted, whatever deletes
it (the expiry sweep, `purge_finished`, `delete_finished`, the `max_tasks` sweep of
`create`), as `tasks_forget_events` does its history. `TRUNCATE` fires no trigger:
`PostgresConnections.clear` truncates `steps` too. The statements on it are
`postgres.steps`.
"""

from __future__ import annotations

#: The statements of the step from version 3 to 4 (`{s}`: the schema), in order.
V4: list[str] = [
    """CREATE TABLE {s}.steps (
    task_id text NOT NULL,
    name text NOT NULL,
    seq bigint GENERATED ALWAYS AS IDENTITY,
    value text NOT NULL,
    size bigint NOT NULL,
    at double precision NOT NULL,
    PRIMARY KEY (task_id, name)
)""",
    "CREATE UNIQUE INDEX steps_order ON {s}.steps (task_id, seq)",
    """CREATE FUNCTION {s}.forget_steps() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    DELETE FROM {s}.steps WHERE task_id = OLD.task_id;
    RETURN NULL;
END
$fn$""",
    """CREATE TRIGGER tasks_forget_steps AFTER DELETE ON {s}.tasks
    FOR EACH ROW EXECUTE FUNCTION {s}.forget_steps()""",
]


__all__ = ["V4"]
