/**
 * Sliding window log in Lua: mirrors `algorithms/sliding-window-log.ts` function for
 * function, line for line. Change both together; the table of cases runs against both.
 *
 * Stored as a sorted set, one member per token, scored by the time it was taken (integer ms).
 * Members are `<time>:<n>`, n counting the entries at that time, so they stay unique. As the
 * pure model's state is a range (`head`, `count`) of an array whose entries before `head` are
 * skipped, the state here holds the key, how many entries come first in the set and are skipped
 * (expired, or beyond the limit), and how many follow, and reads the set when it needs an entry.
 *
 * A block's end (`blockedUntil`) is the member `block`, scored by minus that end in ms: below
 * every entry, so it is always the first member skipped as expired, and `add` drops it with
 * them (a charge is only ever admitted once a block has ended). Only a rule with a block reads it.
 *
 * A rule whose block's end resets the bucket (`Rule.blockResets`) forgets a log whose block has
 * ended (`forget`, see `after_block`): the fresh state it decides with deletes the whole set when
 * it is written, where a charge otherwise trims only the expired entries.
 *
 * The body also defines `concurrency` (`algorithms/concurrency.ts`), which is this log.
 */
export const SLIDING_WINDOW_LOG_LUA = `
local sliding_window_log = {}

-- the member that holds a block's end
local BLOCK_MEMBER = 'block'

-- logEntries
local function log_entries(cost)
  return ceil(cost)
end

-- slidingWindowLog.current, reading the set
function sliding_window_log.load(key, now, rule)
  local newest = tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2])
  -- a clock that goes back before the newest entry expires nothing and logs at that entry
  local at = now
  if newest then at = max(now, newest) end
  local cutoff = string.format('%d', at - window_ms(rule.rps, rule.burst))
  -- expired entries are skipped here, and dropped only by add: a refused request (or a peek)
  -- leaves the set as it was, as the pure model stores nothing for it
  local expired = redis.call('ZCOUNT', key, '-inf', cutoff)
  local total = redis.call('ZCARD', key)
  -- a log written under a larger limit (the limit was lowered) keeps its newest burst entries (and
  -- those a settle may take past it; rule.debt is 0 for a rule without one: see read_rule)
  expired = max(expired, total - (rule.burst + rule.debt))
  local blocked_until = 0
  if rule.block_ms > 0 then
    local score = redis.call('ZSCORE', key, BLOCK_MEMBER)
    if score then blocked_until = -tonumber(score) end
  end
  return { key = key, count = total - expired, expired = expired, at = at, newest = newest, added = 0, blocked_until = blocked_until }
end

-- slidingWindowLog.current(undefined) at now, for a log whose block has ended and whose rule's
-- block resets it (after_block): nothing logged; add (or save_block) deletes the set as stored first
function sliding_window_log.forget(s, now)
  return { key = s.key, count = 0, expired = 0, at = now, newest = nil, added = 0, blocked_until = 0, forgotten = true }
end

-- slidingWindowLog.remaining
function sliding_window_log.remaining(s, rule)
  -- more entries than burst (in debt) leave none
  return max(0, rule.burst - s.count)
end

-- slidingWindowLog.waitMs
function sliding_window_log.wait_ms(s, rule, need)
  -- the request fits once the k oldest entries have left the window
  local k = s.count + log_entries(need) - rule.burst
  if k <= 0 then return 0 end
  -- the newest entry's time (k = count: waitMs(burst)) is known already, the others are read
  local time = s.newest
  if k < s.count then
    local rank = s.expired + k - 1
    time = tonumber(redis.call('ZRANGE', s.key, rank, rank, 'WITHSCORES')[2])
  end
  return time + window_ms(rule.rps, rule.burst) - s.at
end

-- slidingWindowLog.charge (add writes the entries)
-- (in place: the state is this call's own, made by current or load; a new table costs Redis
-- about 2,500 instructions)
function sliding_window_log.charge(s, rule, cost)
  local n = log_entries(cost)
  s.count, s.added = s.count + n, n
  return s
end

-- drops the expired entries (the oldest, those load skipped) and writes those charge took (the
-- script then sets the expiry)
function sliding_window_log.add(key, s)
  if s.forgotten then
    redis.call('DEL', key)
    s.forgotten = false
  elseif s.expired > 0 then
    redis.call('ZREMRANGEBYRANK', key, 0, s.expired - 1)
  end
  s.expired = 0
  -- a charge of 0 (a reservation of nothing) logs nothing: the newest entry stays the newest
  if s.added == 0 then return end
  local at = string.format('%d', s.at)
  -- entries already at this ms (only when the newest is: at is never before it)
  local n = 0
  if s.newest == s.at then n = redis.call('ZCOUNT', key, at, at) end
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
  s.newest = s.at
end

-- stores a block that holds as its member (the entries are in the set already)
function sliding_window_log.save_block(key, s)
  if s.blocked_until <= s.at then return end
  if s.forgotten then
    redis.call('DEL', key)
    s.forgotten = false
  end
  local score = string.format('%d', -s.blocked_until)
  redis.call('ZADD', key, score, BLOCK_MEMBER)
end

-- slidingWindowLog.refund: drops the newest-numbered entries at charged_at, so those left stay
-- numbered 1..n and add's next numbers stay unique (entries at one ms are otherwise alike)
function sliding_window_log.refund(s, rule, cost, charged_at)
  -- a log forgotten (its block's end reset it) holds nothing to give back: save deletes its set
  if s.forgotten then return s end
  local at = string.format('%d', charged_at)
  local members = redis.call('ZRANGEBYSCORE', s.key, at, at)
  local numbers = {}
  for j = 1, #members do numbers[j] = tonumber(string.match(members[j], ':(%d+)$')) end
  table.sort(numbers)
  local drop = {}
  for j = #numbers, max(1, #numbers - log_entries(cost) + 1), -1 do
    drop[#drop + 1] = at .. ':' .. numbers[j]
    if #drop >= 1000 then
      redis.call('ZREM', s.key, unpack(drop))
      drop = {}
    end
  end
  if #drop > 0 then redis.call('ZREM', s.key, unpack(drop)) end
  return sliding_window_log.load(s.key, s.at, rule)
end

-- slidingWindowLog.debit (add writes the entries, as a charge's)
function sliding_window_log.debit(s, rule, cost)
  -- entries at the state's time, as a charge's, up to debt past burst: never any dropped
  local n = min(log_entries(cost), rule.burst + rule.debt - s.count)
  if n <= 0 then return s end
  return {
    key = s.key, count = s.count + n, expired = s.expired, at = s.at, newest = s.newest, added = n,
    blocked_until = s.blocked_until, forgotten = s.forgotten,
  }
end

-- slidingWindowLog.debt
function sliding_window_log.debt(s, rule)
  -- the entries past burst: remaining's other side
  return max(0, s.count - rule.burst)
end

-- algorithms/concurrency.ts: the same log, its window the lease (one entry per slot held)
local concurrency = sliding_window_log
`;
