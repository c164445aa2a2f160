"""The Lua helpers of the Redis store's flow control: where a claimable task waits.

This module owns `FLOW_PRELUDE`, the functions every script of `redis.flow_scripts`
shares (after `redis.scripts.PRELUDE`): the flow key names of `redis.keys` built in
Lua, and the invariant they keep. An active task nobody holds is in exactly one of

- the queued sets (`{P}:queued`, `{P}:queued:<app>`): ungated and due;
- `{P}:delayed`: its `not_before` was ahead when it was queued;
- its gate's waiting set for its lane (application) and owner: gated and due;

and a leased active gated task is in its gate's running set. `enqueue` puts a task
that became claimable in its place, `unlist` takes a task that was leased or ended
out of them (and into or out of the running set), `free_slot` gives a slot back;
`place_owner`, `rank_gate` and `settle_gate` keep the per-gate orders that
`claim_queued` reads in `O(log n)`: each lane's ready gates by the creation time of
their next task, and within a gate the owners in `stores.flow.plan_claims` order
(never served first by their oldest waiting task, then by the turn they were last
served in; turns are a counter per gate). A gate's turns are forgotten when nothing
waits in it or holds it. Every helper is idempotent (set adds and removals).

`history_key` names a task's history (`redis.operations`), `steps_key` and
`step_names_key` its durable steps (`redis.steps`); `expire_task` gives them its
task's TTL and `forget_task` deletes them with the hash, so every script that expires
or deletes a task hash (`purge` too) does the same to its history and steps.
"""

from __future__ import annotations

