"""The caps check of a create that rides in a batch of statements (`postgres.batching`).

A capped create alone runs `caps_check` (`schema.CAPS_FUNCTION`): far from every cap it
takes the schema's caps lock shared, near one exclusive, and then checks exactly. Inside
a batch the exclusive mode would be held until the batch commits, stalling every other
process's creates meanwhile. `caps_check_batched` never takes it: near a cap it takes no
lock and answers `retry`, so the statement inserts nothing and
`PostgresTaskStore.create` makes the create again alone, which checks exactly as before.
Far from every cap it takes the lock shared and reads the counters under it, as
`caps_check` does; the shared mode's bound (`schema.CAPS_FUNCTION`) holds because a
batch carries one capped create (`postgres.batching`).

The function takes `caps_check`'s arguments (its `exclusive` is ignored), so the
statement a batch sends is `sql.create_capped` calling it instead (`batched_create`); a
create made alone runs `sql.create_capped` itself, exactly as before batching. Every
`prepare` (re)creates it, as it does `caps_check`: it is no table and needs no version.
Both functions' text comes from `caps_function`: they read the counters alike and differ
only in what each pass ends with.
"""

from __future__ import annotations


def caps_function(name: str, decide: str) -> str:
    """The text of a caps check called `name` (`{s}`: the schema, for `.format`): both
    read the counters in up to two passes, the first without the caps lock, the second
    under it, and end each pass with `decide`, which answers or takes the lock."""
    return (
        f"""
CREATE OR REPLACE FUNCTION {{s}}.{name}(lock_key text, total_cap bigint, owner_key text,
    owner_cap bigint, exclusive boolean)
RETURNS TABLE (active bigint, owned bigint, retry boolean)
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    margin bigint := current_setting('max_connections')::bigint
        + current_setting('max_prepared_transactions')::bigint;
    a bigint := 0;
    o bigint := 0;
    near boolean;
BEGIN
    FOR pass IN 1..2 LOOP
        IF total_cap IS NOT NULL THEN
            SELECT COALESCE(sum(c.n), 0) INTO a FROM {{s}}.active_counts c WHERE c.key = 't';
        END IF;
        IF owner_key IS NOT NULL THEN
            SELECT COALESCE(sum(c.n), 0) INTO o FROM {{s}}.active_counts c WHERE c.key = owner_key;
        END IF;
        near := (total_cap IS NOT NULL AND a + margin >= total_cap)
            OR (owner_key IS NOT NULL AND owner_cap IS NOT NULL AND o + margin >= owner_cap);
"""
        + decide
        + """    END LOOP;
END
$fn$"""
    )


#: Near a cap, pass 1 answers `retry` without the lock; else it takes the lock shared.
CAPS_BATCHED_FUNCTION = caps_function(
    "caps_check_batched",
    """        IF near OR pass = 2 THEN
            RETURN QUERY SELECT a, o, near;
            RETURN;
        END IF;
        PERFORM pg_advisory_xact_lock_shared(hashtextextended(lock_key, 0));
""",
)


def batched_create(create_capped: str, schema: str) -> str:
    """`create_capped` calling `caps_check_batched` instead of `caps_check`."""
    alone, batched = f"{schema}.caps_check(", f"{schema}.caps_check_batched("
    if create_capped.count(alone) != 1:
        raise AssertionError("create_capped must call caps_check exactly once")
    return create_capped.replace(alone, batched)


__all__ = ["CAPS_BATCHED_FUNCTION", "batched_create", "caps_function"]
