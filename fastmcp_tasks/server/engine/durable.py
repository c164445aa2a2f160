"""The durable task context: what a queued, recovered or resumed task needs from its call.

`TaskRecord.context` is written when the task is created (`server.creation`) and read
when a process other than the one that took the call runs it (`TaskRunner.resubmit`,
`LeaseKeeper.find_tool`). Both go through this module, so its keys are defined once:

- `inputKinds`: the input capabilities (`elicitation`, `sampling`, `roots`) the
  creating request declared (C31: a task never asks for what its caller cannot answer);
- `inputResponses`, `requestState`: MRTR answers and state the call arrived with
  (guard rounds resume from them);
- `version`: the tool version the call asked for, as core resolved it, so a worker
  or a recovery runs the same version;
- `relatedTaskIds`: the related task ids the call named that its caller may see
  (`server.related.allowed_related`), for `related_tasks()` in whichever process runs it;
- `caller`: with encryption keys, the caller's token, headers and session id, sealed
  (`sealed`): never in the clear.

An older record without a key reads as its default.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import mcp_types
from pydantic import TypeAdapter

from fastmcp_tasks.stores.base import TaskRecord

_RESPONSES: TypeAdapter[mcp_types.InputResponses] = TypeAdapter(mcp_types.InputResponses)


@dataclass(frozen=True)
class DurableContext:
    """The parts of a `tools/call` a task keeps in the store."""

    input_kinds: frozenset[str] = field(default_factory=frozenset)
    input_responses: mcp_types.InputResponses | None = None
    request_state: str | None = None
    version: str | None = None
    related: tuple[str, ...] = ()
    sealed_caller: str | None = None

    def dump(self) -> dict[str, Any]:
        """The JSON object stored as `record.context`."""
        stored: dict[str, Any] = {"inputKinds": sorted(self.input_kinds)}
        if self.input_responses:
            stored["inputResponses"] = _RESPONSES.dump_python(
                self.input_responses, mode="json", by_alias=True, exclude_none=True
            )
        if self.request_state is not None:
            stored["requestState"] = self.request_state
        if self.version is not None:
            stored["version"] = self.version
        if self.related:
            stored["relatedTaskIds"] = list(self.related)
        if self.sealed_caller is not None:
            stored["caller"] = self.sealed_caller
        return stored

    @classmethod
    def of(cls, record: TaskRecord) -> DurableContext:
        """What `record.context` says (an absent or older context reads as empty)."""
        stored = record.context or {}
        responses = stored.get("inputResponses")
        kinds: Iterable[str] = stored.get("inputKinds", ())
        return cls(
            input_kinds=frozenset(kinds),
            input_responses=None if responses is None else _RESPONSES.validate_python(responses),
            request_state=stored.get("requestState"),
            version=stored.get("version"),
            related=tuple(stored.get("relatedTaskIds", ())),
            sealed_caller=stored.get("caller"),
        )