FLOW_PRELUDE = """
-- every key of a store starts with `{P}:`, and a prefix has no braces (`redis.keys`)
local B = string.match(KEYS[1], '^%b{}:')
local DELAYED, READY_LANES = B .. 'delayed', B .. 'gate-ready'

local function lane_of(app) if app then return #app .. ':' .. app end return '-' end
local function gate_key(g) return B .. 'gate:' .. g end
local function run_key(g) return B .. 'gate-run:' .. g end
local function lanes_key(g) return B .. 'gate-lanes:' .. g end
local function wait_key(l, g, o) return B .. 'gate-wait:' .. l .. #g .. ':' .. g .. o end
local function fresh_key(l, g) return B .. 'gate-fresh:' .. l .. g end
local function served_key(l, g) return B .. 'gate-served:' .. l .. g end
local function ready_key(l) return B .. 'gate-ready:' .. l end
-- a task's history (`redis.operations`) and steps (`redis.steps`): they expire and are
-- deleted with the task hash
local function history_key(id) return B .. 'events:' .. id end
local function steps_key(id) return B .. 'steps:' .. id end
local function step_names_key(id) return B .. 'step-names:' .. id end
local function forget_task(key, id)
  redis.call('DEL', key, history_key(id), steps_key(id), step_names_key(id))
end
local function expire_task(key, id, ms)
  redis.call('PEXPIRE', key, ms)
  redis.call('PEXPIRE', history_key(id), ms)
  redis.call('PEXPIRE', steps_key(id), ms)
  redis.call('PEXPIRE', step_names_key(id), ms)
end

-- owner `o` among gate g's owners in lane l, after its waiting set changed
local function place_owner(l, g, o)
  local head = redis.call('ZRANGE', wait_key(l, g, o), 0, 0, 'WITHSCORES')
  local fresh, served = fresh_key(l, g), served_key(l, g)
  local turn = head[1] and redis.call('HGET', gate_key(g), 't:' .. o)
  if not head[1] then
    redis.call('ZREM', fresh, o)
    redis.call('ZREM', served, o)
  elseif turn then
    redis.call('ZADD', served, turn, o)
    redis.call('ZREM', fresh, o)
  else
    redis.call('ZADD', fresh, head[2], o)
    redis.call('ZREM', served, o)
  end
end

-- gate g's next task in lane l (`plan_claims`): owner, id, creation score; nil: none
local function fair_head(l, g)
  while true do
    local o = redis.call('ZRANGE', fresh_key(l, g), 0, 0)[1]
    if not o then o = redis.call('ZRANGE', served_key(l, g), 0, 0)[1] end
    if not o then return nil end
    local head = redis.call('ZRANGE', wait_key(l, g, o), 0, 0, 'WITHSCORES')
    if head[1] then return o, head[1], head[2] end
    place_owner(l, g, o)  -- listed without a waiting task: drop it, look again
  end
end

local function gate_limit(g)
  local limit = tonumber(redis.call('HGET', gate_key(g), 'limit') or '') or 1
  if limit < 1 then return 1 end
  return limit
end

-- gate g in lane l: listed while tasks wait there, ready while a slot is free too
local function rank_gate(l, g)
  local o, _, score = fair_head(l, g)
  local ready = ready_key(l)
  if not o then
    redis.call('SREM', lanes_key(g), l)
    redis.call('ZREM', ready, g)
  else
    redis.call('SADD', lanes_key(g), l)
    if redis.call('SCARD', run_key(g)) < gate_limit(g) then
      redis.call('ZADD', ready, score, g)
    else
      redis.call('ZREM', ready, g)
    end
  end
  if redis.call('EXISTS', ready) == 1 then
    redis.call('SADD', READY_LANES, l)
  else
    redis.call('SREM', READY_LANES, l)
  end
end

-- gate g after its running set changed: ranked in every lane; an idle gate forgotten
local function settle_gate(g)
  for _, l in ipairs(redis.call('SMEMBERS', lanes_key(g))) do rank_gate(l, g) end
  if redis.call('EXISTS', lanes_key(g)) == 0 and redis.call('EXISTS', run_key(g)) == 0 then
    redis.call('DEL', gate_key(g))
  end
end

local function flow_fields(key)
  local v = redis.call('HMGET', key, 'created_at', 'app', 'gate', 'owner', 'not_before',
    'gate_limit')
  return {created = v[1], app = v[2], gate = v[3], owner = v[4] or '', not_before = v[5],
    limit = v[6]}
end

-- an active task nobody holds, put where `claim_queued` looks: delayed, its gate, queued
local function enqueue(queued, key, id, now)
  local f = flow_fields(key)
  if f.not_before and tonumber(f.not_before) > tonumber(now) then
    redis.call('ZADD', DELAYED, f.not_before, id)
  elseif f.gate then
    local l, g = lane_of(f.app), f.gate
    redis.call('HSET', gate_key(g), 'limit', f.limit or '1')
    redis.call('ZADD', wait_key(l, g, f.owner), f.created, id)
    place_owner(l, g, f.owner)
    rank_gate(l, g)
  else
    redis.call('ZADD', queued, f.created, id)
    if f.app then redis.call('ZADD', queued .. ':' .. f.app, f.created, id) end
  end
end

-- a task leased (`leased`: it holds its gate's slot now) or ended, out of every place
-- `claim_queued` looks
local function unlist(queued, key, id, leased)
  local f = flow_fields(key)
  redis.call('ZREM', queued, id)
  if f.app then redis.call('ZREM', queued .. ':' .. f.app, id) end
  redis.call('ZREM', DELAYED, id)
  if f.gate then
    local l, g = lane_of(f.app), f.gate
    if redis.call('ZREM', wait_key(l, g, f.owner), id) == 1 then place_owner(l, g, f.owner) end
    if leased then redis.call('SADD', run_key(g), id) else redis.call('SREM', run_key(g), id) end
    settle_gate(g)  -- ranks lane l too: it is listed while a task waits there
  end
end

-- a gated task given back (requeued, waiting for a retry): its slot is free again
local function free_slot(g, id)
  if g and redis.call('SREM', run_key(g), id) == 1 then settle_gate(g) end
end

-- the dedupe key of the task at `key` when it still points at the task
local function own_dedupe(key, id)
  local name = redis.call('HGET', key, 'dedupe_key')
  if not name then return nil end
  name = B .. 'dedupe:' .. name
  if redis.call('GET', name) == id then return name end
  return nil
end

-- a removed task's tombstone (`stores.flow.Tombstone`), kept `ttl_ms`
local function bury(hex, owner, at, reason, ttl_ms)
  local tomb = B .. 'tomb:' .. hex
  redis.call('DEL', tomb)
  redis.call('HSET', tomb, 'at', at, 'reason', reason)
  if owner then redis.call('HSET', tomb, 'owner', owner) end
  redis.call('PEXPIRE', tomb, ttl_ms)
end

-- delete the expired finished tasks (with dedupe keys, histories, steps); how many ids were
-- looked at
local function purge(terminal, base, now, limit)
  local ids = redis.call('ZRANGEBYSCORE', terminal, '-inf', now, 'LIMIT', 0, limit)
  for _, id in ipairs(ids) do
    local key = base .. id
    if not is_active(redis.call('HGET', key, 'status')) then
      local dedupe = own_dedupe(key, id)
      if dedupe then redis.call('DEL', dedupe) end
      forget_task(key, id)
    end
    redis.call('ZREM', terminal, id)
  end
  return #ids
end
"""

__all__ = ["FLOW_PRELUDE"]
