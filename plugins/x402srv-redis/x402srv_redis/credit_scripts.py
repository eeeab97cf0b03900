"""The Lua scripts of grant credits: each call is one atomic step, as in ``scripts``.

They repeat ``x402srv.plugin``'s credit rules (``apply_credit``,
``apply_spend``, ``apply_refund``, ``apply_settle``; the order of the checks
is in ``x402srv.stores.credit_rules``) over the four keys of a grant
(``keys``: the account hash, its credited keys, its hourly usage, its used
calls). The caller
computes the rate window's end and the usage hour in Python (``window_end``,
``bucket_start``) and passes them as integer strings, so Lua compares them as
strings and never rounds a float. ``keep_until`` and ``now`` come as
``repr(float)`` strings; an account whose ``keep`` is before ``now`` is absent
(and deleted by the script that finds it so). Every write sets the four keys
to expire at ``keep`` by the caller's clock (``PEXPIRE keep - now``).
"""

from __future__ import annotations

__all__ = ["CREDIT", "GET_CREDITS", "REFUND", "SETTLE", "SPEND"]

# Shared by the writing scripts. ``live`` answers the account's keep_until, or
# false (deleting what a forgotten account left) when it is absent.
_COMMON = """
local function live(now)
  local keep = redis.call('HGET', KEYS[1], 'keep')
  if keep and tonumber(keep) < now then
    redis.call('DEL', unpack(KEYS))
    return false
  end
  return keep
end

local function open(keep_until)
  redis.call('HSET', KEYS[1], 'bal', 0, 'cred', 0, 'spent', 0, 'refd', 0, 'calls', 0,
             'wend', 0, 'wcalls', 0, 'keep', keep_until, 'n', 0)
end

local function extend(keep, keep_until)
  if tonumber(keep_until) > tonumber(keep) then
    redis.call('HSET', KEYS[1], 'keep', keep_until)
    return keep_until
  end
  return keep
end

local function expire(keep, now)
  local ttl = math.max(1, math.ceil((tonumber(keep) - now) * 1000))
  for _, key in ipairs(KEYS) do redis.call('PEXPIRE', key, ttl) end
end

-- Adds to this hour's usage bucket (the list's head) or starts a new one.
local function used(hour, calls, spent, refunded, most)
  local head = redis.call('LINDEX', KEYS[3], 0)
  if head then
    local start, c, s, r = string.match(head, '^(%d+) (%d+) (%d+) (%d+)$')
    if start == hour then
      redis.call('LSET', KEYS[3], 0, table.concat({hour, c + calls, s + spent, r + refunded}, ' '))
      return
    end
  end
  redis.call('LPUSH', KEYS[3], table.concat({hour, calls, spent, refunded}, ' '))
  redis.call('LTRIM', KEYS[3], 0, most - 1)
end
"""

CREDIT = (
    """#!lua
-- KEYS: cr:<grant>, cr:<grant>:k, cr:<grant>:u, cr:<grant>:c
-- ARGV: amount, key, now, keep_until
-- Answers {applied (1/0), balance}.
"""
    + _COMMON
    + """
local now = tonumber(ARGV[3])
local keep = live(now)
if keep and redis.call('HEXISTS', KEYS[2], ARGV[2]) == 1 then
  return {0, tonumber(redis.call('HGET', KEYS[1], 'bal'))}
end
if not keep then
  open(ARGV[4])
  keep = ARGV[4]
end
keep = extend(keep, ARGV[4])
local seq = redis.call('HINCRBY', KEYS[1], 'n', 1)
redis.call('HSET', KEYS[2], ARGV[2], table.concat({seq, ARGV[1], ARGV[3]}, ' '))
redis.call('HINCRBY', KEYS[1], 'cred', ARGV[1])
local balance = redis.call('HINCRBY', KEYS[1], 'bal', ARGV[1])
expire(keep, now)
return {1, balance}
"""
)

