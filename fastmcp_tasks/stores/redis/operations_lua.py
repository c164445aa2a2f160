"""The Redis store's scripts for the operator records (`stores.operations`).

This module owns `OPERATION_SCRIPTS`: `ADD_EVENTS` (histories, bounded, only for live
tasks, with their task's TTL), `HOLD_PAUSED` and `RESUME` (pauses), `BEAT` (workers'
heartbeats) and `DELETE_FINISHED` (purging a chosen set). `redis.scripts.SCRIPTS`
registers them after `redis.scripts.PRELUDE`; the three that move or remove tasks
run `redis.flow_lua.FLOW_PRELUDE` too, so they keep the places `claim_queued` looks
in step as the other flow scripts do (`redis.flow_scripts`).

A held task waits in `{P}:delayed` with the score `PAUSED_UNTIL` (9999-12-31): never
due, so `claim_queued` never moves it; `RESUME` takes its tool's held tasks out of it
and queues them (or puts them in their gate) at once. A pause is the field
`app .. TAB .. tool` of `{P}:pauses` (`redis.keys`), built in Lua with
`string.char(9)`.
"""

from __future__ import annotations

from fastmcp_tasks.stores.redis.flow_lua import FLOW_PRELUDE

#: KEYS: task hash / history pairs, one per task. ARGV: now, MAX_EVENTS, then
#: (pair number, kind, event JSON) triples in order. An event of a task that is absent
#: or expired (by `terminal_at + retention_ms`, the client's clock, as `get` decides)
#: is dropped; a history of `MAX_EVENTS - 1` takes only a `finished`
#: (`stores.operations.keeps_event`). A history written to gets its task's TTL.
ADD_EVENTS = """
local now, most = tonumber(ARGV[1]), tonumber(ARGV[2])
local live, touched = {}, {}
local function alive(n)
  if live[n] == nil then
    local v = redis.call('HMGET', KEYS[2 * n - 1], 'status', 'terminal_at', 'retention_ms')
    local ended, kept = tonumber(v[2] or ''), tonumber(v[3] or '')
    live[n] = v[1] ~= false and not (ended and kept and ended + kept / 1000 <= now)
  end
  return live[n]
end
for i = 3, #ARGV, 3 do
  local n = tonumber(ARGV[i])
  if alive(n) then
    local stored = redis.call('LLEN', KEYS[2 * n])
    if stored < most - 1 or (ARGV[i + 1] == 'finished' and stored < most) then
      redis.call('RPUSH', KEYS[2 * n], ARGV[i + 2])
      touched[n] = true
    end
  end
end
for n in pairs(touched) do
  local ttl = redis.call('PTTL', KEYS[2 * n - 1])
  if ttl > 0 then redis.call('PEXPIRE', KEYS[2 * n], ttl) end
end
return 0
"""

#: KEYS: [task hash, active, queued, terminal, changes, pauses]. ARGV[4..]: owner,
#: message mode ('set'|'clear'), message, PAUSED_UNTIL (decimal text). `RETRY_LATER`
#: without the retry: refused unless the task's tool is paused, the task is active,
#: leased to `owner` and no cancel was asked. Unleased, `not_before` PAUSED_UNTIL (so it
#: waits in the delayed set), a begun run waits to restart (`rules.give_back`), a parked
#: task stays parked; a gated task frees its slot (a `queued` change for its gate's
#: waiters, as `RETRY_LATER` makes); a changed message is a `message` change.
HOLD_PAUSED = """
local key, id, now = KEYS[1], ARGV[1], ARGV[2]
local v = redis.call('HMGET', key, 'status', 'lease_owner', 'cancel_requested',
  'status_message', 'app', 'gate', 'phase', 'tool')
if not is_active(v[1]) or v[2] ~= ARGV[4] or v[3] == '1' then return false end
if redis.call('HEXISTS', KEYS[6], (v[5] or '') .. string.char(9) .. v[8]) == 0 then
  return false
end
redis.call('HDEL', key, 'lease_owner', 'lease_expires')
if v[7] == 'running' then  -- `rules.hold_back`: the claim's begun run is taken back
  local left = math.max(0, (tonumber(redis.call('HGET', key, 'attempts') or '') or 0) - 1)
  redis.call('HSET', key, 'attempts', left, 'phase', left == 0 and 'queued' or 'restart')
elseif not v[7] then
  redis.call('HSET', key, 'phase', 'restart')
end
redis.call('HSET', key, 'not_before', ARGV[7])
enqueue(KEYS[3], key, id, now)
free_slot(v[6], id)
if (ARGV[5] == 'set' and v[4] ~= ARGV[6]) or (ARGV[5] ~= 'set' and v[4]) then
  set_message(key, ARGV[5], ARGV[6])
  redis.call('HSET', key, 'updated_at', now)
  emit(KEYS[5], ARGV[3], id, 'message', v[1])
end
if v[6] then  -- its gate's slot is free while it is held: waiters claim at once
  emit(KEYS[5], ARGV[3], id, 'queued', v[1], cjson.encode({app = v[5] or nil, gate = v[6]}))
end
return redis.call('HGETALL', key)
"""

