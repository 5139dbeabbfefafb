import { TOKEN_BUCKET_LUA } from './token-bucket.lua.js';

/** Numbers the script returns per request: allowed, remaining, retryMs, resetMs, nextMs, delayMs. */
export const REPLY_WIDTH = 6;
/** Arguments the script takes per request after the two leading ones. */
const ARGS_PER_REQUEST = 4;

/**
 * One request against all of its policies, in one atomic call: `decideAll` of
 * `algorithms/decide.ts` in Lua. Pass 1 reads every bucket and asks whether it admits the
 * request; pass 2 charges and writes every bucket only when all of them do.
 *
 * KEYS[i]              bucket key of policy i
 * ARGV[1]              now, integer ms; '' to use Redis TIME (the only clock outside tests)
 * ARGV[2]              '1' to charge when every policy admits, '0' to only look (peek)
 * ARGV[3 + 4(i-1)]     algorithm of policy i ('token_bucket')
 * ARGV[4 + 4(i-1)]     rps, tokens per second, as a decimal string (may be fractional)
 * ARGV[5 + 4(i-1)]     burst, tokens
 * ARGV[6 + 4(i-1)]     cost, tokens
 *
 * Returns 6 integers per policy: allowed (0/1), remaining (tokens), retryMs (-1: never),
 * resetMs (until full), nextMs (until one more token), delayMs.
 */
export const DECIDE_LUA = `
-- algorithms/conversions.ts durationMs
local function duration_ms(tokens, rps)
  return math.ceil((tokens * 1000) / rps)
end
${TOKEN_BUCKET_LUA}
local ALGORITHMS = { token_bucket = token_bucket }

local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end
local charge = ARGV[2] == '1'

local n = #KEYS
local models, rps, burst, cost, states, admits = {}, {}, {}, {}, {}, {}
local allowed = true
for i = 1, n do
  local base = 2 + (i - 1) * ${ARGS_PER_REQUEST}
  models[i] = ALGORITHMS[ARGV[base + 1]]
  rps[i] = tonumber(ARGV[base + 2])
  burst[i] = tonumber(ARGV[base + 3])
  cost[i] = tonumber(ARGV[base + 4])
  states[i] = models[i].current(redis.call('GET', KEYS[i]), now, rps[i], burst[i])
  admits[i] = models[i].admits(states[i], rps[i], burst[i], cost[i])
  allowed = allowed and admits[i]
end

local reply = {}
for i = 1, n do
  if allowed and charge then
    states[i] = models[i].charge(states[i], rps[i], burst[i], cost[i])
    local ttl = models[i].ttl_ms(states[i], rps[i], burst[i])
    redis.call('SET', KEYS[i], models[i].encode(states[i]), 'PX', string.format('%d', ttl))
  end
  local out = models[i].report(states[i], rps[i], burst[i], cost[i], admits[i])
  for j = 1, ${REPLY_WIDTH} do reply[#reply + 1] = out[j] end
end
return reply
`;
