import { FIXED_WINDOW_LUA } from './fixed-window.lua.js';

/**
 * Quota in Lua: mirrors `algorithms/quota.ts` function for function, line for line. Change both
 * together; the table of cases runs against both.
 *
 * Stored as a fixed window's value, `<start>|<count>[|<blocked until>]`: the period's start in
 * integer ms, the count as `%.17g`. The rule's `origin` is the start of the period the app chose
 * for the request (the algorithm argument `quota@<origin>`, see `read_rule` in `decide.lua.ts`);
 * its window (`burst / rps`) is that period's length. Within its period a quota is its fixed
 * window, whose functions it takes: the body defines both (`FIXED_WINDOW_AND_QUOTA_LUA`), and is
 * the Lua of both descriptors, so a call defines them together.
 */
const QUOTA_LUA = `
-- quota: a fixed window (decode, encode, remaining, wait_ms, charge, debit, debt) whose windows are periods
local quota = {
  decode = fixed_window.decode, encode = fixed_window.encode, remaining = fixed_window.remaining,
  wait_ms = fixed_window.wait_ms, charge = fixed_window.charge, debit = fixed_window.debit,
  debt = fixed_window.debt,
}

-- periodStart
local function period_start(at, origin, w)
  return origin + floor((at - origin) / w) * w
end

-- quota.current
function quota.current(state, now, rule)
  local w = window_ms(rule.rps, rule.burst)
  local origin = rule.origin or 0
  -- never before the period the request is in, nor (a clock that went back) before the stored one
  local at = max(now, origin)
  if state ~= nil then at = max(at, state.start) end
  local start = period_start(at, origin, w)
  -- a count of another period is none; one written under a larger limit is the whole limit now
  -- (and what a settle may take past it)
  local count = 0
  if state ~= nil and state.start == start then count = min(rule.burst + rule.debt, state.count) end
  local blocked_until = 0
  if state ~= nil then blocked_until = state.blocked_until end
  return { start = start, count = count, at = at, blocked_until = blocked_until }
end

-- quota.refund
function quota.refund(s, rule, cost, charged_at)
  -- given back only to the period it was taken from, while that period is the stored one
  if charged_at < s.start or charged_at >= s.start + window_ms(rule.rps, rule.burst) then return s end
  return { start = s.start, count = max(0, s.count - cost), at = s.at, blocked_until = s.blocked_until }
end
`;

/** The body that defines `fixed_window` and `quota`: the Lua of both descriptors. */
export const FIXED_WINDOW_AND_QUOTA_LUA = `${FIXED_WINDOW_LUA}${QUOTA_LUA}`;
