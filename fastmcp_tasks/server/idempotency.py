"""Idempotency keys of task-creating `tools/call`: read, checked, scoped, matched.

Our client sends `params._meta["fastmcp-tasks/idempotencyKey"]` with every
task-creating `tools/call` and, when the reply is lost, resends the same call with the
same key and `_meta["fastmcp-tasks/resent"] = true`. The resend gets the task the first
send created, in every store, atomically:

- **Checked where it enters.** `read()` takes the key from the request `_meta` before any
  store sees it: a str of 22..128 characters of `[A-Za-z0-9_-]` (22 base64url characters
  are 132 bits; we ask for at least 128 bits of randomness). Anything else is -32602
  (`errors.invalid_idempotency_key`), and the message never quotes the key.
- **Scoped, never stored raw.** The store's dedupe key is `scoped_key()`: SHA-256 (hex) of
  the application, the principal (`ownership.current_principal()`, "" without
  authentication), "idempotency" and the key, joined by "\\x1e". With authentication one
  principal's key never finds another's task; without it the key is a bearer secret, like
  the task id: only whoever presents it gets the task.
- **The store's atomic dedupe.** `server.creation` creates with that key and
  `dedupe_window=math.inf` (`stores.flow.dedupe_match`): the task holding the key answers
  every later call with it for as long as it is retained, whatever its status (cancelled
  included). A tool with `task_options(dedupe=...)` keeps its argument-based key when the
  caller is authenticated (a resend has the same arguments, so it finds the same task
  within that window). A store without flow control (`stores.flow.keeps_flow_control`)
  cannot dedupe: the key is checked but not used, and the server advertises
  `idempotencyKey: false`.
- **One key, one call.** `same_call()`: a task found by the key that is another tool's, or
  has other arguments (finished tasks keep theirs), is -32602
  (`errors.idempotency_key_reused`) and nothing is created.
- **A resend never runs synchronously.** `refuse_resend()`: a call marked resent that this
  server would answer without a task (forbidden tool, no opt-in, ...) is refused
  (`errors.resent_not_run`) instead of running the tool a second time.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fastmcp_tasks.errors import invalid_idempotency_key, resent_not_run
from fastmcp_tasks.stores.base import TaskRecord
from fastmcp_tasks.wire.names import IDEMPOTENCY_META_KEY, RESENT_META_KEY

MIN_KEY_LENGTH = 22  # base64url: 132 bits
MAX_KEY_LENGTH = 128
_KEY_CHARACTERS = re.compile(r"[A-Za-z0-9_-]+")
#: Separates the parts the scoped key hashes (as `server.flow.APP_SEPARATOR`).
SEPARATOR = "\x1e"
SCOPE = "idempotency"


@dataclass(frozen=True, slots=True)
class Idempotency:
    """What one `tools/call`'s `_meta` says: its checked key (if any), and whether it is
    a resend after a lost reply."""

    key: str | None = None
    resent: bool = False


NONE = Idempotency()


def read(meta: Any) -> Idempotency:
    """The idempotency `_meta` of a request.

    Raises:
        MCPError: -32602 when the key is present but malformed.
    """
    if not isinstance(meta, Mapping):
        return NONE
    resent = meta.get(RESENT_META_KEY) is True
    if IDEMPOTENCY_META_KEY not in meta:
        return Idempotency(None, resent) if resent else NONE
    return Idempotency(checked(meta[IDEMPOTENCY_META_KEY]), resent)


def checked(value: object) -> str:
    """`value` if it is a well-formed key; else -32602 saying why (never quoting it)."""
    if not isinstance(value, str):
        raise invalid_idempotency_key(f"must be a string, got {_json_type(value)}")
    if not MIN_KEY_LENGTH <= len(value) <= MAX_KEY_LENGTH:
        raise invalid_idempotency_key(
            f"must be {MIN_KEY_LENGTH} to {MAX_KEY_LENGTH} characters, got {len(value)}"
        )
    if _KEY_CHARACTERS.fullmatch(value) is None:
        raise invalid_idempotency_key("may contain only the characters A-Z a-z 0-9 _ -")
    return value


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list | tuple):
        return "an array"
    return type(value).__name__


def scoped_key(app: str | None, principal: str | None, key: str) -> str:
    """The store's dedupe key for an idempotency key: never the client's text itself."""
    text = SEPARATOR.join((app or "", principal or "", SCOPE, key))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def same_call(found: TaskRecord, name: str, arguments: dict[str, Any]) -> bool:
    """Whether the task found by a key is this call's: the same tool and the same
    arguments (a record from a store that dropped them is judged by its tool alone)."""
    return found.tool == name and (found.arguments is None or found.arguments == arguments)


def refuse_resend(call: Idempotency, name: str) -> None:
    """Before a call runs synchronously: a resend must not run the tool a second time.

    Raises:
        MCPError: -32602 when `call` is marked resent.
    """
    if call.resent:
        raise resent_not_run(name)
