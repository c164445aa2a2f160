"""The Redis store's key space: every key `RedisTaskStore` uses, and what each holds.

This module owns the key names (`RedisKeys`), the choice of prefix from the store URL
(`parse_store_url`, which also refuses a query option neither the store nor redis-py
takes: `url_options`) and the layout of a task hash (`encode_task`, `decode_task`).

All keys of one store start with its prefix in a hash tag, `{<prefix>}:`, so

- several stores share one Redis by choosing different prefixes: the closing
  brace ends the prefix, so `{app}:...` and `{app:x}:...` can never collide
  (applications sharing one store are told apart by `TaskRecord.app` instead);
- every key of a store hashes to one Redis Cluster slot, which the Lua scripts need
  (they reach task hashes named by index members, not only by declared keys).

The keys of the prefix `P`:

- `{P}:task:<task_id>`   hash, one per task. Scalar fields hold text (`status`, `tool`,
  `owner`, `app`, ...), numbers as decimal text, dict fields as JSON text (`arguments`,
  `error`, `context`), `result_json` the compact result JSON. Outstanding input
  requests are fields `r:<key>`, stored answers `a:<key>` (JSON text each), so the
  scripts add and remove them without re-encoding JSON. A missing field is `None`
  (`phase`, `stores.phases`, is missing on a hash written before phases).
  A finished task carries a Redis TTL of its `retention_ms`.
- `{P}:active`           sorted set of active task ids (`working`, `input_required`),
  scored by creation time.
- `{P}:queued`           sorted set of active task ids nobody holds the lease of, of
  every application, scored by creation time: `claim_queued(app=None)` takes the
  lowest scores first. It predates applications: tasks without an `app` are only here.
- `{P}:queued:<app>`     the same for the tasks of one application (`record.app`),
  which are in both sets: `claim_queued(app=...)` takes from this one. The scripts
  derive it from the `queued` key as `queued .. ':' .. app` (`RedisKeys.queued_for`).
- `{P}:terminal`         sorted set of finished task ids, scored by expiry time
  (`+inf` when kept forever): `purge_expired` takes a score range. The retained
  task count (`max_tasks`) is `ZCARD active + ZCARD terminal`.
- `{P}:changes`          the change feed: one Redis Stream, fields `t` (task id),
  `k` (kind), `s` (status, empty for none), `d` (details JSON).
- `{P}:changes:wake`     the same entries for the cancel requests and answers a task
  engine waits for (`redis.scripts.WAKE_KINDS`), read by subscriptions to those alone.
- `{P}:changes:queue`    the same entries for `queued` changes: one consumer group per
  application hands each to one of its workers (`redis.queue_wakes`); beside it each
  application's pending mark, `{P}:changes:queue:pending:...` (expires within 250 ms).

Flow control (`stores.flow`; kept by the scripts of `redis.flow_scripts`, whose
helpers in `redis.flow_lua` build these names in Lua) adds:

- `{P}:delayed`          sorted set of queued task ids whose `not_before` is ahead,
  scored by it; `claim_queued` moves the due ones to their queue or gate.
- `{P}:dedupe:<key>`     string: the id of the task holding a dedupe key. It expires
  with its task (a TTL of the task's retention when it ends) and is deleted when its
  task is purged.
- `{P}:tomb:<hash>`      hash (`owner`, `at`, `reason`) under `stores.flow.tombstone_key`:
  written, pre-dated to its expiry, when a task with a retention ends (Redis evicts
  the task hash itself), rewritten by `purge_finished`; expires `tombstone_retention`
  after `at`.
- Gates (a gated task waits outside the queued sets). With `L` the lane of an
  application (`-` for none, else `<len>:<app>`), `g` a gate and `o` an owner
  (`''` for none): `{P}:gate:<g>` hash (`limit`, `turn` counter, `t:<o>` turns),
  `{P}:gate-run:<g>` set of its leased active tasks, `{P}:gate-lanes:<g>` set of
  the lanes it has waiting tasks in, `{P}:gate-wait:<L><len(g)>:<g><o>` sorted set
  of waiting ids by creation time, `{P}:gate-fresh:<L><g>` never-served owners by
  their oldest waiting task, `{P}:gate-served:<L><g>` served owners by turn,
  `{P}:gate-ready:<L>` sorted set of the lane's gates with a free slot by their next
  task's creation time, `{P}:gate-ready` set of lanes with a ready gate. Redis drops
  an emptied set; `{P}:gate:<g>` is deleted when nothing waits in or holds the gate.

Operator records (`stores.operations`; kept by `redis.operations` with the scripts of
`redis.operations_lua`) add:

- `{P}:events:<id>`      list: a task's history, oldest first, one `TaskEvent` JSON
  text per entry (at most `MAX_EVENTS`). It gets its task's TTL (the script that ends
  the task, and every append to an ended one) and is deleted wherever the task hash
  is: purges, `delete_finished`, the expiry sweeps, and a `create` of a reused id.
- `{P}:pauses`           hash: app and tool joined by a tab (app `""` for none) ->
  `Pause` JSON. A task held for a pause waits in `{P}:delayed` with the score
  `PAUSED_UNTIL`, which `claim_queued` never reaches; `resume` takes it out.
- `{P}:workers`          hash: worker id -> `WorkerInfo` JSON of its last heartbeat;
  `{P}:workers-seen` sorted set of the same ids by `last_seen`, to forget old ones.
- `{P}:audit`            list: `AuditEntry` JSON texts, newest first, `MAX_AUDIT` kept.

Durable steps (`stores.steps`; kept by `redis.steps`) add, per task:

- `{P}:steps:<id>`       list: the task's steps in recording order, each its name and
  time as a JSON array, a newline, then its value's JSON text.
- `{P}:step-names:<id>`  hash: `n:<name>` for each recorded name, and `bytes`, the
  UTF-8 bytes of all the values. Both get the task's TTL and are deleted wherever the
  task hash is (`redis.flow_lua.forget_task`), as the history is.
"""

