"""`CLAIM_QUEUED`, the Redis store's script of `claim_queued` (`redis.flow_scripts` registers it).

A worker's claim leases the oldest claimable tasks, ungated ones from the queued sets and
gated ones through their gates (`stores.flow.plan_claims`, with the helpers of
`redis.flow_lua`, made only when a gate is ready or a retry is due, so a claim of ungated
tasks costs a check of two keys more than it did before gates). Each ungated task's run
begins in the claim, as `redis.scripts.START_RUN` would (`stores.phases`): `phase`
running, one more attempt, its waiting message cleared with a `message` change unless
it waits to restart (whose message says which attempt it is), so a worker writes nothing
to start it. A task already `running` gets no other attempt; a gated task's run begins
with the engine's `start_run`, as on every store. It runs as `redis.scripts.PRELUDE`
(`is_active`, `emit`) + its body; all its keys share the `{prefix}` hash tag.
"""

from __future__ import annotations

from fastmcp_tasks.stores.redis.flow_lua import FLOW_PRELUDE
from fastmcp_tasks.stores.redis.queue_wakes import WAKE_PENDING_MS

#: KEYS: [the set to take from, queued, changes]: `queued` itself for any application's
#: tasks, or one application's set. ARGV: task key base, owner, until, limit, one
#: application '1'|'0', its name, now, feed max length. Due retries first go back to
#: their queue or gate. Then the oldest of the ungated head and the best ready gate's
#: next task (`plan_claims`) is taken, again and again. Returns {id, hash} pairs. Every
#: ungated id looked at leaves the set taken from; a task taken also leaves the other
#: set, and its run begins as `START_RUN` would (`stores.phases`: a gated one's does not).
CLAIM_QUEUED = (
    """
local base, owner, till = ARGV[1], ARGV[2], ARGV[3]
local limit, one_app, wanted, now = tonumber(ARGV[4]), ARGV[5] == '1', ARGV[6], ARGV[7]
local taken = {}
local function lease(key, id, waited)
  redis.call('HSET', key, 'lease_owner', owner, 'lease_expires', till)
  if waited then redis.call('HDEL', key, 'not_before') end
  taken[#taken + 1] = {id, redis.call('HGETALL', key)}
end
-- the ungated task `id` leaves the set taken from (and, taken, the other); taken if free,
-- its run begun: one more attempt, its waiting message cleared unless it waits to restart
local function take_queued(id)
  redis.call('ZREM', KEYS[1], id)
  local key = base .. id
  local v = redis.call('HMGET', key, 'status', 'lease_owner', 'app', 'not_before', 'phase',
    'status_message')
  if one_app then
    if v[3] == wanted then redis.call('ZREM', KEYS[2], id) else v[1] = false end
  elseif v[3] then
    redis.call('ZREM', KEYS[2] .. ':' .. v[3], id)
  end
  if not is_active(v[1]) or v[2] then return end
  if v[5] ~= 'running' then
    redis.call('HSET', key, 'phase', 'running')
    redis.call('HINCRBY', key, 'attempts', 1)
    if v[5] ~= 'restart' and v[6] then
      redis.call('HDEL', key, 'status_message')
      redis.call('HSET', key, 'updated_at', now)
      emit(KEYS[3], ARGV[8], id, 'message', v[1])
    end
  end
  lease(key, id, v[4])
end
-- with a gate ready or a retry due: the helpers of `redis.flow_lua` are made only then
local function claim_with_flow()
"""
    + FLOW_PRELUDE
    + """
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', DELAYED, '-inf', now, 'LIMIT', 0, 500)) do
    redis.call('ZREM', DELAYED, id)
    local v = redis.call('HMGET', base .. id, 'status', 'lease_owner')
    if is_active(v[1]) and not v[2] then enqueue(KEYS[2], base .. id, id, now) end
  end
  local lanes = one_app and {lane_of(wanted)} or redis.call('SMEMBERS', READY_LANES)
  local gl, gg, gs
  local function best_gate()
    gl, gg, gs = nil, nil, nil
    for _, l in ipairs(lanes) do
      local top = redis.call('ZRANGE', ready_key(l), 0, 0, 'WITHSCORES')
      local score = tonumber(top[2] or '')
      if score and (not gs or score < gs) then gl, gg, gs = l, top[1], score end
    end
  end
  local budget = 100000  -- never loop forever in Redis, whatever the data
  local function take_gated()
    budget = budget - 1
    local o, id = fair_head(gl, gg)
    if id then
      redis.call('ZREM', wait_key(gl, gg, o), id)
      local key = base .. id
      local v = redis.call('HMGET', key, 'status', 'lease_owner', 'gate', 'not_before')
      if is_active(v[1]) and not v[2] and v[3] == gg then
        lease(key, id, v[4])
        redis.call('SADD', run_key(gg), id)
        local turn = redis.call('HINCRBY', gate_key(gg), 'turn', 1)
        redis.call('HSET', gate_key(gg), 't:' .. o, turn)
        for _, l in ipairs(redis.call('SMEMBERS', lanes_key(gg))) do place_owner(l, gg, o) end
      else
        place_owner(gl, gg, o)  -- its next task, if any, leads now
      end
    else
      rank_gate(gl, gg)  -- nothing waits: unlisted
    end
    settle_gate(gg)
    best_gate()
  end
  best_gate()
  while #taken < limit and budget > 0 do
    local ids = redis.call('ZRANGE', KEYS[1], 0, limit - #taken - 1, 'WITHSCORES')
    if #ids == 0 then
      if not gl then break end
      take_gated()
    end
    for i = 1, #ids, 2 do
      local score = tonumber(ids[i + 1])
      while gl and gs < score and #taken < limit and budget > 0 do take_gated() end
      if #taken >= limit or budget <= 0 then break end
      take_queued(ids[i])
    end
  end
end
local P = string.match(KEYS[1], '^%b{}:')
local flow = redis.call('EXISTS', P .. 'gate-ready', P .. 'delayed') > 0
if flow and redis.call('EXISTS', P .. 'gate-ready') == 0 then  -- retries wait: any due?
  local due = redis.call('ZRANGE', P .. 'delayed', 0, 0, 'WITHSCORES')[2]
  flow = tonumber(due) <= tonumber(now)
end
if flow then
  claim_with_flow()
else
  while #taken < limit do  -- ungated tasks only: what a claim cost before gates
    local ids = redis.call('ZRANGE', KEYS[1], 0, limit - #taken - 1)
    if #ids == 0 then break end
    for _, id in ipairs(ids) do take_queued(id) end
  end
end
-- the wake-ups this claim answers may come again; one that filled the worker while more
-- waits wakes another worker (`redis.queue_wakes`)
local queue = KEYS[3] .. ':queue'
local mark = pending_mark(queue, one_app and wanted or nil)
redis.call('DEL', mark)
if #taken >= limit and (flow or redis.call('ZCARD', KEYS[1]) > 0) then
  redis.call('SET', mark, '1', 'PX', """
    + str(WAKE_PENDING_MS)
    + """)
  local details = one_app and cjson.encode({app = wanted}) or '{}'
  redis.call('XADD', queue, 'MAXLEN', '~', ARGV[8], '*', 't', '', 'k', 'queued', 's', '',
    'd', details)
end
return taken
"""
)

__all__ = ["CLAIM_QUEUED"]
