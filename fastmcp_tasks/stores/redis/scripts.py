"""The Redis store's Lua scripts: every read-modify-write of `RedisTaskStore`, atomically.

Redis runs a script to its end before serving any other command, so each script is
the compare-and-set (or the insert with its cap check) that the store contract asks
for, whichever process or instance calls it. Each script also keeps the indexes of
`redis.keys` consistent and appends its change to the change-feed stream in the same
step, so the feed never disagrees with the data.

Calling conventions. Per-task scripts (`CREATE` .. `REQUEUE`) take the keys
`[task hash, active, queued, terminal, changes]` (`CREATE` also the queued set of
the task's application) and start ARGV with `[task id, now, feed max length]`;
their own arguments follow from `ARGV[4]`. A queued task is in `queued` and, when
it has an `app`, in `queued .. ':' .. app` too (`redis.keys`): every script that
adds or removes one does both, reading the app from the hash where it must.
Times are epoch seconds as decimal text written by the caller (the client clock,
as in the other stores), never re-formatted by Lua except the expiry score, which
`%.17g` keeps exact. A script returns the task hash (`HGETALL`) after the change,
or `false` (`None` in Python) when it refuses.

Values inside task hashes are opaque JSON text to the scripts: they are moved
between fields, never decoded, so no JSON is re-encoded by Lua's cjson (which would
round numbers to 14 digits). Only feed details with answered keys come from cjson.
"""

from __future__ import annotations

_PRELUDE = """
local function is_active(s) return s == 'working' or s == 'input_required' end

local function emit(stream, maxlen, id, kind, status, details)
  redis.call('XADD', stream, 'MAXLEN', '~', maxlen, '*',
    't', id, 'k', kind, 's', status or '', 'd', details or '{}')
end

local function fields_with(key, mark)
  local out = {}
  for _, f in ipairs(redis.call('HKEYS', key)) do
    if string.sub(f, 1, 2) == mark then out[#out + 1] = f end
  end
  return out
end

local function purge(terminal, base, now, limit)
  local ids = redis.call('ZRANGEBYSCORE', terminal, '-inf', now, 'LIMIT', 0, limit)
  for _, id in ipairs(ids) do
    local key = base .. id
    if not is_active(redis.call('HGET', key, 'status')) then redis.call('DEL', key) end
    redis.call('ZREM', terminal, id)
  end
  return #ids
end

-- the application's queued set of the task at `key` (nil: the task has no app)
local function app_queue(queued, key)
  local app = redis.call('HGET', key, 'app')
  if app then return queued .. ':' .. app end
  return nil
end

local function unqueue(queued, key, id)
  redis.call('ZREM', queued, id)
  local mine = app_queue(queued, key)
  if mine then redis.call('ZREM', mine, id) end
end

local function set_message(key, mode, text)
  if mode == 'set' then redis.call('HSET', key, 'status_message', text)
  elseif mode == 'clear' then redis.call('HDEL', key, 'status_message') end
end
"""

#: KEYS[6]: the queued set of the task's application (`KEYS[3]` when it has none).
#: ARGV[4..]: max_tasks ('' none), task key base, 'active'|'terminal', created score,
#: queued '1'|'0', expiry score, pexpire ms ('' none), active cap ('' none), per-owner
#: active cap ('' none), the owner's active set key ('' no owner), the `queued` change's
#: details JSON, then field/value pairs.
#: Returns 'ok', 'exists', 'limit', 'limit_total' or 'limit_owner'. The owner's set is
#: cleaned of ids no longer active while it is counted, so it never drifts for long.
#: An active task stored without a lease is queued and announced (`queued` change).
CREATE = """
local key, id, now = KEYS[1], ARGV[1], ARGV[2]
if redis.call('EXISTS', key) == 1 then return 'exists' end
-- index entries of an evicted hash with this id are stale: drop them first
redis.call('ZREM', KEYS[2], id)
redis.call('ZREM', KEYS[3], id)
redis.call('ZREM', KEYS[4], id)
if KEYS[6] ~= KEYS[3] then redis.call('ZREM', KEYS[6], id) end
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
redis.call('HSET', key, unpack(ARGV, 15))
if ARGV[6] == 'active' then
  redis.call('ZADD', KEYS[2], ARGV[7], id)
  if owned_key ~= '' then redis.call('SADD', owned_key, id) end
  if ARGV[8] == '1' then
    redis.call('ZADD', KEYS[3], ARGV[7], id)
    if KEYS[6] ~= KEYS[3] then redis.call('ZADD', KEYS[6], ARGV[7], id) end
    emit(KEYS[5], ARGV[3], id, 'queued', redis.call('HGET', key, 'status'), ARGV[14])
  end
else
  redis.call('ZADD', KEYS[4], ARGV[9], id)
  if ARGV[10] ~= '' then redis.call('PEXPIRE', key, ARGV[10]) end
end
return 'ok'
"""

