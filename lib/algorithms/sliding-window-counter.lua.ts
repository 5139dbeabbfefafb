/**
 * Sliding window counter in Lua: mirrors `algorithms/sliding-window-counter.ts` function for
 * function, line for line. Change both together; the table of cases runs against both.
 *
 * Stored value (a string): `<start>|<previous>|<count>[|<blocked until>]`: window start in
 * integer ms, the counts as `%.17g`, the end of a block (once one was set) in integer ms.
 */
export const SLIDING_WINDOW_COUNTER_LUA = `
local sliding_window_counter = {}

function sliding_window_counter.decode(raw)
  if not raw then return nil end
  local start, previous, count, blocked_until = fields(raw)
  return { start = start, previous = previous, count = count, blocked_until = blocked_until or 0 }
end

function sliding_window_counter.encode(s)
  return with_block(string.format('%d|%.17g|%.17g', s.start, s.previous, s.count), s)
end

-- previousScaled
local function previous_scaled(s, w)
  return s.previous * (w - (s.at - s.start))
end

-- slidingWindowCounter.current
function sliding_window_counter.current(state, now, rule)
  local w = window_ms(rule.rps, rule.burst)
  -- a clock that goes back into an earlier window stays in the stored one: no fresh quota
  local at = now
  if state ~= nil then at = max(now, state.start) end
  local start = floor(at / w) * w
  if state == nil then return { start = start, previous = 0, count = 0, at = at, blocked_until = 0 } end
  -- counts written under a larger limit (the limit was lowered) are the whole limit now (and
  -- what a settle may take past it; rule.debt is 0 for a rule without one: see read_rule)
  local b, blocked_until = rule.burst + rule.debt, state.blocked_until
  if state.start == start then
    return { start = start, previous = min(b, state.previous), count = min(b, state.count), at = at, blocked_until = blocked_until }
  end
  if state.start + w == start then return { start = start, previous = min(b, state.count), count = 0, at = at, blocked_until = blocked_until } end
  return { start = start, previous = 0, count = 0, at = at, blocked_until = blocked_until }
end

-- slidingWindowCounter.remaining
function sliding_window_counter.remaining(s, rule)
  local w = window_ms(rule.rps, rule.burst)
  return max(0, floor(((window_limit(rule, 1) - s.count) * w - previous_scaled(s, w)) / w))
end

-- slidingWindowCounter.waitMs
function sliding_window_counter.wait_ms(s, rule, need)
  local w = window_ms(rule.rps, rule.burst)
  local limit = window_limit(rule, need)
  local elapsed = s.at - s.start
  -- what this window's count leaves for the previous window's weight
  local room = limit - s.count - need
  if room >= 0 then
    if previous_scaled(s, w) <= room * w then return 0 end
    -- it fits later in this window, once enough of the previous window's weight (> 0) has slid out...
    return max(1, w - floor((room * w) / s.previous) - elapsed)
  end
  -- ...or only in the next one, once enough of this window's count (> limit - need >= 0) has
  return 2 * w - floor(((limit - need) * w) / s.count) - elapsed
end

-- slidingWindowCounter.charge
-- (in place: the state is this call's own, made by current or load; a new table costs Redis
-- about 2,500 instructions)
function sliding_window_counter.charge(s, rule, cost)
  s.count = s.count + cost
  return s
end

-- slidingWindowCounter.refund
function sliding_window_counter.refund(s, rule, cost, charged_at)
  -- the charge counts in the window it was taken in, then in the next one as previous
  local w = window_ms(rule.rps, rule.burst)
  local charged = floor(charged_at / w) * w
  if s.start == charged then
    return { start = s.start, previous = s.previous, count = max(0, s.count - cost), at = s.at, blocked_until = s.blocked_until }
  end
  if s.start == charged + w then
    return { start = s.start, previous = max(0, s.previous - cost), count = s.count, at = s.at, blocked_until = s.blocked_until }
  end
  return s
end

-- slidingWindowCounter.debit
function sliding_window_counter.debit(s, rule, cost)
  -- counted in the window the state is in, up to debt past burst, never down
  local count = min(s.count + cost, rule.burst + rule.debt)
  if count <= s.count then return s end
  return { start = s.start, previous = s.previous, count = count, at = s.at, blocked_until = s.blocked_until }
end

-- slidingWindowCounter.debt
function sliding_window_counter.debt(s, rule)
  -- the weighted estimate past what the window admits, rounded up: remaining's other side
  local w = window_ms(rule.rps, rule.burst)
  return max(0, ceil(((s.count - window_limit(rule, 1)) * w + previous_scaled(s, w)) / w))
end
`;
