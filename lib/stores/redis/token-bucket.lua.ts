/**
 * Token bucket in Lua: mirrors `algorithms/token-bucket.ts` function for function, line for
 * line. Change both together; the shared table of cases runs against both.
 *
 * Stored value (a string): `<tokens>|<at>`: tokens as `%.17g` (so the double round-trips
 * exactly), `at` in integer ms.
 */
export const TOKEN_BUCKET_LUA = `
local token_bucket = {}

-- tokenBucket.current
function token_bucket.current(raw, now, rps, burst)
  if not raw then return { tokens = burst, at = now } end
  local sep = string.find(raw, '|', 1, true)
  local tokens = tonumber(string.sub(raw, 1, sep - 1))
  local at = tonumber(string.sub(raw, sep + 1))
  -- a clock that goes backwards adds nothing, and at never moves back
  local elapsed = math.max(0, now - at)
  return { tokens = math.min(burst, tokens + (elapsed * rps) / 1000), at = math.max(at, now) }
end

-- tokenBucket.admits
function token_bucket.admits(s, rps, burst, cost)
  return cost <= burst and s.tokens >= cost
end

-- tokenBucket.charge
function token_bucket.charge(s, rps, burst, cost)
  return { tokens = s.tokens - cost, at = s.at }
end

-- tokenBucket.report: allowed (0/1), remaining, retryMs, resetMs, nextMs, delayMs
function token_bucket.report(s, rps, burst, cost, admitted)
  local remaining = math.floor(s.tokens)
  local retry_ms = 0
  if not admitted then
    if cost > burst then retry_ms = -1 else retry_ms = duration_ms(cost - s.tokens, rps) end
  end
  local next_ms = 0
  if s.tokens < burst then next_ms = duration_ms(remaining + 1 - s.tokens, rps) end
  return { admitted and 1 or 0, remaining, retry_ms, duration_ms(burst - s.tokens, rps), next_ms, 0 }
end

-- tokenBucket.ttlMs
function token_bucket.ttl_ms(s, rps, burst)
  return math.max(1, duration_ms(burst - s.tokens, rps))
end

function token_bucket.encode(s)
  return string.format('%.17g|%.17g', s.tokens, s.at)
end
`;
