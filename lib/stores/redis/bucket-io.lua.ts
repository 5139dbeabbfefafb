/**
 * Reading and writing buckets in Lua, for both scripts (see `decide.lua.ts`): a call's clock, its
 * keys' values read with one MGET as it starts, and the states it stores, written when it ends
 * (`flush`), each key once. Needs the math locals and the algorithms before it. What KEYS and
 * ARGV[1] carry: see `script-protocol.ts`.
 *
 * Everything a call keeps is in its own table (`begin_call`), never in a variable of the body, so
 * the same code runs as a script, whose body Redis runs on every call, and as a function library,
 * whose body runs once when it is loaded.
 */
export const BUCKET_IO_LUA = `
-- the values of KEYS, read with one MGET (nil: none, or not a string, as the log's sorted set);
-- unpack passes a few thousand values at most: chunks of 1000 where there are more
local function read_values(KEYS)
  if #KEYS <= 1000 then return redis.call('MGET', unpack(KEYS)) end
  local values = {}
  for from = 1, #KEYS, 1000 do
    local got = redis.call('MGET', unpack(KEYS, from, min(#KEYS, from + 999)))
    for j = 1, #got do values[from + j - 1] = got[j] end
  end
  return values
end

-- ARGV[1]: '' for Redis TIME; else the given clock's now, integer ms, and when that clock is
-- ahead of the app's real time (a test's, pinned in the future), a space and that real time: TTLs
-- then count from it, so keys live until the given clock's times come (a clock that is moved by
-- hand can run slower than Redis's: this keeps its buckets while it has not reached them). Sets
-- the call's now, ms, and the time on it that its keys' TTLs count from (see ttl_ms)
local function clock(call, given)
  if given ~= '' then
    local now, real = string.match(given, '^(%S+) ?(%S*)$')
    call.now = tonumber(now)
    call.expiry_base = tonumber(real) or call.now
  else
    local time = redis.call('TIME')
    -- arithmetic reads a number from a text with one strtod, tonumber with two
    call.now = time[1] * 1000 + floor(time[2] / 1000)
    call.expiry_base = call.now
  end
end

-- the call under way: its clock, the values of its keys, and the states it stores by key (false:
-- deleted), with their models and expiry: a key that several requests of a call share is read and
-- written once (see flush). One table, kept from call to call by a library (a new table costs Redis
-- about 2,500 instructions)
local call = { written = {}, written_models = {}, written_until = {} }

-- the call as it starts; what a call that failed midway stored is dropped
local function begin_call(KEYS, given)
  if next(call.written) ~= nil then
    call.written, call.written_models, call.written_until = {}, {}, {}
  end
  call.values = read_values(KEYS)
  clock(call, given)
  return call
end

-- the state of the bucket of key, the call's i-th value, at the call's now
local function load(call, m, key, i, rule)
  if m.load then return m.load(key, call.now, rule) end
  local state = call.written[key]
  if state == nil then state = m.decode(call.values[i]) elseif state == false then state = nil end
  return m.current(state, call.now, rule)
end

-- algorithms/decide.ts expiryAfter: expiresAt from the waitMs(burst) the caller has worked out
local function expires_at(s, full_ms)
  return s.at + max(1, full_ms)
end

-- the TTL of a key that expires at until_ms on the call's clock: the time until then, ms, from its
-- expiry_base. Redis counts it on its own clock, so a given clock's times are durations to it, as
-- far as that clock is from Redis's (a test's clock at 0, the app's own)
local function ttl_ms(call, until_ms)
  return string.format('%d', max(1, until_ms - call.expiry_base))
end

-- stores a charged or blocked state, to expire when the bucket is full again and no block holds
-- (full_ms: the later of waitMs(burst) and the block's end): the log's at once (its entries are in
-- the set already: add runs before anything reads them), a string's when the call ends (flush)
local function save(call, m, key, s, full_ms)
  if m.add then
    -- full: the same as an absent key (only a refund leaves a bucket full)
    if full_ms == 0 then redis.call('DEL', key) return end
    m.save_block(key, s)
    redis.call('PEXPIRE', key, ttl_ms(call, expires_at(s, full_ms)))
    return
  end
  if full_ms == 0 then
    call.written[key] = false
  else
    call.written[key], call.written_models[key], call.written_until[key] = s, m, expires_at(s, full_ms)
  end
end

-- writes the states the call stored, each key once, its last: one SET ... PX each, the TTL from
-- the very clock the state is dated on; and forgets them
local function flush(call)
  local written, models, until_ms = call.written, call.written_models, call.written_until
  for key, s in pairs(written) do
    if s == false then
      redis.call('DEL', key)
    else
      redis.call('SET', key, models[key].encode(s), 'PX', ttl_ms(call, until_ms[key]))
    end
    written[key], models[key], until_ms[key] = nil, nil, nil
  end
end
`;
