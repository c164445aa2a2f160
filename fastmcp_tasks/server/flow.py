"""Flow control of client-started work, per tool: what `task_options` asks and what it means.

A client (an LLM host, often retrying on its own) decides when work starts. A tool
says how much of it may run and how failures are retried:

- `concurrency=N` (and `concurrency_key`): at most N tasks of the tool (per key) run at
  once across every process sharing the store; the rest wait `working` with a
  `statusMessage` naming the limit. Waiting tasks are started round-robin across
  principals (`stores.flow`). The gate is the tool's public name, plus the key.
  The key is the client's to choose (`concurrency_key(arguments)`), so it enters the
  gate through `gate_key`: a readable key is kept as it is; anything a store or an
  operator's screen cannot take (control characters, NUL, lone surrogates, the gate's
  own separators, more than `MAX_GATE_KEY` characters) becomes an escaped prefix and a
  digest of the whole key, so equal keys still share a gate and different ones do not.
- `dedupe=timedelta(...)`: a call whose principal, tool and canonical JSON arguments
  equal an active task's (or one that completed or failed within the window) gets that
  task's `CreateTaskResult` instead of a new task. Atomic in every store.
- `retry=Retry(...)`: an exception from the tool is retried after a backoff with
  jitter; the wait is a queued task with `not_before` in the store, so it survives a
  restart on a durable store and any process of the application may run the retry.

Everything here is pure: `server.creation` and `server.engine.retries` apply it.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from fastmcp_tasks.errors import ConfigurationError
from fastmcp_tasks.server.durations import Duration, duration

#: How the engine's waiting messages start: queued, waiting for a retry. They are text for
#: people; what the engine decides on is the record's `phase` (`stores.phases`), since a
#: tool may write any status message, these included.
QUEUED_PREFIX = "Queued: "
RETRY_PREFIX = "Retrying (attempt "

#: Separates a tool's name from its concurrency key in a gate name.
GATE_SEPARATOR = "\x1f"
#: Separates the application from the tool in a gate name.
APP_SEPARATOR = "\x1e"
#: Longest concurrency key shown in a status message.
SHOWN_KEY = 60
#: Longest concurrency key a gate name carries as it is (characters); see `gate_key`.
MAX_GATE_KEY = 200
#: How much of an encoded key stays readable, escaped, before its digest.
_ENCODED_PREFIX = 40
#: The end of an encoded key: a printable key ending so is encoded too, so no key a
#: client sends can name another key's gate.
_ENCODED_END = re.compile(r"…#[0-9a-f]{32}\Z")


@dataclass(frozen=True, init=False)
class Retry:
    """How a tool's failed attempts are retried (`task_options(retry=Retry(...))`).

    Args:
        attempts: how many times the tool may run in all (the first run included).
        backoff: the wait before the first retry (a `timedelta` or seconds); it doubles
            for each later one.
        max_backoff: the longest wait (a `timedelta` or seconds).
        on: the exception types retried (default: any `Exception`). A cancellation
            is never retried, nor an `isError` result the tool returned on purpose.
        jitter: wait a random 50-100% of the computed backoff, so retries of many
            tasks that failed together do not come back together.
    """

    attempts: int = 3
    backoff: timedelta = timedelta(seconds=1)
    max_backoff: timedelta = timedelta(minutes=1)
    on: tuple[type[BaseException], ...] = field(default=(Exception,))
    jitter: bool = True

    def __init__(
        self,
        attempts: int = 3,
        backoff: Duration = timedelta(seconds=1),
        max_backoff: Duration = timedelta(minutes=1),
        on: tuple[type[BaseException], ...] = (Exception,),
        jitter: bool = True,
    ) -> None:
        if attempts < 1:
            raise ConfigurationError(f"Retry(attempts=) must be at least 1, got {attempts}")
        if not isinstance(on, tuple) or not all(
            isinstance(t, type) and issubclass(t, BaseException) for t in on
        ):
            raise ConfigurationError("Retry(on=) must be a tuple of exception types")
        fields = {
            "attempts": attempts,
            "backoff": duration("Retry(backoff=)", backoff),
            "max_backoff": duration("Retry(max_backoff=)", max_backoff),
            "on": on,
            "jitter": jitter,
        }
        for name, value in fields.items():  # frozen: as the generated __init__ does
            object.__setattr__(self, name, value)

    def retries(self, error: BaseException | None, retries_so_far: int) -> bool:
        """Whether a run that raised `error`, after `retries_so_far` retries, runs again."""
        return (
            error is not None and retries_so_far + 1 < self.attempts and isinstance(error, self.on)
        )

    def delay(self, retry_number: int) -> float:
        """Seconds to wait before retry number `retry_number` (1 for the first)."""
        doublings = min(max(0, retry_number - 1), 64)  # 2**64 s is past any max_backoff
        wait = min(self.max_backoff.total_seconds(), self.backoff.total_seconds() * 2**doublings)
        return float(wait * random.uniform(0.5, 1.0)) if self.jitter else float(wait)


def retry_message(attempt: int, attempts: int, reason: str) -> str:
    """The `statusMessage` of a task waiting for attempt `attempt` (cleared when it starts)."""
    return f"{RETRY_PREFIX}{attempt} of {attempts}) after: {reason}"


@dataclass(frozen=True)
class Gate:
    """The concurrency group a new task waits in."""

    name: str
    limit: int
    message: str


def gate_for(
    app: str | None,
    tool_name: str,
    limit: int,
    key_function: Callable[[dict[str, Any]], Any] | None,
    arguments: dict[str, Any],
) -> Gate:
    """The gate of a call: the application, the tool and the key (applications sharing a
    store never share a gate). `key_function` raising is a server bug (the caller reports it).
    """
    scope = f"{app or ''}{APP_SEPARATOR}{tool_name}"
    if key_function is None:
        return Gate(scope, limit, f"{QUEUED_PREFIX}tool {tool_name!r} runs {_at_once(limit)}")
    key = gate_key(key_function(arguments))
    shown = key if len(key) <= SHOWN_KEY else key[: SHOWN_KEY - 1] + "…"
    return Gate(
        f"{scope}{GATE_SEPARATOR}{key}",
        limit,
        f"{QUEUED_PREFIX}tool {tool_name!r} runs {_at_once(limit)} for {shown!r}",
    )


def gate_key(value: Any) -> str:
    """The concurrency key `value` as a gate name carries it: printable, bounded, storable.

    A string is the key itself, a list or dict its canonical JSON (sorted keys, so the
    same object in another order is the same key), anything else `str(value)`. That
    text is kept when it is printable (`str.isprintable`: no control characters, NUL,
    separators or lone surrogates) and at most `MAX_GATE_KEY` characters long; otherwise
    it becomes `<escaped prefix>…#<32 hex digits of its SHA-256>` (its first characters
    as `repr` escapes them), which every store takes and a person can still recognise.
    """
    text = value if isinstance(value, str) else _key_text(value)
    if len(text) <= MAX_GATE_KEY and text.isprintable() and not _ENCODED_END.search(text):
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    readable = repr(text[:_ENCODED_PREFIX])[1:-1][:_ENCODED_PREFIX]
    return f"{readable}…#{digest}"


def _key_text(value: Any) -> str:
    if isinstance(value, dict | list | tuple):
        try:
            return json.dumps(
                value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
            )
        except (TypeError, ValueError):  # keys that do not sort, a cycle: as it prints
            pass
    return str(value)


def shown_gate(gate: str) -> str:
    """A gate's name as an operator reads it: `tool` or `tool / key K` (`app: ...` first)."""
    app, _, rest = gate.rpartition(APP_SEPARATOR)
    tool, separator, key = rest.partition(GATE_SEPARATOR)
    text = f"{tool} / key {key}" if separator else tool
    return f"{text} (app {app!r})" if app else text


def _at_once(limit: int) -> str:
    return "one task at a time" if limit == 1 else f"at most {limit} tasks at once"


def dedupe_key(
    app: str | None, owner: str, tool_name: str, version: str | None, arguments: Any
) -> str:
    """The key two identical calls share: SHA-256 of app, principal, tool, the version the
    call pinned and the arguments as canonical JSON (sorted keys, no whitespace)."""
    canonical = json.dumps(
        [app, owner, tool_name, version, arguments],
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=True,
        default=str,
    )
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def check_concurrency(concurrency: int | None, key: Callable[..., Any] | None) -> None:
    """Refuse meaningless `task_options` at decoration time."""
    if concurrency is not None and concurrency < 1:
        raise ConfigurationError(f"concurrency must be at least 1, got {concurrency}")
    if key is not None and concurrency is None:
        raise ConfigurationError("concurrency_key needs concurrency=N")
    if key is not None and not callable(key):
        raise ConfigurationError("concurrency_key must be a function of the arguments")
