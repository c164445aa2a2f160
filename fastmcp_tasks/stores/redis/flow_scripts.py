"""The Redis store's scripts that queue, lease, end and remove tasks, keeping flow control.

This module owns every script that makes a task claimable or not: `CREATE` (with the
dedupe check), `TRANSITION`, `CLAIM`, `REQUEUE`, `RETRY_LATER`, `CLAIM_QUEUED` (in
`redis.claim_lua`: its ungated claim also begins each task's run), `PURGE` and
`PURGE_FINISHED`. Each keeps the places of `redis.flow_lua` (queued
sets, the delayed set, gate waiting and running sets) in step with the task hash in
the same atomic step, so a gate's running set is exactly its leased active tasks:
`CREATE` (a leased gated task), `CLAIM`, `CLAIM_QUEUED` add to it; `REQUEUE`,
`RETRY_LATER` and `TRANSITION` to a terminal state take out of it. Tasks that end
with a retention leave their tombstone here, pre-dated to their expiry (Redis evicts
the hash itself with its TTL, and the task's history `{P}:events:<id>` and steps with it);
`PURGE_FINISHED` writes a `purged` one. Every deletion of a hash deletes its history
and steps (`forget_task`).

Calling conventions are those of `redis.scripts`: per-task scripts take the keys
`[task hash, active, queued, terminal, changes]` and start ARGV with
`[task id, now, feed max length]`. Each runs as `redis.scripts.PRELUDE` +
`redis.flow_lua.FLOW_PRELUDE` + its body; `CLAIM_QUEUED` makes the flow helpers
only when a gate is ready or a retry is due, so a claim of ungated tasks costs what
it cost before gates (a check of two keys), and takes the keys `[the set taken
from, queued, changes]`.
"""

from __future__ import annotations

from fastmcp_tasks.stores.redis.claim_lua import CLAIM_QUEUED
from fastmcp_tasks.stores.redis.flow_lua import FLOW_PRELUDE

