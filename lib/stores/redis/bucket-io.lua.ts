/**
 * Reading and writing buckets in Lua, for both scripts (see `decide.lua.ts`): the call's clock,
 * its keys' values read with one MGET as it starts, and the states it stores, written when it
 * ends (`flush`), each key once. Needs the math locals and the algorithms before it.
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

-- the script's clock: ARGV[1], or Redis TIME when it is '' (then time_now is that TIME, and an
-- expiry can be a TTL from it: see save)
local time_now = nil

-- algorithms/decide.ts expiryAfter: expiresAt from the waitMs(burst) the report has already worked out
local function expires_at(s, full_ms)
  return s.at + max(1, full_ms)
end

-- the TTL (on Redis TIME) or the time (on a given clock) a key expires at: see flush
local function expiry_arg(until_ms)
  if time_now ~= nil then return string.format('%d', max(1, until_ms - time_now)) end
  return string.format('%d', until_ms)
end

-- stores a charged or blocked state, to expire when the bucket is full again and no block holds:
-- the log's at once (its entries are in the set already: add runs before the report reads them),
-- a string's when the call ends (flush)
local function save(m, key, s, full_ms)
  if m.add then
    -- full: the same as an absent key (only a refund leaves a bucket full)
    if full_ms == 0 then redis.call('DEL', key) return end
    m.save_block(key, s)
    redis.call(time_now ~= nil and 'PEXPIRE' or 'PEXPIREAT', key, expiry_arg(expires_at(s, full_ms)))
    return
  end
  if full_ms == 0 then
    written[key] = false
  else
    written[key], written_models[key], written_until[key] = s, m, expires_at(s, full_ms)
  end
end

-- writes the states the call stored, each key once, its last: on Redis TIME one SET ... PX, the
-- TTL from the very clock the state is dated on; on a given clock SET, then PEXPIREAT at its
-- time (SET ... PXAT does both, but only from Redis 6.2 on)
local function flush()
  for key, s in pairs(written) do
    if s == false then
      redis.call('DEL', key)
    elseif time_now ~= nil then
      redis.call('SET', key, written_models[key].encode(s), 'PX', expiry_arg(written_until[key]))
    else
      redis.call('SET', key, written_models[key].encode(s))
      redis.call('PEXPIREAT', key, expiry_arg(written_until[key]))
    end
  end
end

-- ARGV[1]: now, integer ms, or '' for Redis TIME
local function clock(given)
  if given ~= '' then return tonumber(given) end
  local time = redis.call('TIME')
  time_now = tonumber(time[1]) * 1000 + floor(tonumber(time[2]) / 1000)
  return time_now
end
`;
