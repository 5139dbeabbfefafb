/**
 * Token bucket in Lua: mirrors `algorithms/token-bucket.ts` function for function, line for
 * line. Change both together; the shared table of cases runs against both.
 *
 * Stored value (a string): `<tokens>|<at>[|<blocked until>]`: tokens as `%.17g` (so the double
 * round-trips exactly), `at` and the end of a block (once one was set) in integer ms.
 */
export const TOKEN_BUCKET_LUA = `
local token_bucket = {}

function token_bucket.decode(raw)
  if not raw then return nil end
  local tokens, at, blocked_until = fields(raw)
  return { tokens = tokens, at = at, blocked_until = blocked_until or 0 }
end

function token_bucket.encode(s)
  return with_block(string.format('%.17g|%d', s.tokens, s.at), s)
end

-- tokenBucket.current
function token_bucket.current(state, now, rule)
  if state == nil then return { tokens = rule.burst, at = now, blocked_until = 0 } end
  -- a clock that goes backwards adds nothing, and at never moves back
  local elapsed = max(0, now - state.at)
  -- full once the whole ms its key expires after have passed, even a rounding step short, and
  -- at once when it holds more than burst (written under a larger one)
  local tokens = whole_if_near(min(rule.burst, state.tokens + (elapsed * rule.rps) / 1000), rule.burst)
  if elapsed >= duration_ms(rule.burst - state.tokens, rule.rps) then tokens = rule.burst end
  return { tokens = tokens, at = max(state.at, now), blocked_until = state.blocked_until }
end

-- tokenBucket.remaining
function token_bucket.remaining(s, rule)
  -- a bucket in debt (below empty) has none left
  return max(0, floor(s.tokens))
end

-- tokenBucket.waitMs
function token_bucket.wait_ms(s, rule, need)
  if s.tokens >= need then return 0 end
  return duration_ms(need - s.tokens, rule.rps)
end

-- tokenBucket.charge
-- (in place: the state is this call's own, made by current or load; a new table costs Redis
-- about 2,500 instructions)
function token_bucket.charge(s, rule, cost)
  s.tokens = s.tokens - cost
  return s
end

-- tokenBucket.refund
function token_bucket.refund(s, rule, cost, charged_at)
  return { tokens = min(rule.burst, s.tokens + cost), at = s.at, blocked_until = s.blocked_until }
end

-- tokenBucket.debit (rule.debt is 0 for a rule without one: see read_rule)
function token_bucket.debit(s, rule, cost)
  -- down to debt tokens below empty, never up: a bucket already below that stays as it is
  local tokens = max(s.tokens - cost, -rule.debt)
  if tokens >= s.tokens then return s end
  return { tokens = tokens, at = s.at, blocked_until = s.blocked_until }
end

-- tokenBucket.debt
function token_bucket.debt(s, rule)
  -- the tokens below empty, rounded up: remaining's other side
  return max(0, ceil(-s.tokens))
end
`;
