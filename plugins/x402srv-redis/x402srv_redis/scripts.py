"""The Lua scripts: every change that touches several keys is one of these.

Redis runs a script without interleaving any other command, so each script is
one atomic step, the Redis counterpart of the sqlite store's ``BEGIN
IMMEDIATE`` transactions. Each reads everything it decides on before its first
write, so an error (a wrong key type, a bug) stops it before anything changed.

The decisions are those of ``x402srv.stores.rules``:

- ``CREATE``: one or more records (the store sends the creates that queued
  while the previous call was on the wire together, ``batch``), each decided
  as if on its own, in order: an existing requestId wins, then a duplicate
  challengeId is an error, then a payment claimed by another challenge refuses
  the insert.
- ``TRANSITION``: the caller read the record, checked its state and attempt
  with ``check_state`` and computed the new record with
  ``ChallengeRecord.apply``; the script applies it only if the record's write
  counter ``ver`` is still the one read (otherwise the caller reads again), so
  the attempt checks of SETTLING -> SETTLING and PAID -> PAID hold too, and
  only if neither claim belongs to another challenge (payment first, then
  txHash, as ``claim_conflict``). A release frees the claim only if
  this challenge owns it.

Numbers that end up in records or sorted sets (``updated_at``, lease expiry)
come from Python as ``repr(float)`` strings and are stored as given: Lua's
``tostring`` would round them to 14 digits. Every script starts with a
``#!lua`` line, so Redis (7 or newer) refuses a writing script *before* it
runs when the server is out of memory, instead of failing half-way.
"""

from __future__ import annotations

__all__ = [
    "ACQUIRE_LEASE",
    "ADD_COUNTS",
    "BY_INDEX",
    "COUNT_HITS",
    "CREATE",
    "FIND",
    "LIST",
    "PRUNE",
    "PRUNE_TASKS",
    "READ_COUNTS",
    "RELEASE_LEASE",
    "SAVE_TASK",
    "TAKE_OVER_LEASE",
    "TRANSITION",
]

# Sorting by (updated_at, challengeId) as sqlite's ORDER BY does: byte order for
# the id, since Lua's ``<`` on strings follows the server's locale.
_BEFORE = """
local function id_before(x, y)
  for i = 1, math.min(#x, #y) do
    local p, q = string.byte(x, i), string.byte(y, i)
    if p ~= q then return p < q end
  end
  return #x < #y
end

local function before(a, b)
  if a[1] ~= b[1] then return a[1] < b[1] end
  return id_before(a[2], b[2])
end
"""

# Up to ``need`` live members of a by-state/by-updated set scored from ``min``
# to ``max``, oldest first, each with one field of its record. Members for
# which ``skip(score, id)`` is true (those at a cursor's score up to its id)
# are passed over and do not count, however many there are: the next batch
# starts after them. Members whose record expired (its TTL ran out) are skipped
# too and, when ``dangling`` is a table, collected.
_COLLECT = """
local function collect(prefix, zset, min, max, need, field, skip, dangling)
  local out, offset = {}, 0
  while #out < need do
    local got = redis.call('ZRANGEBYSCORE', zset, min, max, 'WITHSCORES',
                           'LIMIT', offset, need)
    if #got == 0 then break end
    for j = 1, #got, 2 do
      local id, score = got[j], tonumber(got[j + 1])
      if not (skip and skip(score, id)) then
        local value = redis.call('HGET', prefix .. 'c:' .. id, field)
        if value then
          out[#out + 1] = {score, id, value, zset}
        elseif dangling then
          dangling[#dangling + 1] = {id, zset}
        end
      end
    end
    offset = offset + #got / 2
  end
  return out
end
"""

