"""The Redis store's Lua scripts: every read-modify-write of `RedisTaskStore`, atomically.

Redis runs a script to its end before serving any other command, so each script is
the compare-and-set (or the insert with its cap check) that the store contract asks
for, whichever process or instance calls it. Each script also keeps the indexes of
`redis.keys` consistent and appends its change to the change-feed stream in the same
step, so the feed never disagrees with the data; a change a task engine waits for
also goes to the wake stream (`{P}:changes:wake`, `WAKE_KINDS`: a cancel request, an
answer), which a worker's runner reads instead of every change, or, when a task is
queued, to the queue stream (`{P}:changes:queue`), of which each application's workers
share the entries (`redis.queue_wakes`).

This module owns `PRELUDE` (the helpers every script shares), `SCRIPTS` (every
script of the store) and the scripts that change a task without queueing, leasing,
ending or removing it (messages, a run's start, input, cancel requests, lease renewals). Those that
do keep flow control too and are `redis.flow_scripts`; those of the operator records
(histories, pauses, workers) are `redis.operations_lua`; durable steps `redis.steps`.

Calling conventions. Per-task scripts take the keys
`[task hash, active, queued, terminal, changes]` (`create` also the queued set of
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

from fastmcp_tasks.stores.redis.flow_scripts import FLOW_SCRIPTS
from fastmcp_tasks.stores.redis.operations_lua import OPERATION_SCRIPTS
from fastmcp_tasks.stores.redis.queue_wakes import WAKE_PENDING_MS
from fastmcp_tasks.stores.redis.steps import STEP_SCRIPTS

#: The change kinds `emit` also appends to the wake stream (keep in step with its Lua);
#: a `queued` change goes to the queue stream instead (`redis.queue_wakes`). Writers
#: before the queue stream appended `queued` to the wake stream too.
WAKE_KINDS = frozenset({"cancel_requested", "answered"})

PRELUDE = (
    """
local function is_active(s) return s == 'working' or s == 'input_required' end

-- the pending mark of an application's wake-ups (`redis.queue_wakes`), from the queue stream
local function pending_mark(queue, app)
  if app then return queue .. ':pending:a:' .. app end
  return queue .. ':pending:*'
end

-- whether a `queued` change wakes a worker: one that waits for a time (`not_before`) always,
-- any other only when no claim of its application is on its way, and it marks one as such
local function wake_due(queue, details)
  if string.find(details, 'not_before', 1, true) then return true end
  local ok, parsed = pcall(cjson.decode, details)
  local app = nil
  if ok and type(parsed) == 'table' and type(parsed.app) == 'string' then app = parsed.app end
  return redis.call('SET', pending_mark(queue, app), '1', 'NX', 'PX', """
    + str(WAKE_PENDING_MS)
    + """) ~= false
end

local function emit(stream, maxlen, id, kind, status, details)
  redis.call('XADD', stream, 'MAXLEN', '~', maxlen, '*',
    't', id, 'k', kind, 's', status or '', 'd', details or '{}')
  local also = nil
  if kind == 'queued' then
    if wake_due(stream .. ':queue', details or '{}') then also = stream .. ':queue' end
  elseif kind == 'cancel_requested' or kind == 'answered' then also = stream .. ':wake' end
  if also then
    redis.call('XADD', also, 'MAXLEN', '~', maxlen, '*',
      't', id, 'k', kind, 's', status or '', 'd', details or '{}')
  end
end

local function fields_with(key, mark)
  local out = {}
  for _, f in ipairs(redis.call('HKEYS', key)) do
    if string.sub(f, 1, 2) == mark then out[#out + 1] = f end
  end
  return out
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
)

#: ARGV[4..]: mode ('set'|'clear'), message, '1' to answer 1 instead of the task hash
#: (`settle_message`).
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
if ARGV[6] == '1' then return 1 end
return redis.call('HGETALL', key)
"""

#: ARGV[4..]: owner, message mode ('set'|'clear'), message. `rules.begin`: the run of a
#: waiting task leased to `owner` begins (`phase` running, one more attempt); refused when
#: not active or leased to another; a task already running is returned as it is.
START_RUN = """
local key = KEYS[1]
local v = redis.call('HMGET', key, 'status', 'lease_owner', 'phase', 'status_message')
if not is_active(v[1]) or v[2] ~= ARGV[4] then return false end
if v[3] == 'running' then return redis.call('HGETALL', key) end
redis.call('HSET', key, 'phase', 'running')
redis.call('HINCRBY', key, 'attempts', 1)
local changed
if ARGV[5] == 'set' then changed = v[4] ~= ARGV[6] else changed = v[4] ~= false end
if changed then
  set_message(key, ARGV[5], ARGV[6])
  redis.call('HSET', key, 'updated_at', ARGV[2])
  emit(KEYS[5], ARGV[3], ARGV[1], 'message', v[1])
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

#: KEYS[1]: a task hash; its fields but `arguments` and `context` (`peek`), flat. The
#: two are never read, not even into the script's memory; the others are read a
#: thousand at a time (`unpack` takes no more than a few thousand values).
PEEK = """
local wanted, flat = {}, {}
for _, field in ipairs(redis.call('HKEYS', KEYS[1])) do
  if field ~= 'arguments' and field ~= 'context' then wanted[#wanted + 1] = field end
end
for first = 1, #wanted, 1000 do
  local last = math.min(first + 999, #wanted)
  local values = redis.call('HMGET', KEYS[1], unpack(wanted, first, last))
  for i = first, last do
    flat[#flat + 1] = wanted[i]
    flat[#flat + 1] = values[i - first + 1]
  end
end
return flat
"""

#: Script name -> Lua source (with the shared helpers, which `peek` needs none of), every
#: script of the store (`redis.flow_scripts`, `redis.operations_lua` and `redis.steps`
#: too), registered once per store.
SCRIPTS: dict[str, str] = {
    "peek": PEEK,
    **{
        name: PRELUDE + body
        for name, body in {
            "set_status_message": SET_STATUS_MESSAGE,
            "start_run": START_RUN,
            "request_input": REQUEST_INPUT,
            "answer_input": ANSWER_INPUT,
            "take_answers": TAKE_ANSWERS,
            "withdraw_input": WITHDRAW_INPUT,
            "request_cancel": REQUEST_CANCEL,
            "renew": RENEW,
        }.items()
    },
    **{name: PRELUDE + body for name, body in FLOW_SCRIPTS.items()},
    **{name: PRELUDE + body for name, body in OPERATION_SCRIPTS.items()},
    **{name: PRELUDE + body for name, body in STEP_SCRIPTS.items()},
}

__all__ = ["PRELUDE", "SCRIPTS"]
