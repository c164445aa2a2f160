"""The Redis store's durable steps (`stores.steps.StepStore`), mixed into `RedisTaskStore`.

This module owns `STEP_SCRIPTS` (the `save_step` script) and the two calls. Where a
task's steps live is `redis.keys` (`{P}:steps:<id>`, a list in recording order, and
`{P}:step-names:<id>`, a hash of the recorded names and the values' byte total):

- `save_step`: one `save_step` script call, which reads the task's status (absent or
  not active: `0`, nothing written), the name (recorded already: `1`, nothing
  changed), the count (`LLEN`) and byte total, checks the bounds passed as arguments
  (read from `stores.steps` at each call, so a test can lower them) and appends the
  step, all in one atomic step: two processes saving at once cannot both take the last
  place. A refusal answers the count and total, for `step_limit_error`'s message. A
  written step gets its task's TTL, if it has one; the scripts that end a task give
  both keys its TTL and every script that deletes a task hash deletes them
  (`redis.flow_lua.forget_task`).
- `steps`: a `MULTI` of the task's liveness fields and the list, so steps are never
  shown for an expired task that Redis has not evicted yet.

A value's size is `#value` in Lua: the bytes redis-py sent, its UTF-8 encoding.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, TypeVar

from fastmcp_tasks.errors import StepLimitExceeded
from fastmcp_tasks.stores import steps as limits
from fastmcp_tasks.stores.steps import StepRecord, step_limit_error

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from fastmcp_tasks.stores.redis.keys import RedisKeys

T = TypeVar("T")

#: KEYS: [task hash, steps list, step-names hash]. ARGV: name, entry head (JSON of
#: name and time), value JSON, MAX_STEPS, MAX_STEP_BYTES, MAX_STEPS_BYTES. Returns 0
#: (absent or not active), 1 (recorded now or already) or `{count, total, size}` (a
#: bound refuses it; nothing written). The checks are `stores.steps.step_limit_error`'s.
SAVE_STEP = """
if not is_active(redis.call('HGET', KEYS[1], 'status')) then return 0 end
local field = 'n:' .. ARGV[1]
if redis.call('HEXISTS', KEYS[3], field) == 1 then return 1 end
local size, count = #ARGV[3], redis.call('LLEN', KEYS[2])
local total = tonumber(redis.call('HGET', KEYS[3], 'bytes') or '0')
if size > tonumber(ARGV[5]) or count >= tonumber(ARGV[4])
    or total + size > tonumber(ARGV[6]) then
  return {count, total, size}
end
redis.call('RPUSH', KEYS[2], ARGV[2] .. '\\n' .. ARGV[3])
redis.call('HSET', KEYS[3], field, 1)
redis.call('HINCRBY', KEYS[3], 'bytes', size)
local ttl = redis.call('PTTL', KEYS[1])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[2], ttl)
  redis.call('PEXPIRE', KEYS[3], ttl)
end
return 1
"""

#: Script name -> Lua source after `redis.scripts.PRELUDE` (which `SCRIPTS` prefixes).
STEP_SCRIPTS: dict[str, str] = {"save_step": SAVE_STEP}


def decode_step(entry: str) -> StepRecord:
    """A stored list entry (head JSON, a newline, the value) as a `StepRecord`."""
    head, _, value = entry.partition("\n")
    name, at = json.loads(head)
    return StepRecord(name, value, float(at))


class RedisSteps:
    """The `StepStore` methods of `RedisTaskStore`."""

    if TYPE_CHECKING:
        keys: RedisKeys

        def _require(self) -> aioredis.Redis: ...

        async def _guard(self, call: Awaitable[T]) -> T: ...

        async def _script(self, name: str, keys: list[str], args: list[Any]) -> Any: ...

        async def _live_list(self, task_id: str, key: str) -> list[Any]: ...

    async def save_step(self, task_id: str, name: str, value_json: str, at: float) -> bool:
        keys = [self.keys.task(task_id), self.keys.steps(task_id), self.keys.step_names(task_id)]
        head = json.dumps([name, at], ensure_ascii=False)
        bounds = [limits.MAX_STEPS, limits.MAX_STEP_BYTES, limits.MAX_STEPS_BYTES]
        answer = await self._script("save_step", keys, [name, head, value_json, *bounds])
        if isinstance(answer, list):
            count, total, size = (int(x) for x in answer)
            refusal = step_limit_error(count, total, size)
            raise StepLimitExceeded(refusal or "the task's recorded steps are at a bound")
        return bool(answer)

    async def steps(self, task_id: str) -> list[StepRecord]:
        entries = await self._live_list(task_id, self.keys.steps(task_id))
        return [decode_step(entry) for entry in entries]


__all__ = ["STEP_SCRIPTS", "RedisSteps", "decode_step"]