CREATE = """#!lua
-- ARGV: prefix, ttl, then seven per record, in call order:
--       id, requestId, json, state, updated_at, payment claim key ("" for none),
--       payer (store_rules.payer_of, "" for none: filed in by-payer:<payer>)
-- Returns one outcome per record: 1 created, 0 duplicate challengeId,
-- the existing record's json (its requestId was taken), {holder} (payment claimed).
-- Every decision is taken before the first write; records earlier in the call
-- count as written already (``made``), so the calls decide as if run one by one.
local prefix, ttl = ARGV[1], ARGV[2]
local made = {rid = {}, id = {}, claim = {}}
local out, writes = {}, {}
for b = 3, #ARGV, 7 do
  local id, rid, claim = ARGV[b], ARGV[b + 1], ARGV[b + 5]
  local json = made.rid[rid]
  if not json then
    local owner = redis.call('GET', prefix .. 'rid:' .. rid)
    if owner then json = redis.call('HGET', prefix .. 'c:' .. owner, 'json') end
  end
  local holder = nil
  if claim ~= '' then
    holder = made.claim[claim] or redis.call('GET', prefix .. 'pay:' .. claim)
    if holder == id then holder = nil end
  end
  if json then
    out[#out + 1] = json
  elseif made.id[id] or redis.call('EXISTS', prefix .. 'c:' .. id) == 1 then
    out[#out + 1] = 0
  elseif holder then
    out[#out + 1] = {holder}
  else
    out[#out + 1] = 1
    made.rid[rid], made.id[id] = ARGV[b + 2], true
    if claim ~= '' then made.claim[claim] = id end
    writes[#writes + 1] = b
  end
end
for _, b in ipairs(writes) do
  local id, rid, state, at, claim = ARGV[b], ARGV[b + 1], ARGV[b + 3], ARGV[b + 4], ARGV[b + 5]
  local key = prefix .. 'c:' .. id
  redis.call('HSET', key, 'json', ARGV[b + 2], 'state', state, 'updated_at', at,
             'rid', rid, 'ver', '1')
  redis.call('EXPIRE', key, ttl)
  redis.call('SET', prefix .. 'rid:' .. rid, id, 'EX', ttl)
  redis.call('ZADD', prefix .. 'by-updated', at, id)
  redis.call('ZADD', prefix .. 'by-state:' .. state, at, id)
  if claim ~= '' then
    local claims = prefix .. 'claims:' .. id
    redis.call('SET', prefix .. 'pay:' .. claim, id, 'EX', ttl)
    redis.call('SADD', claims, prefix .. 'pay:' .. claim)
    redis.call('EXPIRE', claims, ttl)
  end
  local payer = ARGV[b + 6]
  if payer ~= '' then
    redis.call('HSET', key, 'payer', payer)
    redis.call('ZADD', prefix .. 'by-payer:' .. payer, at, id)
    redis.call('EXPIRE', prefix .. 'by-payer:' .. payer, ttl)
  end
end
return out
"""

TRANSITION = """#!lua
-- KEYS: c:<id>, pay:<claim>, tx:<claim>, pay:<released> (each KEYS[1] when unused),
--       claims:<id>, rid:<requestId>, by-updated, by-state:<from>, by-state:<to>,
--       by-payer:<payer before>, by-payer:<payer after> (each KEYS[1] when none)
-- ARGV: ver as read, id, json, to-state, updated_at, ttl, claim-payment, claim-tx, release,
--       payer before, payer after ("" for none)
local ver = redis.call('HGET', KEYS[1], 'ver')
if not ver then return {'missing'} end
if ver ~= ARGV[1] then return {'stale'} end
local id, ttl = ARGV[2], ARGV[6]
local claim_payment, claim_tx = ARGV[7] == '1', ARGV[8] == '1'
if claim_payment then
  local owner = redis.call('GET', KEYS[2])
  if owner and owner ~= id then return {'payment', owner} end
end
if claim_tx then
  local owner = redis.call('GET', KEYS[3])
  if owner and owner ~= id then return {'tx', owner} end
end
local release = ARGV[9] == '1' and redis.call('GET', KEYS[4]) == id
redis.call('HSET', KEYS[1], 'json', ARGV[3], 'state', ARGV[4], 'updated_at', ARGV[5])
redis.call('HINCRBY', KEYS[1], 'ver', 1)
redis.call('ZREM', KEYS[8], id)
redis.call('ZADD', KEYS[9], ARGV[5], id)
redis.call('ZADD', KEYS[7], ARGV[5], id)
if release then
  redis.call('DEL', KEYS[4])
  redis.call('SREM', KEYS[5], KEYS[4])
end
if claim_payment then
  redis.call('SET', KEYS[2], id)
  redis.call('SADD', KEYS[5], KEYS[2])
end
if claim_tx then
  redis.call('SET', KEYS[3], id)
  redis.call('SADD', KEYS[5], KEYS[3])
end
local payer_before, payer_after = ARGV[10], ARGV[11]
if payer_before ~= '' and payer_before ~= payer_after then redis.call('ZREM', KEYS[10], id) end
if payer_after ~= '' then
  redis.call('HSET', KEYS[1], 'payer', payer_after)
  redis.call('ZADD', KEYS[11], ARGV[5], id)
  redis.call('EXPIRE', KEYS[11], ttl)
elseif payer_before ~= '' then
  redis.call('HDEL', KEYS[1], 'payer')
end
-- The record, its index and its claims live on together from this write.
redis.call('EXPIRE', KEYS[1], ttl)
redis.call('EXPIRE', KEYS[6], ttl)
for _, key in ipairs(redis.call('SMEMBERS', KEYS[5])) do redis.call('EXPIRE', key, ttl) end
redis.call('EXPIRE', KEYS[5], ttl)
return {'applied'}
"""