#: ARGV[4..]: target status, allowed current statuses (space separated), message mode
#: ('keep'|'set'|'clear'), message, terminal '1'|'0', has result, result JSON,
#: has error, error JSON, owner active-set key base.
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
  for _, f in ipairs({'arguments', 'context', 'result_json', 'error'}) do drop[#drop + 1] = f end
  redis.call('HDEL', key, unpack(drop))
  redis.call('HSET', key, 'terminal_at', now)
  if ARGV[9] == '1' then redis.call('HSET', key, 'result_json', ARGV[10]) end
  if ARGV[11] == '1' then redis.call('HSET', key, 'error', ARGV[12]) end
  redis.call('ZREM', KEYS[2], id)
  unqueue(KEYS[3], key, id)
  local owner = redis.call('HGET', key, 'owner')
  if owner then redis.call('SREM', ARGV[13] .. owner, id) end
  local retention = redis.call('HGET', key, 'retention_ms')
  local score = '+inf'
  if retention then
    score = string.format('%.17g', tonumber(now) + tonumber(retention) / 1000)
  end
  redis.call('ZADD', KEYS[4], score, id)
  emit(KEYS[5], ARGV[3], id, 'status', target)
  local snapshot = redis.call('HGETALL', key)
  if retention then redis.call('PEXPIRE', key, retention) end
  return snapshot
end
if target == 'working' then
  local drop = fields_with(key, 'r:')
  if #drop > 0 then redis.call('HDEL', key, unpack(drop)) end
end
emit(KEYS[5], ARGV[3], id, 'status', target)
return redis.call('HGETALL', key)
"""

#: ARGV[4..]: mode ('set'|'clear'), message.
SET_STATUS_MESSAGE = """
local key = KEYS[1]
local status = redis.call('HGET', key, 'status')
if not is_active(status) then return false end
local current = redis.call('HGET', key, 'status_message')
local changed
if ARGV[4] == 'set' then changed = current ~= ARGV[5] else changed = current ~= false end
if changed then
  set_message(key, ARGV[4], ARGV[5])
  redis.call('HSET', key, 'updated_at', ARGV[2])
  emit(KEYS[5], ARGV[3], ARGV[1], 'message', status)
end
return redis.call('HGETALL', key)
"""

#: ARGV[4..]: message mode, message, details JSON, then 'r:<key>'/JSON pairs.
REQUEST_INPUT = """
local key = KEYS[1]
if not is_active(redis.call('HGET', key, 'status')) then return false end
if #ARGV >= 8 then redis.call('HSET', key, unpack(ARGV, 7)) end
redis.call('HSET', key, 'status', 'input_required', 'updated_at', ARGV[2])
set_message(key, ARGV[4], ARGV[5])
emit(KEYS[5], ARGV[3], ARGV[1], 'inputs', 'input_required', ARGV[6])
return redis.call('HGETALL', key)
"""

#: ARGV[4..]: key/JSON pairs. Returns the accepted keys, or false when the task is absent.
ANSWER_INPUT = """
local key = KEYS[1]
local status = redis.call('HGET', key, 'status')
if not status then return false end
if status ~= 'input_required' then return {} end
local accepted = {}
for i = 4, #ARGV, 2 do
  local k = ARGV[i]
  if redis.call('HEXISTS', key, 'r:' .. k) == 1 then
    redis.call('HDEL', key, 'r:' .. k)
    redis.call('HSET', key, 'a:' .. k, ARGV[i + 1])
    accepted[#accepted + 1] = k
  end
end
if #accepted == 0 then return {} end
if #fields_with(key, 'r:') == 0 then
  status = 'working'
  redis.call('HSET', key, 'status', status)
  redis.call('HDEL', key, 'status_message')
end
redis.call('HSET', key, 'updated_at', ARGV[2])
emit(KEYS[5], ARGV[3], ARGV[1], 'answered', status, cjson.encode({keys = accepted}))
return accepted
"""

#: KEYS: [task hash]; ARGV: answer keys. Returns key/JSON pairs taken.
TAKE_ANSWERS = """
local out = {}
for i = 1, #ARGV do
  local field = 'a:' .. ARGV[i]
  local value = redis.call('HGET', KEYS[1], field)
  if value then
    redis.call('HDEL', KEYS[1], field)
    out[#out + 1] = ARGV[i]
    out[#out + 1] = value
  end
end
return out
"""

#: ARGV[4..]: details JSON, then request keys.
WITHDRAW_INPUT = """
local key = KEYS[1]
local status = redis.call('HGET', key, 'status')
if not is_active(status) then return false end
local drop = {}
for i = 5, #ARGV do
  local field = 'r:' .. ARGV[i]
  if redis.call('HEXISTS', key, field) == 1 then drop[#drop + 1] = field end
end
if #drop == 0 then return redis.call('HGETALL', key) end
redis.call('HDEL', key, unpack(drop))
redis.call('HSET', key, 'updated_at', ARGV[2])
if status == 'input_required' and #fields_with(key, 'r:') == 0 then
  status = 'working'
  redis.call('HSET', key, 'status', status)
  redis.call('HDEL', key, 'status_message')
end
emit(KEYS[5], ARGV[3], ARGV[1], 'inputs', status, ARGV[4])
return redis.call('HGETALL', key)
"""

REQUEST_CANCEL = """
local key = KEYS[1]
local status = redis.call('HGET', key, 'status')
if not status then return false end
if is_active(status) then
  redis.call('HSET', key, 'cancel_requested', '1')
  emit(KEYS[5], ARGV[3], ARGV[1], 'cancel_requested', status)
end
return redis.call('HGETALL', key)
"""

#: ARGV[4..]: owner, until, has expect_owner '1'|'0', expect_owner.
CLAIM = """
local key = KEYS[1]
local v = redis.call('HMGET', key, 'status', 'lease_owner', 'lease_expires')
if not is_active(v[1]) then return false end
local holder = v[2]
local free = (not holder) or holder == ARGV[4] or (ARGV[6] == '1' and holder == ARGV[7])
if not free and (tonumber(v[3] or '') or 0) > tonumber(ARGV[2]) then return false end
redis.call('HSET', key, 'lease_owner', ARGV[4], 'lease_expires', ARGV[5])
redis.call('HINCRBY', key, 'attempts', 1)
unqueue(KEYS[3], key, ARGV[1])
return redis.call('HGETALL', key)
"""

#: ARGV[4..]: owner. Queues the task again (both sets) and announces it (`queued`).
REQUEUE = """
local key, id = KEYS[1], ARGV[1]
local v = redis.call('HMGET', key, 'status', 'lease_owner', 'created_at', 'app')
if not is_active(v[1]) or v[2] ~= ARGV[4] then return false end
redis.call('HDEL', key, 'lease_owner', 'lease_expires')
redis.call('ZADD', KEYS[3], v[3], id)
local details = '{"app":null}'
if v[4] then
  redis.call('ZADD', KEYS[3] .. ':' .. v[4], v[3], id)
  details = cjson.encode({app = v[4]})
end
emit(KEYS[5], ARGV[3], id, 'queued', v[1], details)
return redis.call('HGETALL', key)
"""

#: KEYS: task hashes; ARGV: owner, until.
RENEW = """
for i = 1, #KEYS do
  local v = redis.call('HMGET', KEYS[i], 'status', 'lease_owner')
  if is_active(v[1]) and v[2] == ARGV[1] then
    redis.call('HSET', KEYS[i], 'lease_expires', ARGV[2])
  end
end
return 0
"""

#: KEYS: [the set to take from, queued]: `queued` itself for any application's tasks,
#: or one application's set. ARGV: task key base, owner, until, limit, one application
#: '1'|'0', its name. Returns {id, hash} pairs. Every id looked at leaves the set taken
#: from; a task taken also leaves the other set.
CLAIM_QUEUED = """
local limit, one_app, wanted = tonumber(ARGV[4]), ARGV[5] == '1', ARGV[6]
local taken = {}
while #taken < limit do
  local ids = redis.call('ZRANGE', KEYS[1], 0, limit - #taken - 1)
  if #ids == 0 then break end
  for _, id in ipairs(ids) do
    redis.call('ZREM', KEYS[1], id)
    local key = ARGV[1] .. id
    local v = redis.call('HMGET', key, 'status', 'lease_owner', 'app')
    if one_app then
      if v[3] == wanted then redis.call('ZREM', KEYS[2], id) else v[1] = false end
    elseif v[3] then
      redis.call('ZREM', KEYS[2] .. ':' .. v[3], id)
    end
    if is_active(v[1]) and not v[2] then
      redis.call('HSET', key, 'lease_owner', ARGV[2], 'lease_expires', ARGV[3])
      redis.call('HINCRBY', key, 'attempts', 1)
      taken[#taken + 1] = {id, redis.call('HGETALL', key)}
    end
  end
end
return taken
"""

#: KEYS: [terminal]; ARGV: task key base, now, batch size. Returns how many were removed.
PURGE = """
return purge(KEYS[1], ARGV[1], ARGV[2], tonumber(ARGV[3]))
"""

#: KEYS: [terminal]; ARGV: task key base, before, dry run '1'|'0', then task ids.
#: Deletes (or counts) the finished tasks among the ids that ended before `before`,
#: with their index entries; drops the entries of hashes already evicted. Returns how
#: many it deleted (or would delete).
PURGE_FINISHED = """
local base, before, dry = ARGV[1], tonumber(ARGV[2]), ARGV[3] == '1'
local removed = 0
for i = 4, #ARGV do
  local id = ARGV[i]
  local v = redis.call('HMGET', base .. id, 'status', 'terminal_at')
  if not v[1] then
    if not dry then redis.call('ZREM', KEYS[1], id) end
  elseif not is_active(v[1]) and v[2] and tonumber(v[2]) < before then
    removed = removed + 1
    if not dry then
      redis.call('DEL', base .. id)
      redis.call('ZREM', KEYS[1], id)
    end
  end
end
return removed
"""

#: Script name -> Lua source (with the shared helpers), registered once per store.
SCRIPTS: dict[str, str] = {
    name: _PRELUDE + body
    for name, body in {
        "create": CREATE,
        "transition": TRANSITION,
        "set_status_message": SET_STATUS_MESSAGE,
        "request_input": REQUEST_INPUT,
        "answer_input": ANSWER_INPUT,
        "take_answers": TAKE_ANSWERS,
        "withdraw_input": WITHDRAW_INPUT,
        "request_cancel": REQUEST_CANCEL,
        "claim": CLAIM,
        "requeue": REQUEUE,
        "renew": RENEW,
        "claim_queued": CLAIM_QUEUED,
        "purge": PURGE,
        "purge_finished": PURGE_FINISHED,
    }.items()
}

__all__ = ["SCRIPTS"]
