/**
 * Sliding window counter in Lua: mirrors `algorithms/sliding-window-counter.ts` function for
 * function, line for line. Change both together; the table of cases runs against both.
 *
 * Stored value (a string): `<start>|<previous>|<count>`: window start in integer ms, the
 * counts as `%.17g`.
 */
export const SLIDING_WINDOW_COUNTER_LUA = `
local sliding_window_counter = {}

function sliding_window_counter.decode(raw)
  if not raw then return nil end
  local f = fields(raw)
  return { start = f[1], previous = f[2], count = f[3] }
end

function sliding_window_counter.encode(s)
  return string.format('%d|%.17g|%.17g', s.start, s.previous, s.count)
end

-- usedScaled
local function used_scaled(s, w)
  return s.previous * (w - (s.at - s.start)) + s.count * w
end

-- slidingWindowCounter.current
function sliding_window_counter.current(state, now, limit)
  local w = window_ms(limit.rps, limit.burst)
  -- a clock that goes back into an earlier window stays in the stored one: no fresh quota
  local at = now
  if state ~= nil then at = math.max(now, state.start) end
  local start = math.floor(at / w) * w
  if state == nil then return { start = start, previous = 0, count = 0, at = at } end
  if state.start == start then return { start = start, previous = state.previous, count = state.count, at = at } end
  if state.start + w == start then return { start = start, previous = state.count, count = 0, at = at } end
  return { start = start, previous = 0, count = 0, at = at }
end

-- slidingWindowCounter.remaining
function sliding_window_counter.remaining(s, limit)
  local w = window_ms(limit.rps, limit.burst)
  return math.max(0, math.floor((limit.burst * w - used_scaled(s, w)) / w))
end

-- slidingWindowCounter.waitMs
function sliding_window_counter.wait_ms(s, limit, need)
  local w = window_ms(limit.rps, limit.burst)
  local burst = limit.burst
  local elapsed = s.at - s.start
  if used_scaled(s, w) + need * w <= burst * w then return 0 end
  -- it fits later in this window, once enough of the previous window's weight has slid out...
  if s.count + need <= burst then return w - math.floor(((burst - s.count - need) * w) / s.previous) - elapsed end
  -- ...or only in the next one, once enough of this window's count has
  return 2 * w - math.floor(((burst - need) * w) / s.count) - elapsed
end

-- slidingWindowCounter.charge
function sliding_window_counter.charge(s, limit, cost)
  return { start = s.start, previous = s.previous, count = s.count + cost, at = s.at }
end
`;
