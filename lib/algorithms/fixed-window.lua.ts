/**
 * Fixed window in Lua: mirrors `algorithms/fixed-window.ts` function for function, line for
 * line. Change both together; the table of cases runs against both.
 *
 * Stored value (a string): `<start>|<count>[|<blocked until>]`: window start in integer ms, count
 * as `%.17g`, the end of a block (once one was set) in integer ms. A rule anchored at a key's first
 * request (`Rule.anchor`) has `rule.anchored` (see `read_rule` in `decide.lua.ts`); its windows
 * start where that request was, stored the same way.
 */
export const FIXED_WINDOW_LUA = `
local fixed_window = {}

function fixed_window.decode(raw)
  if not raw then return nil end
  local start, count, blocked_until = fields(raw)
  return { start = start, count = count, blocked_until = blocked_until or 0 }
end

function fixed_window.encode(s)
  return with_block(string.format('%d|%.17g', s.start, s.count), s)
end

-- fixedWindow.current
function fixed_window.current(state, now, rule)
  local w = window_ms(rule.rps, rule.burst)
  -- a clock that goes back into an earlier window stays in the stored one: no fresh quota
  local at = now
  if state ~= nil then at = max(now, state.start) end
  -- anchored: the stored window while it lasts, else one that starts now
  local start
  if not rule.anchored then
    start = floor(at / w) * w
  elseif state ~= nil and at < state.start + w then
    start = state.start
  else
    start = at
  end
  -- a count written under a larger limit (the limit was lowered) is the whole limit now (and
  -- what a settle may take past it; rule.debt is 0 for a rule without one: see read_rule)
  local count = 0
  if state ~= nil and state.start == start then count = min(rule.burst + rule.debt, state.count) end
  local blocked_until = 0
  if state ~= nil then blocked_until = state.blocked_until end
  return { start = start, count = count, at = at, blocked_until = blocked_until }
end

-- fixedWindow.remaining
function fixed_window.remaining(s, rule)
  -- another instance under a larger factor (or none) may have taken more than this rule's limit
  return max(0, floor(window_limit(rule, 1) - s.count))
end

-- fixedWindow.waitMs
function fixed_window.wait_ms(s, rule, need)
  -- a new window starts empty, which admits any need (<= burst), so the window's end always suffices
  if s.count + need <= window_limit(rule, need) then return 0 end
  return s.start + window_ms(rule.rps, rule.burst) - s.at
end

-- fixedWindow.charge
-- (in place: the state is this call's own, made by current or load; a new table costs Redis
-- about 2,500 instructions)
function fixed_window.charge(s, rule, cost)
  s.count = s.count + cost
  return s
end

-- fixedWindow.refund
function fixed_window.refund(s, rule, cost, charged_at)
  -- a charge in a window that has ended no longer counts: nothing to give back (an anchored
  -- window holds every time from its start to its end: no window of the key starts within it)
  local w = window_ms(rule.rps, rule.burst)
  if not rule.anchored then
    if s.start ~= floor(charged_at / w) * w then return s end
  elseif charged_at < s.start or charged_at >= s.start + w then
    return s
  end
  return { start = s.start, count = max(0, s.count - cost), at = s.at, blocked_until = s.blocked_until }
end

-- fixedWindow.debit
function fixed_window.debit(s, rule, cost)
  -- counted in the window the state is in, up to debt past burst, never down
  local count = min(s.count + cost, rule.burst + rule.debt)
  if count <= s.count then return s end
  return { start = s.start, count = count, at = s.at, blocked_until = s.blocked_until }
end

-- fixedWindow.debt
function fixed_window.debt(s, rule)
  -- the count past what the window admits, rounded up: remaining's other side
  return max(0, ceil(s.count - window_limit(rule, 1)))
end
`;