#: KEYS[6]: the queued set of the task's application (`KEYS[3]` when it has none).
#: ARGV[4..]: max_tasks ('' none), task key base, 'active'|'terminal', created score,
#: route ('q' queued, 'f' delayed or gated: `enqueue` reads the hash, 'r' leased and
#: gated, '' leased), expiry score, pexpire ms ('' none), active cap ('' none),
#: per-owner active cap ('' none), the owner's active set key ('' no owner), the `queued`
#: change's details JSON, dedupe key ('' none: no dedupe asked), dedupe window seconds
#: ('inf': for life), tombstone hash ('' none), tombstone ms, then field/value pairs.
#: Returns 'ok', 'exists', 'limit', 'limit_total', 'limit_owner', or `{id, hash}` of
#: the task that answers the call (dedupe: nothing created, caps not checked).
CREATE = """
local key, id, now = KEYS[1], ARGV[1], ARGV[2]
if redis.call('EXISTS', key) == 1 then return 'exists' end
local dedupe = ARGV[15]
if dedupe ~= '' then
  dedupe = B .. 'dedupe:' .. dedupe
  local held = redis.call('GET', dedupe)
  local found = held and ARGV[5] .. held
  local v = held and redis.call(
    'HMGET', found, 'status', 'terminal_at', 'retention_ms', 'created_at') or {}
  local ended, match = tonumber(v[2] or ''), is_active(v[1])
  local life = ARGV[16] == 'inf' -- the holder's whole retained life, any status: no arithmetic
  if v[1] and not match and ended and (life or v[1] ~= 'cancelled') then
    local kept = not v[3] or ended + tonumber(v[3]) / 1000 > tonumber(now)
    match = kept and (life or ended >= tonumber(now) - tonumber(ARGV[16]))
  end
  -- created before the window: a new call starts new work
  match = match and (life or tonumber(v[4] or '0') >= tonumber(now) - tonumber(ARGV[16]))
  if match then return {held, redis.call('HGETALL', found)} end
end
-- index entries, history and steps of an evicted hash with this id are stale: drop them
for i = 2, 4 do redis.call('ZREM', KEYS[i], id) end
if KEYS[6] ~= KEYS[3] then redis.call('ZREM', KEYS[6], id) end
forget_task(key, id)
local owned_key = ARGV[13]
if ARGV[6] == 'active' then
  local total = tonumber(ARGV[11])
  if total and redis.call('ZCARD', KEYS[2]) >= total then return 'limit_total' end
  local per_owner = tonumber(ARGV[12])
  if per_owner and owned_key ~= '' then
    local owned = 0
    for _, other in ipairs(redis.call('SMEMBERS', owned_key)) do
      if is_active(redis.call('HGET', ARGV[5] .. other, 'status')) then
        owned = owned + 1
      else
        redis.call('SREM', owned_key, other)
      end
    end
    if owned >= per_owner then return 'limit_owner' end
  end
end
local cap = tonumber(ARGV[4])
if cap then
  if redis.call('ZCARD', KEYS[2]) + redis.call('ZCARD', KEYS[4]) >= cap then
    purge(KEYS[4], ARGV[5], now, 1000)
    if redis.call('ZCARD', KEYS[2]) + redis.call('ZCARD', KEYS[4]) >= cap then
      return 'limit'
    end
  end
end
redis.call('HSET', key, unpack(ARGV, 19))
if dedupe ~= '' then redis.call('SET', dedupe, id) end
if ARGV[6] == 'active' then
  redis.call('ZADD', KEYS[2], ARGV[7], id)
  if owned_key ~= '' then redis.call('SADD', owned_key, id) end
  local route = ARGV[8]
  if route == 'q' then
    redis.call('ZADD', KEYS[3], ARGV[7], id)
    if KEYS[6] ~= KEYS[3] then redis.call('ZADD', KEYS[6], ARGV[7], id) end
  elseif route == 'f' then
    enqueue(KEYS[3], key, id, now)
  elseif route == 'r' then
    unlist(KEYS[3], key, id, true)
  end
  if route == 'q' or route == 'f' then
    emit(KEYS[5], ARGV[3], id, 'queued', redis.call('HGET', key, 'status'), ARGV[14])
  end
else
  redis.call('ZADD', KEYS[4], ARGV[9], id)
  if ARGV[10] ~= '' then
    if ARGV[17] ~= '' then
      local ttl = string.format('%.0f', tonumber(ARGV[10]) + tonumber(ARGV[18]))
      bury(ARGV[17], redis.call('HGET', key, 'owner'), ARGV[9], 'expired', ttl)
    end
    if dedupe ~= '' then redis.call('PEXPIRE', dedupe, ARGV[10]) end
    redis.call('PEXPIRE', key, ARGV[10])
  end
end
return 'ok'
"""

