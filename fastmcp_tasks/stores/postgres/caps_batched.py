"""The caps check of the creates that ride in a batch of statements (`postgres.batching`).

A capped create alone runs `caps_check` (`schema.CAPS_FUNCTION`): far from every cap it
takes the schema's caps lock shared, near one exclusive, and then checks exactly. Inside
a batch the exclusive mode would be held until the batch commits, stalling every other
process's creates meanwhile. `caps_check_batched` never takes it: near a cap it takes no
lock and answers `retry`, so the statement inserts nothing and
`PostgresTaskStore.create` makes the create again alone, which checks exactly as before.
Far from every cap it takes the lock shared and reads the counters under it, as
`caps_check` does.

The shared mode's bound (`schema.CAPS_FUNCTION`) counts the creates in flight at once:
one per open transaction, and more only in a batch's. A batch's transaction may carry
up to `BATCH_CREATES` capped creates, and its second one needs a batch slot first: one
of `BATCH_SLOTS` advisory locks per caps lock (`<lock_key>:batch<i>`), tried without
waiting and held until the batch commits. So at most `BATCH_SLOTS` transactions carry
more than one create, and the creates in flight number at most one per open
transaction plus `BATCH_SLOTS * (BATCH_CREATES - 1)`: the margin both checks keep below
every cap (`caps_function`). Both rules are the database's, not only the caller's: a
transaction-local setting counts the batched creates a transaction has checked
(`fastmcp_tasks.b<hash of the lock key>`); past `BATCH_CREATES`, or with no slot free,
the check answers `retry` and that create is made alone (so with more than
`BATCH_SLOTS` processes batching creates at the same moment, some of those creates cost
a second statement).

Both functions' names carry `BATCH_CREATES` and `BATCH_SLOTS` (`CAPS_CHECK`,
`CAPS_CHECK_BATCHED`): every `prepare` (re)creates the functions of its own build, and
a build with other bounds (or one from before batches carried several creates) must not
replace what this one calls. Such a build's own shared-mode checks keep its own margin,
so while processes of both run against one schema (a rolling upgrade) the caps may be
exceeded by at most the difference of the two margins (`BATCH_MARGIN` from a build
whose batches carried one capped create).

The function takes `caps_check`'s arguments (its `exclusive` is ignored), so the
statement a batch sends is `sql.create_capped` calling it instead (`batched_create`); a
create made alone runs `sql.create_capped` itself, exactly as before batching. Every
`prepare` (re)creates it, as it does `caps_check`: it is no table and needs no version.
Both functions' text comes from `caps_function`: they read the counters alike and differ
only in what each pass ends with.
"""

from __future__ import annotations

#: Capped creates one batch's transaction may carry (`postgres.batching` sends no more).
BATCH_CREATES = 8
#: Transactions that may carry more than one capped create at once, per caps lock.
BATCH_SLOTS = 8
#: What batches add to the creates in flight: the caps' margin grows by it (module doc).
BATCH_MARGIN = BATCH_SLOTS * (BATCH_CREATES - 1)
#: The functions' names carry the bounds their margin was made for, so a process that
#: has other bounds (an earlier build, whose `prepare` (re)creates its own functions)
#: never replaces the text this one calls (module doc).
CAPS_CHECK = f"caps_check_{BATCH_CREATES}x{BATCH_SLOTS}"
CAPS_CHECK_BATCHED = f"caps_check_batched_{BATCH_CREATES}x{BATCH_SLOTS}"


def caps_function(name: str, decide: str, declare: str = "") -> str:
    """The text of a caps check called `name` (`{s}`: the schema, for `.format`): both
    read the counters in up to two passes, the first without the caps lock, the second
    under it, and end each pass with `decide`, which answers or takes the lock (with
    the variables `declare` adds). The margin kept below every cap is one create per
    transaction that may be open, plus what batches add (`BATCH_MARGIN`)."""
    return (
        f"""
CREATE OR REPLACE FUNCTION {{s}}.{name}(lock_key text, total_cap bigint, owner_key text,
    owner_cap bigint, exclusive boolean)
RETURNS TABLE (active bigint, owned bigint, retry boolean)
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    margin bigint := current_setting('max_connections')::bigint
        + current_setting('max_prepared_transactions')::bigint + {BATCH_MARGIN};
    a bigint := 0;
    o bigint := 0;
    near boolean;
{declare}BEGIN
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


#: Near a cap, pass 1 answers `retry` without the lock; so does a create past the
#: transaction's `BATCH_CREATES`, or its second with no batch slot free (module doc).
#: Else it counts the create and takes the caps lock shared.
CAPS_BATCHED_FUNCTION = caps_function(
    CAPS_CHECK_BATCHED,
    f"""        IF near OR pass = 2 THEN
            RETURN QUERY SELECT a, o, near;
            RETURN;
        END IF;
        made := COALESCE(NULLIF(current_setting(counter, true), ''), '0')::int;
        IF made = 1 THEN
            FOR i IN 1..{BATCH_SLOTS} LOOP
                slot := pg_try_advisory_xact_lock(hashtextextended(lock_key || ':batch' || i, 0));
                EXIT WHEN slot;
            END LOOP;
        END IF;
        IF made >= {BATCH_CREATES} OR (made = 1 AND NOT slot) THEN
            RETURN QUERY SELECT a, o, true;
            RETURN;
        END IF;
        PERFORM set_config(counter, (made + 1)::text, true);
        PERFORM pg_advisory_xact_lock_shared(hashtextextended(lock_key, 0));
""",
    """    counter text := 'fastmcp_tasks.b' || to_hex(hashtextextended(lock_key, 0));
    made int;
    slot boolean := false;
""",
)


def batched_create(create_capped: str, schema: str) -> str:
    """`create_capped` calling `CAPS_CHECK_BATCHED` instead of `CAPS_CHECK`."""
    alone, batched = f"{schema}.{CAPS_CHECK}(", f"{schema}.{CAPS_CHECK_BATCHED}("
    if create_capped.count(alone) != 1:
        raise AssertionError(f"create_capped must call {CAPS_CHECK} exactly once")
    return create_capped.replace(alone, batched)


__all__ = [
    "BATCH_CREATES",
    "BATCH_MARGIN",
    "BATCH_SLOTS",
    "CAPS_BATCHED_FUNCTION",
    "CAPS_CHECK",
    "CAPS_CHECK_BATCHED",
    "batched_create",
    "caps_function",
]
