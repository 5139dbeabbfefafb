import { BLOCK_LUA } from './block.lua.js';
import { BUCKET_IO_LUA } from './bucket-io.lua.js';
import { MODELS_LUA } from './models.lua.js';
import { DECIDE_ARGS, DECIDE_HEAD, REFUND_ARGS, REPLY_WIDTH } from './script-protocol.js';

/**
 * What both scripts share: the algorithms (each a Lua table mirroring its pure model;
 * string-valued ones have `decode`/`encode` for the call's one MGET and its SET of each key,
 * the sorted-set log has its own `load` and `add`), and reading, reporting and saving a bucket.
 */
const SHARED_LUA = `
-- the math the algorithms call most, as locals: a global's lookup costs about 20 ns a call
local floor = math.floor
local ceil = math.ceil
local max = math.max
local min = math.min
local abs = math.abs
-- algorithms/conversions.ts durationMs
local function duration_ms(tokens, rps)
  return ceil((tokens * 1000) / rps)
end

-- algorithms/conversions.ts WHOLE_TOLERANCE: 256 * Number.EPSILON, 2^-44 (exact, as in JS)
local WHOLE_TOLERANCE = 256 * 2 ^ (-52)

-- algorithms/conversions.ts wholeIfNear
local function whole_if_near(tokens, burst)
  local whole = floor(tokens + 0.5)
  if abs(tokens - whole) <= burst * WHOLE_TOLERANCE then return whole end
  return tokens
end

-- algorithms/conversions.ts windowMs
local function window_ms(rps, burst)
  return max(1, floor((burst * 1000) / rps + 0.5))
end

-- algorithms/conversions.ts windowLimit (rule.limit is burst for a rule without one: see rule_at)
local function window_limit(rule, need)
  return max(rule.limit, need)
end

-- the numbers of a stored value '<a>|<b>[|<c>[|<d>]]', nil for those it lacks (one match: a
-- third the cost of a gmatch loop filling a table)
local function fields(raw)
  local a, b, c, d = string.match(raw, '^([^|]*)|([^|]*)|?([^|]*)|?([^|]*)$')
  return tonumber(a), tonumber(b), tonumber(c), tonumber(d)
end
${BLOCK_LUA}${MODELS_LUA}${BUCKET_IO_LUA}
-- algorithms/decide.ts admitted
local function admitted(m, s, rule, cost)
  return cost <= rule.burst and block_left_ms(s, rule) == 0 and m.wait_ms(s, rule, cost) == 0
end

-- algorithms/decide.ts report, plus the state's time (a refund needs to know when a charge was),
-- appended to the reply; returns fullMs, the later of waitMs(burst) and the block's end
local function report(m, s, rule, cost, admits, delay_ms, reply)
  local block_ms = block_left_ms(s, rule)
  local remaining = 0
  if block_ms == 0 then remaining = m.remaining(s, rule) end
  local retry_ms = 0
  if not admits then
    if cost > rule.burst then retry_ms = -1 else retry_ms = max(block_ms, m.wait_ms(s, rule, cost)) end
  end
  local full_ms = max(block_ms, m.wait_ms(s, rule, rule.burst))
  local next_ms = 0
  if remaining < rule.burst then next_ms = max(block_ms, m.wait_ms(s, rule, remaining + 1)) end
  local k = reply.n
  reply[k + 1], reply[k + 2], reply[k + 3], reply[k + 4] = admits and 1 or 0, remaining, retry_ms, full_ms
  reply[k + 5], reply[k + 6], reply[k + 7], reply[k + 8] = next_ms, delay_ms, block_ms, s.at
  reply.n = k + ${REPLY_WIDTH}
  return full_ms
end

-- appends a number to the reply
local function append(reply, value)
  reply.n = reply.n + 1
  reply[reply.n] = value
end

-- the rules this call has read, by their arguments: a batch's policies mostly share a few, and
-- a lookup costs a sixth of three tonumber and a table (no rule is ever changed once read)
local rules_read = {}

-- the rule of the policy whose arguments follow ARGV[base]: rps, burst, block and a window's
-- scaled limit ('' for none: burst) (its algorithm picks the model)
local function rule_at(base)
  local rps, burst, block_ms, limit = ARGV[base + 2], ARGV[base + 3], ARGV[base + 4], ARGV[base + 5]
  local id = rps .. '|' .. burst .. '|' .. block_ms .. '|' .. limit
  local rule = rules_read[id]
  if rule == nil then
    rule = { rps = tonumber(rps), burst = tonumber(burst), block_ms = tonumber(block_ms), limit = tonumber(limit) or tonumber(burst) }
    rules_read[id] = rule
  end
  return rule
end
`;