#: ARGV[4..]: target status, allowed current statuses (space separated), message mode
#: ('keep'|'set'|'clear'), message, terminal '1'|'0', has result, result JSON,
#: has error, error JSON, owner active-set key base, tombstone hash ('' none),
#: tombstone ms, '1' to answer 1 instead of the task hash (`settle`). An ended task keeps
#: its arguments, drops input state and context, and leaves every queue and its gate's
#: running set; with a retention its dedupe key and history expire with it and its
#: tombstone is written, dated to its expiry.
TRANSITION = """
local key, id, now = KEYS[1], ARGV[1], ARGV[2]
local current = redis.call('HGET', key, 'status')
if not current then return false end
local allowed = false
for s in string.gmatch(ARGV[5], '%S+') do
  if s == current then allowed = true end
end
if not allowed then return false end
local target = ARGV[4]
redis.call('HSET', key, 'status', target, 'updated_at', now)
set_message(key, ARGV[6], ARGV[7])
if ARGV[8] == '1' then
  local drop = fields_with(key, 'r:')
  for _, f in ipairs(fields_with(key, 'a:')) do drop[#drop + 1] = f end
  for _, f in ipairs({'context', 'result_json', 'error'}) do drop[#drop + 1] = f end
  redis.call('HDEL', key, unpack(drop))
  redis.call('HSET', key, 'terminal_at', now)
  if ARGV[9] == '1' then redis.call('HSET', key, 'result_json', ARGV[10]) end
  if ARGV[11] == '1' then redis.call('HSET', key, 'error', ARGV[12]) end
  redis.call('ZREM', KEYS[2], id)
  unlist(KEYS[3], key, id, false)
  local owner = redis.call('HGET', key, 'owner')
  if owner then redis.call('SREM', ARGV[13] .. owner, id) end
  local retention = redis.call('HGET', key, 'retention_ms')
  local score = '+inf'
  if retention then
    score = string.format('%.17g', tonumber(now) + tonumber(retention) / 1000)
    if ARGV[14] ~= '' then
      local ttl = string.format('%.0f', tonumber(retention) + tonumber(ARGV[15]))
      bury(ARGV[14], owner, score, 'expired', ttl)
    end
    local dedupe = own_dedupe(key, id)
    if dedupe then redis.call('PEXPIRE', dedupe, retention) end
  end
  redis.call('ZADD', KEYS[4], score, id)
  emit(KEYS[5], ARGV[3], id, 'status', target)
  local gate = redis.call('HGET', key, 'gate')
  if gate then  -- its slot is free: processes waiting on the gate claim at once
    local app = redis.call('HGET', key, 'app')
    local freed = {gate = gate}
    if app then freed.app = app end
    emit(KEYS[5], ARGV[3], id, 'queued', target, cjson.encode(freed))
  end
  local snapshot = 1
  if ARGV[16] ~= '1' then snapshot = redis.call('HGETALL', key) end
  if retention then expire_task(key, id, retention) end
  return snapshot
end
if target == 'working' then
  local drop = fields_with(key, 'r:')
  if #drop > 0 then redis.call('HDEL', key, unpack(drop)) end
end
emit(KEYS[5], ARGV[3], id, 'status', target)
if ARGV[16] == '1' then return 1 end
return redis.call('HGETALL', key)
"""

#: ARGV[4..]: owner, until, has expect_owner '1'|'0', expect_owner. A task nobody held
#: leaves its queue (or its wait) and takes a slot of its gate, whatever the limit.
CLAIM = """
local key = KEYS[1]
local v = redis.call('HMGET', key, 'status', 'lease_owner', 'lease_expires')
if not is_active(v[1]) then return false end
local holder = v[2]
local free = (not holder) or holder == ARGV[4] or (ARGV[6] == '1' and holder == ARGV[7])
if not free and (tonumber(v[3] or '') or 0) > tonumber(ARGV[2]) then return false end
redis.call('HSET', key, 'lease_owner', ARGV[4], 'lease_expires', ARGV[5])
if not holder then unlist(KEYS[3], key, ARGV[1], true) end
return redis.call('HGETALL', key)
"""

#: ARGV[4..]: owner. Queues the task again (its queue, gate or wait) and announces it; a
#: run that had begun (`phase` running, or none) waits to restart (`rules.give_back`).
REQUEUE = """
local key, id = KEYS[1], ARGV[1]
local v = redis.call('HMGET', key, 'status', 'lease_owner', 'app', 'gate', 'phase')
if not is_active(v[1]) or v[2] ~= ARGV[4] then return false end
redis.call('HDEL', key, 'lease_owner', 'lease_expires')
if not v[5] or v[5] == 'running' then redis.call('HSET', key, 'phase', 'restart') end
enqueue(KEYS[3], key, id, ARGV[2])
free_slot(v[4], id)
local details = '{"app":null}'
if v[3] then details = cjson.encode({app = v[3]}) end
emit(KEYS[5], ARGV[3], id, 'queued', v[1], details)
return redis.call('HGETALL', key)
"""