BY_INDEX = """#!lua flags=no-writes
-- KEYS: rid:<requestId> | pay:<key> | tx:<txHash>; ARGV: prefix
local id = redis.call('GET', KEYS[1])
if not id then return false end
return redis.call('HGET', ARGV[1] .. 'c:' .. id, 'json')
"""

LIST = (
    """#!lua flags=no-writes
-- ARGV: prefix, max score ("+inf" or "(<updated_before>"), limit, filtered ("1"/"0"),
--       cursor score ("" for none), cursor id, states...
"""
    + _BEFORE
    + _COLLECT
    + """
local prefix, limit = ARGV[1], tonumber(ARGV[3])
-- A cursor (score, id): the range starts at its score, inclusive, and a member
-- at exactly that score is listed only if its id sorts after the cursor's.
local min, skip = '-inf', nil
if ARGV[5] ~= '' then
  local score, id = tonumber(ARGV[5]), ARGV[6]
  min = ARGV[5]
  skip = function(s, member) return s == score and not id_before(id, member) end
end
local zsets = {}
if ARGV[4] == '0' then
  zsets[1] = prefix .. 'by-updated'
else
  for i = 7, #ARGV do zsets[#zsets + 1] = prefix .. 'by-state:' .. ARGV[i] end
end
local found = {}
for _, zset in ipairs(zsets) do
  for _, item in ipairs(collect(prefix, zset, min, ARGV[2], limit, 'json', skip, nil)) do
    found[#found + 1] = item
  end
end
table.sort(found, before)
local out = {}
for i = 1, math.min(limit, #found) do out[i] = found[i][3] end
return out
"""
)

PRUNE = (
    """#!lua
-- KEYS: by-updated; ARGV: prefix, max score ("(<updated_before>"), limit, states...
"""
    + _BEFORE
    + _COLLECT
    + """
local prefix, limit = ARGV[1], tonumber(ARGV[3])
local found, dangling = {}, {}
for i = 4, #ARGV do
  local zset = prefix .. 'by-state:' .. ARGV[i]
  for _, item in ipairs(collect(prefix, zset, '-inf', ARGV[2], limit, 'rid', nil, dangling)) do
    found[#found + 1] = item
  end
end
table.sort(found, before)
local deleted = 0
for i = 1, math.min(limit, #found) do
  local id, rid, zset = found[i][2], found[i][3], found[i][4]
  local index = prefix .. 'rid:' .. rid
  if redis.call('GET', index) == id then redis.call('DEL', index) end
  local claims = prefix .. 'claims:' .. id
  for _, key in ipairs(redis.call('SMEMBERS', claims)) do
    if redis.call('GET', key) == id then redis.call('DEL', key) end
  end
  local payer = redis.call('HGET', prefix .. 'c:' .. id, 'payer')
  if payer then redis.call('ZREM', prefix .. 'by-payer:' .. payer, id) end
  redis.call('DEL', claims, prefix .. 'c:' .. id)
  redis.call('ZREM', zset, id)
  redis.call('ZREM', KEYS[1], id)
  deleted = deleted + 1
end
-- Members whose record expired by TTL leave the sets too.
for _, item in ipairs(dangling) do
  redis.call('ZREM', item[2], item[1])
  redis.call('ZREM', KEYS[1], item[1])
end
return deleted
"""
)