SPEND = (
    """#!lua
-- KEYS: cr:<grant>, cr:<grant>:k, cr:<grant>:u, cr:<grant>:c
-- ARGV: cost, now, keep_until, credits ("1"/"0"), limit ("0": no rate window),
--       window end (integer string), usage hour (integer string), usage buckets kept
-- Answers {outcome, balance ("" for none), window calls, window end}.
"""
    + _COMMON
    + """
local cost, now, credits, limit = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[4] == '1',
                                  tonumber(ARGV[5])
local wend = limit > 0 and ARGV[6] or '0'
local keep = live(now)
local held = redis.call('HMGET', KEYS[1], 'bal', 'wend', 'wcalls')
local balance = keep and tonumber(held[1]) or 0
local counted = 0
if limit > 0 and keep and held[2] == wend then counted = tonumber(held[3]) end
if limit > 0 and counted >= limit then
  return {'throttled', (keep and credits) and tostring(balance) or '', counted, wend}
end
if credits and ((not keep) or balance < cost) then
  return {'no-credits', tostring(balance), counted, wend}
end
if not keep then
  open(ARGV[3])
  keep = ARGV[3]
end
keep = extend(keep, ARGV[3])
local taken = credits and cost or 0
if taken > 0 then
  balance = redis.call('HINCRBY', KEYS[1], 'bal', -taken)
  redis.call('HINCRBY', KEYS[1], 'spent', taken)
else
  balance = tonumber(redis.call('HGET', KEYS[1], 'bal'))
end
redis.call('HINCRBY', KEYS[1], 'calls', 1)
local window_calls = limit > 0 and counted + 1 or 0
redis.call('HSET', KEYS[1], 'wend', wend, 'wcalls', window_calls)
used(ARGV[7], 1, taken, 0, tonumber(ARGV[8]))
expire(keep, now)
return {'spent', credits and tostring(balance) or '', window_calls, wend}
"""
)

REFUND = (
    """#!lua
-- KEYS: cr:<grant>, cr:<grant>:k, cr:<grant>:u, cr:<grant>:c
-- ARGV: amount, now, usage hour (integer string), usage buckets kept
-- Answers the balance, or false when there is no (live) account.
"""
    + _COMMON
    + """
local now = tonumber(ARGV[2])
local keep = live(now)
if not keep then return false end
redis.call('HINCRBY', KEYS[1], 'refd', ARGV[1])
local balance = redis.call('HINCRBY', KEYS[1], 'bal', ARGV[1])
used(ARGV[3], 0, 0, tonumber(ARGV[1]), tonumber(ARGV[4]))
expire(keep, now)
return balance
"""
)

SETTLE = (
    """#!lua
-- KEYS: cr:<grant>, cr:<grant>:k, cr:<grant>:u, cr:<grant>:c
-- ARGV: release (0 or more), now, usage hour (integer string), usage buckets kept,
--       the call (JSON [at, route, reserved, charged]), used calls kept
-- Answers the balance, or false when there is no (live) account.
"""
    + _COMMON
    + """
local now, release = tonumber(ARGV[2]), tonumber(ARGV[1])
local keep = live(now)
if not keep then return false end
local balance
if release > 0 then
  redis.call('HINCRBY', KEYS[1], 'refd', release)
  balance = redis.call('HINCRBY', KEYS[1], 'bal', release)
  used(ARGV[3], 0, 0, release, tonumber(ARGV[4]))
else
  balance = tonumber(redis.call('HGET', KEYS[1], 'bal'))
end
redis.call('LPUSH', KEYS[4], ARGV[5])
redis.call('LTRIM', KEYS[4], 0, tonumber(ARGV[6]) - 1)
expire(keep, now)
return balance
"""
)

GET_CREDITS = """#!lua flags=no-writes
-- KEYS: cr:<grant>, cr:<grant>:k, cr:<grant>:u, cr:<grant>:c; one consistent read of all four.
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
return {redis.call('HGETALL', KEYS[1]), redis.call('HGETALL', KEYS[2]),
        redis.call('LRANGE', KEYS[3], 0, -1), redis.call('LRANGE', KEYS[4], 0, -1)}
"""