#: ARGV[4..]: owner, not_before (decimal text), message mode ('set'|'clear'), message.
#: `rules.retry`: refused when not active, leased to another or a cancel was asked.
RETRY_LATER = """
local key, id, now = KEYS[1], ARGV[1], ARGV[2]
local v = redis.call('HMGET', key, 'status', 'lease_owner', 'cancel_requested',
  'status_message', 'app', 'gate')
if not is_active(v[1]) or v[2] ~= ARGV[4] or v[3] == '1' then return false end
local kind = false
if v[1] ~= 'working' then
  kind = 'status'
elseif (ARGV[6] == 'set' and v[4] ~= ARGV[7]) or (ARGV[6] ~= 'set' and v[4]) then
  kind = 'message'
end
local drop = fields_with(key, 'r:')
drop[#drop + 1] = 'lease_owner'
drop[#drop + 1] = 'lease_expires'
redis.call('HDEL', key, unpack(drop))
redis.call('HSET', key, 'status', 'working', 'not_before', ARGV[5], 'phase', 'retry')
redis.call('HINCRBY', key, 'retries', 1)
set_message(key, ARGV[6], ARGV[7])
if kind then
  redis.call('HSET', key, 'updated_at', now)
  emit(KEYS[5], ARGV[3], id, kind, 'working')
end
enqueue(KEYS[3], key, id, now)
free_slot(v[6], id)
local app = 'null'
if v[5] then app = cjson.encode(v[5]) end
local details = '{"app":' .. app .. ',"not_before":' .. ARGV[5] .. '}'
emit(KEYS[5], ARGV[3], id, 'queued', 'working', details)
if v[6] then  -- its gate's slot is free while it waits: waiters claim at once
  emit(KEYS[5], ARGV[3], id, 'queued', 'working', cjson.encode({app = v[5] or nil, gate = v[6]}))
end
return redis.call('HGETALL', key)
"""

#: KEYS: [terminal]; ARGV: task key base, now, batch size. Returns how many were removed.
PURGE = """
return purge(KEYS[1], ARGV[1], ARGV[2], tonumber(ARGV[3]))
"""

#: KEYS: [terminal]; ARGV: task key base, before, dry run '1'|'0', now, tombstone ms
#: ('' none), then task id / tombstone hash pairs. Deletes (or counts) the finished
#: tasks among the ids that ended before `before`, with their index entries, dedupe
#: keys and histories, each leaving a `purged` tombstone; drops the entries of hashes
#: already evicted. Returns how many it deleted (or would delete).
PURGE_FINISHED = """
local base, before, dry = ARGV[1], tonumber(ARGV[2]), ARGV[3] == '1'
local removed = 0
for i = 6, #ARGV, 2 do
  local id, key = ARGV[i], base .. ARGV[i]
  local v = redis.call('HMGET', key, 'status', 'terminal_at', 'owner')
  if not v[1] then
    if not dry then redis.call('ZREM', KEYS[1], id) end
  elseif not is_active(v[1]) and v[2] and tonumber(v[2]) < before then
    removed = removed + 1
    if not dry then
      local dedupe = own_dedupe(key, id)
      if dedupe then redis.call('DEL', dedupe) end
      forget_task(key, id)
      redis.call('ZREM', KEYS[1], id)
      if ARGV[5] ~= '' then bury(ARGV[i + 1], v[3], ARGV[4], 'purged', ARGV[5]) end
    end
  end
end
return removed
"""

#: Script name -> Lua source after `redis.scripts.PRELUDE` (which `SCRIPTS` prefixes):
#: `FLOW_PRELUDE` then the body; `claim_queued` makes the helpers only when it needs them.
FLOW_SCRIPTS: dict[str, str] = {
    **{
        name: FLOW_PRELUDE + body
        for name, body in {
            "create": CREATE,
            "transition": TRANSITION,
            "claim": CLAIM,
            "requeue": REQUEUE,
            "retry_later": RETRY_LATER,
            "purge": PURGE,
            "purge_finished": PURGE_FINISHED,
        }.items()
    },
    "claim_queued": CLAIM_QUEUED,
}

__all__ = ["FLOW_SCRIPTS"]