from __future__ import annotations

import functools
import inspect
import json
import re
import typing
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from redis.asyncio.connection import URL_QUERY_ARGUMENT_PARSERS, Connection, SSLConnection

from fastmcp_tasks.errors import ConfigurationError
from fastmcp_tasks.stores.base import TaskRecord, encode_json, storable_text
from fastmcp_tasks.stores.urls import masked, refuse_unknown

DEFAULT_PREFIX = "fastmcp-tasks"

#: Prefix characters: no braces (the hash tag), no glob characters (the cleanup pattern).
_PREFIX_RE = re.compile(r"[A-Za-z0-9._:\-]{1,100}")

#: Field-name prefixes of outstanding input requests and stored answers in a task hash.
REQUEST_FIELD = "r:"
ANSWER_FIELD = "a:"


@dataclass(frozen=True, slots=True)
class RedisKeys:
    """The keys of one store, derived from its prefix.

    Args:
        prefix: what sets this store's keys apart from other stores on the same Redis.

    Raises:
        ConfigurationError: the prefix is empty, too long, or has characters other
            than letters, digits, `.`, `_`, `:` and `-`.
    """

    prefix: str = DEFAULT_PREFIX

    def __post_init__(self) -> None:
        if not _PREFIX_RE.fullmatch(self.prefix):
            raise ConfigurationError(
                f"Redis task store prefix must be 1-100 letters, digits, '.', '_', ':' or '-', "
                f"got {self.prefix!r}"
            )

    @property
    def base(self) -> str:
        """The text every key of this store starts with: `{<prefix>}:`."""
        return f"{{{self.prefix}}}:"

    @property
    def task_base(self) -> str:
        """The task hash key without its id (the scripts append ids to it)."""
        return f"{self.base}task:"

    def task(self, task_id: str) -> str:
        """The hash of one task."""
        return f"{self.task_base}{task_id}"

    @property
    def active(self) -> str:
        """Sorted set: active task ids by creation time."""
        return f"{self.base}active"

    @property
    def queued(self) -> str:
        """Sorted set: active, unleased task ids by creation time."""
        return f"{self.base}queued"

    def queued_for(self, app: str | None) -> str:
        """The queued set `claim_queued(app=app)` takes from: `queued` for `None` (any app's).

        Any text is a valid app name: it follows the hash tag, so it changes neither the
        cluster slot nor what `pattern` matches.
        """
        return self.queued if app is None else f"{self.queued}:{app}"

    @property
    def terminal(self) -> str:
        """Sorted set: finished task ids by expiry time."""
        return f"{self.base}terminal"

    @property
    def owner_active_base(self) -> str:
        """Set key without its owner: the active task ids of one owner (scripts append it)."""
        return f"{self.base}owner-active:"

    @property
    def changes(self) -> str:
        """Stream: the change feed."""
        return f"{self.base}changes"

    @property
    def wakes(self) -> str:
        """Stream: the changes a task engine waits for (the scripts append `:wake`)."""
        return f"{self.changes}:wake"

    @property
    def queue(self) -> str:
        """Stream: the `queued` changes, shared out to workers (the scripts append `:queue`)."""
        return f"{self.changes}:queue"

    @property
    def delayed(self) -> str:
        """Sorted set: queued task ids waiting out their `not_before`, by it."""
        return f"{self.base}delayed"

    def dedupe(self, key: str) -> str:
        """String: the id of the task holding a dedupe key."""
        return f"{self.base}dedupe:{key}"

    def tomb(self, hashed: str) -> str:
        """Hash: the tombstone kept under `stores.flow.tombstone_key(task_id)`."""
        return f"{self.base}tomb:{hashed}"

    def events(self, task_id: str) -> str:
        """List: the history of one task."""
        return f"{self.base}events:{task_id}"

    def steps(self, task_id: str) -> str:
        """List: the durable steps of one task, in recording order."""
        return f"{self.base}steps:{task_id}"

    def step_names(self, task_id: str) -> str:
        """Hash: the step names one task has recorded, and their values' total bytes."""
        return f"{self.base}step-names:{task_id}"

    @property
    def pauses(self) -> str:
        """Hash: `<app>\\t<tool>` -> the `Pause` JSON of each paused tool."""
        return f"{self.base}pauses"

    @property
    def workers(self) -> str:
        """Hash: worker id -> the `WorkerInfo` JSON of its last heartbeat."""
        return f"{self.base}workers"

    @property
    def workers_seen(self) -> str:
        """Sorted set: worker ids by when they were last seen."""
        return f"{self.base}workers-seen"

    @property
    def audit(self) -> str:
        """List: the audit log's JSON entries, newest first."""
        return f"{self.base}audit"

    @property
    def pattern(self) -> str:
        """A `SCAN MATCH` pattern for every key of this store (and no other's)."""
        return f"{self.base}*"

    def indexes(self) -> list[str]:
        """The index keys a per-task script declares after the task key, in script order."""
        return [self.active, self.queued, self.terminal, self.changes]


