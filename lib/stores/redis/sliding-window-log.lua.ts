/**
 * Sliding window log in Lua: mirrors `algorithms/sliding-window-log.ts` function for
 * function, line for line. Change both together; the table of cases runs against both.
 *
 * Stored as a sorted set, one member per token, scored by the time it was taken (integer ms).
 * Members are `<time>:<n>`, n counting the entries at that time, so they stay unique. Where the
 * pure model holds the entries in `times`, the state here holds the key and their count, and
 * reads the set when it needs an entry.
 */
export const SLIDING_WINDOW_LOG_LUA = `
local sliding_window_log = {}

-- logEntries
local function log_entries(cost)
  return math.ceil(cost)
end

-- slidingWindowLog.current, reading the set
function sliding_window_log.load(key, now, limit)
  local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2]
  -- a clock that goes back before the newest entry expires nothing and logs at that entry
  local at = now
  if newest then at = math.max(now, tonumber(newest)) end
  local cutoff = at - window_ms(limit.rps, limit.burst)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', cutoff))
  return { key = key, count = redis.call('ZCARD', key), now = at, added = 0 }
end

-- slidingWindowLog.remaining
function sliding_window_log.remaining(s, limit)
  return limit.burst - s.count
end

-- slidingWindowLog.waitMs
function sliding_window_log.wait_ms(s, limit, need)
  -- the request fits once the k oldest entries have left the window
  local k = s.count + log_entries(need) - limit.burst
  if k <= 0 then return 0 end
  local entry = redis.call('ZRANGE', s.key, k - 1, k - 1, 'WITHSCORES')
  return tonumber(entry[2]) + window_ms(limit.rps, limit.burst) - s.now
end

-- slidingWindowLog.charge (the entries are added by save)
function sliding_window_log.charge(s, limit, cost)
  return { key = s.key, count = s.count + log_entries(cost), now = s.now, added = log_entries(cost) }
end

-- writes the entries charge took (the script then sets the key's expiry)
function sliding_window_log.add(key, s)
  local at = string.format('%d', s.now)
  local n = redis.call('ZCOUNT', key, at, at)
  local args = {}
  for j = 1, s.added do
    args[#args + 1] = at
    args[#args + 1] = at .. ':' .. (n + j)
    -- unpack has a limit on how many values it passes: add in chunks
    if #args >= 1000 then
      redis.call('ZADD', key, unpack(args))
      args = {}
    end
  end
  if #args > 0 then redis.call('ZADD', key, unpack(args)) end
end
`;