/**
 * Requests against all of their policies, of any algorithms, one after another in one atomic
 * call: `decideAll` of `algorithms/decide.ts` in Lua for each request. Pass 1 reads every bucket
 * of the request and asks whether it admits it; pass 2 charges and writes every bucket only when
 * all of them do. A later request of the call sees what an earlier one charged, exactly as if
 * each had a call of its own; batching them saves Redis the cost of a script call per request.
 *
 * KEYS, ARGV and the reply: see `script-protocol.ts`, which encodes and decodes them (ARGV[1] the
 * clock; per request n, charge, deadline, then per policy algorithm, rps, burst, block, limit, cost;
 * per request 0 past its deadline, else 1 and `REPLY_WIDTH` numbers per policy; then now).
 *
 * A key expires (on the script's clock) when its bucket is full again and no block
 * holds. A refused request writes only the blocks it starts.
 */
export const DECIDE_LUA = `${SHARED_LUA}
-- every request's policies, one request at a time (each fills the first n of each)
local models, rules, costs, states, admits = {}, {}, {}, {}, {}

-- algorithms/decide.ts decideAll, for the n policies whose keys follow KEYS[first] and whose
-- arguments follow ARGV[base]
local function decide(first, base, n, charge, now, reply)
  local allowed = true
  for i = 1, n do
    local at = base + (i - 1) * ${DECIDE_ARGS}
    models[i] = MODELS[ARGV[at + 1]]
    rules[i] = rule_at(at)
    costs[i] = tonumber(ARGV[at + 6])
    states[i] = load(models[i], first + i, now, rules[i])
    admits[i] = admitted(models[i], states[i], rules[i], costs[i])
    allowed = allowed and admits[i]
  end

  local charged = allowed and charge
  for i = 1, n do
    local delay_ms = 0
    if allowed and models[i].delay_ms then delay_ms = models[i].delay_ms(states[i], rules[i]) end
    local blocks = false
    if charged then
      states[i] = models[i].charge(states[i], rules[i], costs[i])
      if models[i].add then models[i].add(KEYS[first + i], states[i]) end
    elseif charge and starts_block(states[i], rules[i], costs[i], admits[i]) then
      states[i] = block(states[i], rules[i])
      blocks = true
    end
    local full_ms = report(models[i], states[i], rules[i], costs[i], admits[i], delay_ms, reply)
    if charged or blocks then save(models[i], KEYS[first + i], states[i], full_ms) end
  end
end

local now = clock(ARGV[1])
local reply = { n = 0 }
local first, base = 0, 1
while base < #ARGV do
  local n = tonumber(ARGV[base + 1])
  local deadline = ARGV[base + 3]
  -- a request that runs after its caller stopped waiting (it sat in the socket of a frozen or
  -- busy Redis) is not decided and charges nothing: it has had its failMode outcome already, or
  -- is about to
  if deadline ~= '' and now > tonumber(deadline) then
    append(reply, 0)
  else
    append(reply, 1)
    decide(first, base + ${DECIDE_HEAD}, n, ARGV[base + 2] == '1', now, reply)
  end
  first = first + n
  base = base + ${DECIDE_HEAD} + n * ${DECIDE_ARGS}
end
flush()
append(reply, now)
reply.n = nil
return reply
`;

/**
 * Gives back what a decide call charged, when another hash slot of a Redis Cluster refused the
 * same request: each algorithm's `refund` (`algorithms/*.ts`) in Lua, for every policy.
 *
 * KEYS, ARGV and the reply: see `script-protocol.ts` (ARGV[1] the clock; per policy algorithm,
 * rps, burst, block, limit, cost and the charge's at; per policy `REPLY_WIDTH` numbers as the
 * decide script's, for the buckets after the refund; then now).
 */
export const REFUND_LUA = `${SHARED_LUA}
local now = clock(ARGV[1])
local reply = { n = 0 }
for i = 1, #KEYS do
  local base = 1 + (i - 1) * ${REFUND_ARGS}
  local m = MODELS[ARGV[base + 1]]
  local rule = rule_at(base)
  local cost = tonumber(ARGV[base + 6])
  local s = m.refund(load(m, i, now, rule), rule, cost, tonumber(ARGV[base + 7]))
  save(m, KEYS[i], s, report(m, s, rule, cost, true, 0, reply))
end
flush()
append(reply, now)
reply.n = nil
return reply
`;
