/**
 * GCRA and the leaky bucket in Lua: mirror `algorithms/gcra.ts` and
 * `algorithms/leaky-bucket.ts` function for function, line for line. Change them together;
 * the tables of cases run against both.
 *
 * Stored value (a string): `<backlog>|<at>[|<blocked until>]`: backlog in tokens as `%.17g` (so
 * the double round-trips exactly), `at` and the end of a block (once one was set) in integer ms.
 */
export const GCRA_LUA = `
local gcra = {}

function gcra.decode(raw)
  if not raw then return nil end
  local backlog, at, blocked_until = fields(raw)
  return { backlog = backlog, at = at, blocked_until = blocked_until or 0 }
end

function gcra.encode(s)
  return with_block(string.format('%.17g|%d', s.backlog, s.at), s)
end

-- gcra.current
function gcra.current(state, now, rule)
  if state == nil then return { backlog = 0, at = now, blocked_until = 0 } end
  -- a clock that goes backwards drains nothing, and at never moves back
  local elapsed = max(0, now - state.at)
  -- a backlog written under a larger burst (the limit was lowered since) was a full one as of
  -- its at (one in debt as far as the rule lets a settle go), and drains from there (rule.debt
  -- is 0 for a rule without one: see read_rule)
  local stored = min(rule.burst + rule.debt, state.backlog)
  -- empty once the whole ms its key expires after have passed, even a rounding step short
  local backlog = whole_if_near(max(0, stored - (elapsed * rule.rps) / 1000), rule.burst)
  if elapsed >= duration_ms(stored, rule.rps) then backlog = 0 end
  return { backlog = backlog, at = max(state.at, now), blocked_until = state.blocked_until }
end

-- gcra.remaining
function gcra.remaining(s, rule)
  -- a backlog past burst (in debt) leaves none
  return max(0, floor(rule.burst - s.backlog))
end

-- gcra.waitMs
function gcra.wait_ms(s, rule, need)
  -- until the backlog has drained to what leaves room for need (for burst: to 0, exactly)
  local room = rule.burst - need
  if s.backlog <= room then return 0 end
  return duration_ms(s.backlog - room, rule.rps)
end

-- gcra.charge
-- (in place: the state is this call's own, made by current or load; a new table costs Redis
-- about 2,500 instructions)
function gcra.charge(s, rule, cost)
  s.backlog = s.backlog + cost
  return s
end

-- gcra.refund
function gcra.refund(s, rule, cost, charged_at)
  return { backlog = max(0, s.backlog - cost), at = s.at, blocked_until = s.blocked_until }
end

-- gcra.debit
function gcra.debit(s, rule, cost)
  -- up to debt tokens past burst, never down: a backlog already past that stays as it is
  local backlog = min(s.backlog + cost, rule.burst + rule.debt)
  if backlog <= s.backlog then return s end
  return { backlog = backlog, at = s.at, blocked_until = s.blocked_until }
end

-- gcra.debt
function gcra.debt(s, rule)
  -- the backlog past burst, rounded up: remaining's other side
  return max(0, ceil(s.backlog - rule.burst))
end

-- leakyBucket: gcra plus the wait in the queue
local leaky_bucket = setmetatable({}, { __index = gcra })

-- leakyBucket.delayMs
function leaky_bucket.delay_ms(s, rule)
  -- s is the queue before this request joins it: it leaves once those ahead have
  return duration_ms(s.backlog, rule.rps)
end
`;
