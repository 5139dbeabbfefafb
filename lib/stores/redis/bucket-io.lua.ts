/**
 * Reading and writing buckets in Lua, for both scripts (see `decide.lua.ts`): the call's clock,
 * its keys' values read with one MGET as it starts, and the states it stores, written when it
 * ends (`flush`), each key once. Needs the math locals and the algorithms before it. What KEYS
 * and ARGV[1] carry: see `script-protocol.ts`.
 */
export const BUCKET_IO_LUA = `
-- the values of the call's keys, read with one MGET as it starts (nil: none, or not a string,
-- as the log's sorted set), and the states it stores, by key (false: deleted), with their models
-- and expiry: a key that several requests of a call share is read and written once (see flush)
local values = {}
for from = 1, #KEYS, 1000 do
  -- unpack passes a few thousand values at most: chunks of 1000
  local got = redis.call('MGET', unpack(KEYS, from, min(#KEYS, from + 999)))
  for j = 1, #got do values[from + j - 1] = got[j] end
end
local written, written_models, written_until = {}, {}, {}

-- the state of the bucket of KEYS[i] at now
local function load(m, i, now, rule)
  if m.load then return m.load(KEYS[i], now, rule) end
  local state = written[KEYS[i]]
  if state == nil then state = m.decode(values[i]) elseif state == false then state = nil end
  return m.current(state, now, rule)
end

-- the script's clock, ms: ARGV[1], or Redis TIME when it is '' (see clock); and the time on it
-- that the keys' TTLs count from (see ttl_ms)
local script_now, expiry_base = nil, nil

-- algorithms/decide.ts expiryAfter: expiresAt from the waitMs(burst) the report has already worked out
local function expires_at(s, full_ms)
  return s.at + max(1, full_ms)
end

-- the TTL of a key that expires at until_ms on the script's clock: the time until then, ms, from
-- expiry_base. Redis counts it on its own clock, so a given clock's times are durations to it, as
-- far as that clock is from Redis's (a test's clock at 0, the app's own)
local function ttl_ms(until_ms)
  return string.format('%d', max(1, until_ms - expiry_base))
end

-- stores a charged or blocked state, to expire when the bucket is full again and no block holds:
-- the log's at once (its entries are in the set already: add runs before the report reads them),
-- a string's when the call ends (flush)
local function save(m, key, s, full_ms)
  if m.add then
    -- full: the same as an absent key (only a refund leaves a bucket full)
    if full_ms == 0 then redis.call('DEL', key) return end
    m.save_block(key, s)
    redis.call('PEXPIRE', key, ttl_ms(expires_at(s, full_ms)))
    return
  end
  if full_ms == 0 then
    written[key] = false
  else
    written[key], written_models[key], written_until[key] = s, m, expires_at(s, full_ms)
  end
end

-- writes the states the call stored, each key once, its last: one SET ... PX each, the TTL from
-- the very clock the state is dated on
local function flush()
  for key, s in pairs(written) do
    if s == false then
      redis.call('DEL', key)
    else
      redis.call('SET', key, written_models[key].encode(s), 'PX', ttl_ms(written_until[key]))
    end
  end
end

-- ARGV[1]: '' for Redis TIME; else the given clock's now, integer ms, and when that clock is
-- ahead of the app's real time (a test's, pinned in the future), a space and that real time: TTLs
-- then count from it, so keys live until the given clock's times come (a clock that is moved by
-- hand can run slower than Redis's: this keeps its buckets while it has not reached them)
local function clock(given)
  if given ~= '' then
    local now, real = string.match(given, '^(%S+) ?(%S*)$')
    script_now = tonumber(now)
    expiry_base = tonumber(real) or script_now
  else
    local time = redis.call('TIME')
    script_now = tonumber(time[1]) * 1000 + floor(tonumber(time[2]) / 1000)
    expiry_base = script_now
  end
  return script_now
end
`;
