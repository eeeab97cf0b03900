"""The Lua scripts of refunds: the claim on what a purchase paid, and the compare-and-set.

Key names (``keys``)::

    <prefix>rf:<refundId>           hash   json, state, ver (the record's version)
    <prefix>rf-of:<purchaseId>      hash   refundId -> "<state> <amount>"
    <prefix>rf-by-created           zset   refundId by created_at (listing, export)
    <prefix>rf-by-state:<STATE>     zset   refundId by created_at, one per state

Amounts are decimal strings added digit by digit (``add``): a Lua number is a
double, which would round the atomic units of an 18-decimals token. Refund
keys never expire: they are the seller's ledger of money sent back.
"""

from __future__ import annotations

__all__ = ["CREATE_REFUND", "MOVE_REFUND"]

CREATE_REFUND = """#!lua
-- KEYS: rf:<id>, rf-of:<purchase>, rf-by-created, rf-by-state:REQUESTED
-- ARGV: id, json, amount, paid, created_at, state
-- Returns {'known', json} | {'over', held} | {'created'}
local function add(a, b)
  local out, carry, i, j = {}, 0, #a, #b
  while i > 0 or j > 0 or carry > 0 do
    local d = carry
    if i > 0 then d = d + tonumber(string.sub(a, i, i)); i = i - 1 end
    if j > 0 then d = d + tonumber(string.sub(b, j, j)); j = j - 1 end
    table.insert(out, 1, tostring(d % 10))
    carry = math.floor(d / 10)
  end
  if #out == 0 then return '0' end
  return table.concat(out)
end
local function greater(a, b)
  if #a ~= #b then return #a > #b end
  return a > b
end
local known = redis.call('HGET', KEYS[1], 'json')
if known then return {'known', known} end
local held = '0'
for _, entry in ipairs(redis.call('HVALS', KEYS[2])) do
  local state, amount = string.match(entry, '^(%S+) (%d+)$')
  if state ~= 'FAILED' then held = add(held, amount) end
end
if greater(add(held, ARGV[3]), ARGV[4]) then return {'over', held} end
redis.call('HSET', KEYS[1], 'json', ARGV[2], 'state', ARGV[6], 'ver', '1')
redis.call('HSET', KEYS[2], ARGV[1], ARGV[6] .. ' ' .. ARGV[3])
redis.call('ZADD', KEYS[3], ARGV[5], ARGV[1])
redis.call('ZADD', KEYS[4], ARGV[5], ARGV[1])
return {'created'}
"""

MOVE_REFUND = """#!lua
-- KEYS: rf:<id>, rf-of:<purchase>, rf-by-state:<from>, rf-by-state:<to>
-- ARGV: id, expected ver, json, new state, amount, created_at, new ver
-- Returns 1 when written, else the record's current json ("" when absent).
local ver = redis.call('HGET', KEYS[1], 'ver')
if ver ~= ARGV[2] then return redis.call('HGET', KEYS[1], 'json') or '' end
redis.call('HSET', KEYS[1], 'json', ARGV[3], 'state', ARGV[4], 'ver', ARGV[7])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[4] .. ' ' .. ARGV[5])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZADD', KEYS[4], ARGV[6], ARGV[1])
return 1
"""