FIND = (
    """#!lua flags=no-writes
-- ARGV: prefix, limit, cursor score ("" for none), cursor id, payer ("" for none), states...
-- Newest first by (updated_at, challengeId). Without a payer: one set per state
-- (or by-updated), merged. With one: the payer's set, filtered by state.
"""
    + _BEFORE
    + """
local prefix, limit = ARGV[1], tonumber(ARGV[2])
-- A cursor (score, id): the range ends at its score, inclusive, and a member at
-- exactly that score is listed only if its id sorts before the cursor's.
local max, skip = '+inf', nil
if ARGV[3] ~= '' then
  local score, id = tonumber(ARGV[3]), ARGV[4]
  max = ARGV[3]
  skip = function(s, member) return s == score and not id_before(member, id) end
end
local states = nil
if #ARGV >= 6 then
  states = {}
  for i = 6, #ARGV do states[ARGV[i]] = true end
end

-- Up to ``need`` live members of ``zset`` from the newest down, each with its
-- record's JSON; with ``wanted``, only records in one of those states.
local function newest(zset, need, wanted)
  local out, offset = {}, 0
  while #out < need do
    local got = redis.call('ZREVRANGEBYSCORE', zset, max, '-inf', 'WITHSCORES',
                           'LIMIT', offset, need)
    if #got == 0 then break end
    for j = 1, #got, 2 do
      local id, score = got[j], tonumber(got[j + 1])
      if not (skip and skip(score, id)) then
        local fields = redis.call('HMGET', prefix .. 'c:' .. id, 'json', 'state')
        if fields[1] and (not wanted or wanted[fields[2]]) then
          out[#out + 1] = {score, id, fields[1]}
        end
      end
    end
    offset = offset + #got / 2
  end
  return out
end

local found = {}
if ARGV[5] ~= '' then
  found = newest(prefix .. 'by-payer:' .. ARGV[5], limit, states)
elseif states then
  for i = 6, #ARGV do
    for _, item in ipairs(newest(prefix .. 'by-state:' .. ARGV[i], limit, nil)) do
      found[#found + 1] = item
    end
  end
else
  found = newest(prefix .. 'by-updated', limit, nil)
end
table.sort(found, function(a, b) return before(b, a) end)
local out = {}
for i = 1, math.min(limit, #found) do out[i] = found[i][3] end
return out
"""
)

ADD_COUNTS = """#!lua
-- KEYS: count-buckets; ARGV: prefix, forget_before, sweep, then (bucket, name, delta)...
-- Buckets before ``forget_before`` leave, ``sweep`` of them per call at most.
local prefix = ARGV[1]
local old = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[2],
                       'LIMIT', 0, tonumber(ARGV[3]))
for _, bucket in ipairs(old) do
  redis.call('DEL', prefix .. 'counts:' .. bucket)
  redis.call('ZREM', KEYS[1], bucket)
end
for i = 4, #ARGV, 3 do
  redis.call('HINCRBY', prefix .. 'counts:' .. ARGV[i], ARGV[i + 1], ARGV[i + 2])
  redis.call('ZADD', KEYS[1], ARGV[i], ARGV[i])
end
return #old
"""

READ_COUNTS = """#!lua flags=no-writes
-- KEYS: count-buckets; ARGV: prefix, start, end. Returns bucket, name, count, ...
local out = {}
for _, bucket in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[2], '(' .. ARGV[3])) do
  local fields = redis.call('HGETALL', ARGV[1] .. 'counts:' .. bucket)
  for j = 1, #fields, 2 do
    out[#out + 1] = bucket
    out[#out + 1] = fields[j]
    out[#out + 1] = fields[j + 1]
  end
end
return out
"""