@functools.cache
def url_options(scheme: str) -> frozenset[str]:
    """The query options redis-py takes from a `scheme://` URL: those `parse_url` parses,
    and every parameter of the scheme's connection class that a text value can give (not
    the host and port of the URL itself, nor redis-py's own `orig_*` bookkeeping)."""
    names = set(URL_QUERY_ARGUMENT_PARSERS)
    for cls in (SSLConnection if scheme == "rediss" else Connection).__mro__:
        init = vars(cls).get("__init__")
        if init is None or cls is object:
            continue
        for parameter in inspect.signature(init).parameters.values():
            hint = parameter.annotation
            deferred = isinstance(hint, str) and re.search(r"\bstr\b", hint) is not None
            text = hint is str or str in typing.get_args(hint) or deferred
            if text and parameter.name not in ("host", "port", "path"):
                names.add(parameter.name)
    return frozenset(name for name in names if not name.startswith("orig_"))


def parse_store_url(url: str, prefix: str | None) -> tuple[str, str, RedisKeys]:
    """Split a store URL into the URL for commands, the URL for the feed, and the keys.

    The query's `prefix=` names the key prefix (an explicit `prefix` must agree with
    it); other query options go to redis-py, except that the feed URL drops
    `socket_timeout` (the feed sets its own, longer than its blocking reads).

    Raises:
        ConfigurationError: not `redis://` or `rediss://`, a path that is not a database
            number, a bad prefix, two prefixes that disagree, or an unknown query option.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss"):
        raise ConfigurationError(
            f"Redis task store URL must be redis:// or rediss://: {masked(url)!r}"
        )
    db = parts.path.strip("/")
    if db and not db.isdigit():
        raise ConfigurationError(
            f"Redis task store URL {masked(url)!r}: the path must be a database number"
        )
    query = parse_qsl(parts.query, keep_blank_values=True)
    given = [name for name, _ in query]
    refuse_unknown(url, given, ("prefix",), url_options(parts.scheme), "redis-py")
    named = [value for name, value in query if name == "prefix"]
    if prefix is not None and named and named != [prefix]:
        raise ConfigurationError(
            f"Redis task store prefix {prefix!r} disagrees with the URL's {named}"
        )
    keys = RedisKeys(prefix if prefix is not None else named[-1] if named else DEFAULT_PREFIX)
    rest = [(name, value) for name, value in query if name != "prefix"]
    feed = [(name, value) for name, value in rest if name != "socket_timeout"]
    command_url = urlunsplit(parts._replace(query=urlencode(rest)))
    return command_url, urlunsplit(parts._replace(query=urlencode(feed))), keys


_JSON_FIELDS = ("arguments", "error", "context")
_FLOAT_FIELDS = ("created_at", "updated_at", "terminal_at", "lease_expires", "not_before")
_INT_FIELDS = ("poll_interval_ms", "retention_ms", "attempts", "gate_limit", "retries")
_TEXT_FIELDS = (
    "tool",
    "status",
    "status_message",
    "result_json",
    "owner",
    "lease_owner",
    "app",
    "gate",
    "dedupe_key",
    "phase",
)


def dumps(value: Any) -> str:
    """Compact JSON text, as stored in task hash fields."""
    return encode_json(value)


def encode_task(record: TaskRecord) -> list[str]:
    """The field/value pairs of a task hash (missing fields are `None`)."""
    r = record
    values: dict[str, Any] = {name: getattr(r, name) for name in _TEXT_FIELDS}
    values["status_message"] = storable_text(r.status_message)
    values.update({name: getattr(r, name) for name in _INT_FIELDS})
    for name in _FLOAT_FIELDS:
        value = getattr(r, name)
        values[name] = None if value is None else repr(float(value))
    for name in _JSON_FIELDS:
        value = getattr(r, name)
        values[name] = None if value is None else dumps(value)
    values["cancel_requested"] = "1" if r.cancel_requested else None
    values["retries"] = r.retries or None  # absent when 0, like every flow field unset
    for key, value in (r.input_requests or {}).items():
        values[REQUEST_FIELD + key] = dumps(value)
    for key, value in (r.answers or {}).items():
        values[ANSWER_FIELD + key] = dumps(value)
    return [str(x) for name, v in values.items() if v is not None for x in (name, v)]


def decode_task(task_id: str, fields: dict[str, str]) -> TaskRecord:
    """The record a task hash holds."""
    get = fields.get
    requests = {k[2:]: json.loads(v) for k, v in fields.items() if k.startswith(REQUEST_FIELD)}
    answers = {k[2:]: json.loads(v) for k, v in fields.items() if k.startswith(ANSWER_FIELD)}
    record = TaskRecord(
        task_id=task_id,
        tool=fields["tool"],
        status=fields["status"],  # type: ignore[arg-type]
        created_at=float(fields["created_at"]),
        updated_at=float(fields["updated_at"]),
        status_message=get("status_message"),
        result_json=get("result_json"),
        input_requests=requests or None,
        answers=answers or None,
        cancel_requested=get("cancel_requested") == "1",
        owner=get("owner"),
        lease_owner=get("lease_owner"),
        app=get("app"),
        gate=get("gate"),
        dedupe_key=get("dedupe_key"),
        phase=get("phase"),  # type: ignore[arg-type]
    )
    for name in _INT_FIELDS:
        if name in fields:
            setattr(record, name, int(fields[name]))
    for name in ("terminal_at", "lease_expires", "not_before"):
        if name in fields:
            setattr(record, name, float(fields[name]))
    for name in _JSON_FIELDS:
        if name in fields:
            setattr(record, name, json.loads(fields[name]))
    return record


def pairs(flat: list[str]) -> dict[str, str]:
    """A flat `HGETALL`-style reply (`[field, value, ...]`) as a dict."""
    return dict(zip(flat[::2], flat[1::2], strict=True))


__all__ = [
    "ANSWER_FIELD",
    "DEFAULT_PREFIX",
    "REQUEST_FIELD",
    "RedisKeys",
    "decode_task",
    "dumps",
    "encode_task",
    "pairs",
    "parse_store_url",
    "url_options",
]