#: KEYS: [pauses, queued, changes]. ARGV: app ('' none), tool, now, feed max length,
#: task key base, PAUSED_UNTIL, RESUMED_MESSAGE. Deletes the pause and makes every task
#: held for it claimable now (its queue or gate), its message RESUMED_MESSAGE (a
#: `message` change, `updated_at` now), then a `queued` change for its app; how many,
#: or false when the tool was not paused.
RESUME = """
local app, tool, now, maxlen, base = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
if redis.call('HDEL', KEYS[1], app .. string.char(9) .. tool) == 0 then return false end
local released = 0
for _, id in ipairs(redis.call('ZRANGEBYSCORE', DELAYED, ARGV[6], ARGV[6])) do
  local key = base .. id
  local v = redis.call('HMGET', key, 'status', 'lease_owner', 'app', 'tool')
  if not is_active(v[1]) or v[2] then
    redis.call('ZREM', DELAYED, id)  -- stale: ended or leased
  elseif (v[3] or '') == app and v[4] == tool then
    redis.call('ZREM', DELAYED, id)
    redis.call('HDEL', key, 'not_before')
    redis.call('HSET', key, 'status_message', ARGV[7], 'updated_at', now)
    emit(KEYS[3], maxlen, id, 'message', v[1])
    enqueue(KEYS[2], key, id, now)
    released = released + 1
    local details = '{"app":null}'
    if v[3] then details = cjson.encode({app = v[3]}) end
    emit(KEYS[3], maxlen, id, 'queued', v[1], details)
  end
end
return released
"""

#: KEYS: [workers, workers-seen]. ARGV: worker id, `WorkerInfo` JSON, last_seen,
#: horizon (now - FORGET_AFTER). Upserts the worker; forgets those seen before the horizon.
BEAT = """
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
local old = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. ARGV[4])
for _, worker in ipairs(old) do
  redis.call('HDEL', KEYS[1], worker)
  redis.call('ZREM', KEYS[2], worker)
end
return #old
"""

#: KEYS: [terminal]; ARGV: task key base, now, tombstone ms ('' none), then task id /
#: tombstone hash pairs. Deletes the live finished tasks among the ids as
#: `PURGE_FINISHED` does (hash, index entry, dedupe key, history, a `purged`
#: tombstone); active, absent and expired ones stay as they are. Returns how many.
DELETE_FINISHED = """
local base, now = ARGV[1], tonumber(ARGV[2])
local removed = 0
for i = 4, #ARGV, 2 do
  local id, key = ARGV[i], base .. ARGV[i]
  local v = redis.call('HMGET', key, 'status', 'terminal_at', 'retention_ms', 'owner')
  local ended, kept = tonumber(v[2] or ''), tonumber(v[3] or '')
  if v[1] and not is_active(v[1]) and not (ended and kept and ended + kept / 1000 <= now) then
    local dedupe = own_dedupe(key, id)
    if dedupe then redis.call('DEL', dedupe) end
    forget_task(key, id)
    redis.call('ZREM', KEYS[1], id)
    if ARGV[3] ~= '' then bury(ARGV[i + 1], v[4], ARGV[2], 'purged', ARGV[3]) end
    removed = removed + 1
  end
end
return removed
"""

#: Script name -> Lua source after `redis.scripts.PRELUDE` (which `SCRIPTS` prefixes).
OPERATION_SCRIPTS: dict[str, str] = {
    "add_events": ADD_EVENTS,
    "hold_paused": FLOW_PRELUDE + HOLD_PAUSED,
    "resume": FLOW_PRELUDE + RESUME,
    "beat": BEAT,
    "delete_finished": FLOW_PRELUDE + DELETE_FINISHED,
}

__all__ = ["OPERATION_SCRIPTS"]