ACQUIRE_LEASE = """#!lua
-- KEYS: lease:<name>; ARGV: holder, now, expires_at
-- The fence is a counter in the lease's hash (HINCRBY); the hash never expires,
-- so the fence only grows. Expiry compares the callers' clocks, as in sqlite.
local held = redis.call('HMGET', KEYS[1], 'expires_at', 'released')
if held[1] and held[2] == '0' and tonumber(held[1]) > tonumber(ARGV[2]) then
  return false
end
local fence = redis.call('HINCRBY', KEYS[1], 'fence', 1)
redis.call('HSET', KEYS[1], 'holder', ARGV[1], 'expires_at', ARGV[3], 'released', '0')
return {fence, redis.call('HGET', KEYS[1], 'value')}
"""

RELEASE_LEASE = """#!lua
-- KEYS: lease:<name>; ARGV: holder, fence, value, has-value ("1"/"0")
local held = redis.call('HMGET', KEYS[1], 'holder', 'fence')
if held[1] ~= ARGV[1] or held[2] ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], 'released', '1')
if ARGV[4] == '1' then redis.call('HSET', KEYS[1], 'value', ARGV[3]) end
return 1
"""

TAKE_OVER_LEASE = """#!lua
-- KEYS: lease:<name>; ARGV: holder read, fence read, new holder, expires_at
-- Only while the holder and fence the caller read still stand, unreleased: of
-- callers taking over one lease, the first wins and the others find a new fence.
local held = redis.call('HMGET', KEYS[1], 'holder', 'fence', 'released')
if held[1] ~= ARGV[1] or held[2] ~= ARGV[2] or held[3] ~= '0' then
  return false
end
local fence = redis.call('HINCRBY', KEYS[1], 'fence', 1)
redis.call('HSET', KEYS[1], 'holder', ARGV[3], 'expires_at', ARGV[4])
return {fence, redis.call('HGET', KEYS[1], 'value')}
"""

SAVE_TASK = """#!lua
-- KEYS: task:<id>, tasks-by-prune
-- ARGV: document, expected version ("" = create only), ttl, id, prune_after ("" = never)
local ver = redis.call('HGET', KEYS[1], 'ver')
local new
if ARGV[2] == '' then
  if ver then return false end
  redis.call('HSET', KEYS[1], 'doc', ARGV[1], 'ver', '1')
  new = 1
else
  if ver ~= ARGV[2] then return false end
  redis.call('HSET', KEYS[1], 'doc', ARGV[1])
  new = redis.call('HINCRBY', KEYS[1], 'ver', 1)
end
redis.call('EXPIRE', KEYS[1], ARGV[3])
if ARGV[5] == '' then
  redis.call('ZREM', KEYS[2], ARGV[4])
else
  redis.call('ZADD', KEYS[2], ARGV[5], ARGV[4])
end
return new
"""

PRUNE_TASKS = """#!lua
-- KEYS: tasks-by-prune; ARGV: prefix, max score ("(<before>"), limit
-- Oldest prune time first. A member whose task already expired by TTL leaves
-- the set without counting, and the next batch takes its place.
local limit, deleted = tonumber(ARGV[3]), 0
while deleted < limit do
  local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[2], 'LIMIT', 0, limit - deleted)
  if #due == 0 then break end
  for _, id in ipairs(due) do
    deleted = deleted + redis.call('DEL', ARGV[1] .. 'task:' .. id)
    redis.call('ZREM', KEYS[1], id)
  end
end
return deleted
"""

COUNT_HITS = """#!lua
-- KEYS: hits:<key>...; ARGV: now, window_end, ttl (ms), one delta per key
-- A counter is a hash: n (the count) and end (its window's end). One whose
-- window ended before ``now`` counts from zero again (the caller's clock
-- decides, as in the other stores); each key expires ``ttl`` ms from now,
-- which is its window's end by the caller's clock, so none outlives its window.
local now, ended = tonumber(ARGV[1]), {}
for i, key in ipairs(KEYS) do
  local window_end = redis.call('HGET', key, 'end')
  ended[i] = window_end and tonumber(window_end) < now
end
local totals = {}
for i, key in ipairs(KEYS) do
  if ended[i] then redis.call('DEL', key) end
  totals[i] = redis.call('HINCRBY', key, 'n', ARGV[3 + i])
  redis.call('HSET', key, 'end', ARGV[2])
  redis.call('PEXPIRE', key, ARGV[3])
end
return totals
"""
