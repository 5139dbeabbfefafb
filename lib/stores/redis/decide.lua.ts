import { createHash } from 'node:crypto';
import { BLOCK_LUA } from './block.lua.js';
import { BUCKET_IO_LUA } from './bucket-io.lua.js';
import { FLAT_CALL_LUA } from './flat.lua.js';
import { MODELS_LUA } from './models.lua.js';
import { REFUND_ARGS, REPLY_WIDTH, RULE_ARGS } from './script-protocol.js';

/**
 * What both calls share: the algorithms (each a Lua table mirroring its pure model;
 * string-valued ones have `decode`/`encode` for the call's one MGET and its SET of each key,
 * the sorted-set log has its own `load` and `add`), and reading, reporting and saving a bucket.
 * It defines functions only, inside `define_calls` (see `CALLS_LUA`).
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

-- algorithms/conversions.ts windowLimit (rule.limit is burst for a rule without one: see read_rule)
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

-- algorithms/decide.ts report (what a sorted-set log and a refund answer: the app derives every
-- other policy's report from the state), plus the state's time (a refund needs to know when a
-- charge was), appended to the reply; returns fullMs (fullMsOf): the later of waitMs(burst) and the
-- block's end, or the block's end alone when the rule's block resets the bucket (so are every time).
-- A debt (a rule that settles, whose bucket owes some past empty) goes in remaining's place as minus
-- itself (remaining is 0 then: see script-protocol.ts), so the reply keeps its width
local function report(m, s, rule, cost, admits, delay_ms, reply)
  local block_ms = block_left_ms(s, rule)
  local resets = block_ms > 0 and rule.block_resets
  local remaining = 0
  if block_ms == 0 then remaining = m.remaining(s, rule) end
  local retry_ms = 0
  if not admits then
    if cost > rule.burst then
      retry_ms = -1
    elseif resets then
      retry_ms = block_ms
    else
      retry_ms = max(block_ms, m.wait_ms(s, rule, cost))
    end
  end
  local full_ms = block_ms
  if not resets then full_ms = max(block_ms, m.wait_ms(s, rule, rule.burst)) end
  local next_ms = 0
  if remaining < rule.burst then
    if resets then next_ms = block_ms else next_ms = max(block_ms, m.wait_ms(s, rule, remaining + 1)) end
  end
  local owed = remaining
  if rule.settles and m.debt then
    local debt = m.debt(s, rule)
    if debt > 0 then owed = -debt end
  end
  local k = reply.n
  reply[k + 1], reply[k + 2], reply[k + 3], reply[k + 4] = admits and 1 or 0, owed, retry_ms, full_ms
  reply[k + 5], reply[k + 6], reply[k + 7], reply[k + 8] = next_ms, delay_ms, block_ms, s.at
  reply.n = k + ${REPLY_WIDTH}
  return full_ms
end

-- appends a number to the reply
local function append(reply, value)
  reply.n = reply.n + 1
  reply[reply.n] = value
end

-- the numbers of the arguments that repeat (heads, indexes, costs, a rule's fields) by their text:
-- tonumber of a text runs strtod twice, a lookup only hashes; a library keeps them from call to
-- call, never more than 4096
local numbers, numbers_kept = {}, 0
local function number(text)
  local value = numbers[text]
  if value == nil then
    value = tonumber(text)
    -- an empty text ('' for none) has no number: nothing to keep
    if value == nil then return nil end
    if numbers_kept >= 4096 then numbers, numbers_kept = {}, 0 end
    numbers[text], numbers_kept = value, numbers_kept + 1
  end
  return value
end

-- the rules read so far, by their arguments: a library keeps them from call to call (never more
-- than 1024), where reading one costs a table and four numbers
local rules_read, rules_kept = {}, 0

-- the rule whose arguments start at ARGV[at]: its algorithm's model (and a quota's period start,
-- origin), rps, burst, block (negative:
-- a block whose end resets the bucket, block_resets), a window's scaled limit ('' for none: burst;
-- negative: a window anchored at a key's first request, anchored) and its debt ('' for none: 0;
-- given, even '0': a rule that settles, settles)
local function read_rule(ARGV, at)
  local id = ARGV[at] .. ' ' .. ARGV[at + 1] .. ' ' .. ARGV[at + 2] .. ' ' .. ARGV[at + 3] .. ' ' .. ARGV[at + 4]
    .. ' ' .. ARGV[at + 5]
  local rule = rules_read[id]
  if rule == nil then
    local burst = number(ARGV[at + 2])
    -- a quota names its period's start after its algorithm, 'quota@<ms>' (origin: only such a rule has it)
    local algorithm, origin = ARGV[at], nil
    local sep = string.find(algorithm, '@', 1, true)
    if sep then algorithm, origin = string.sub(algorithm, 1, sep - 1), tonumber(string.sub(algorithm, sep + 1)) end
    rule = {
      algorithm = algorithm, model = MODELS[algorithm], rps = number(ARGV[at + 1]), burst = burst,
      block_ms = number(ARGV[at + 3]), limit = number(ARGV[at + 4]) or burst, origin = origin,
      debt = number(ARGV[at + 5]) or 0,
    }
    -- only such a rule has the field: every other one's table stays as small
    if rule.block_ms < 0 then rule.block_ms, rule.block_resets = -rule.block_ms, true end
    -- a negative limit: a window anchored at a key's first request (anchored: only such a rule has it)
    if rule.limit < 0 then rule.limit, rule.anchored = -rule.limit, true end
    -- a debt given: a rule that settles, which reports what its bucket owes (settles: only such a rule has it)
    if ARGV[at + 5] ~= '' then rule.settles = true end
    if rules_kept >= 1024 then rules_read, rules_kept = {}, 0 end
    rules_read[id], rules_kept = rule, rules_kept + 1
  end
  return rule
end

-- a request that runs after its caller stopped waiting (it sat in the socket of a frozen or busy
-- Redis) is not decided and charges nothing: it has had its failMode outcome already, or is about to
local function past(now, deadline)
  return deadline ~= '' and now > tonumber(deadline)
end

-- one request's policies, filled for the first n of each by the request being decided: the index
-- of each one's key in KEYS, its rule, its cost, its state and whether it admits the request
local indexes_of, rules_of, costs_of, states, admits = {}, {}, {}, {}, {}

-- algorithms/decide.ts decideAll, for the request's n policies (indexes_of ... costs_of): appends
-- 2 when every policy admits it, else 1, then the report of each policy that is a sorted-set log
local function decide(call, KEYS, n, charge, reply)
  local allowed = true
  for i = 1, n do
    local rule, k = rules_of[i], indexes_of[i]
    states[i] = load(call, rule.model, KEYS[k], k, rule)
    if rule.block_resets then states[i] = after_block(rule.model, states[i], call.now, rule) end
    admits[i] = admitted(rule.model, states[i], rule, costs_of[i])
    allowed = allowed and admits[i]
  end
  append(reply, allowed and 2 or 1)

  local charged = allowed and charge
  for i = 1, n do
    local rule, k = rules_of[i], indexes_of[i]
    local m = rule.model
    local delay_ms = 0
    if allowed and m.delay_ms then delay_ms = m.delay_ms(states[i], rule) end
    local saves = charged
    if charged then
      states[i] = m.charge(states[i], rule, costs_of[i])
      if m.add then m.add(KEYS[k], states[i]) end
    elseif charge and starts_block(states[i], rule, costs_of[i], admits[i]) then
      states[i] = block(states[i], rule)
      saves = true
    end
    if m.load then
      local full_ms = report(m, states[i], rule, costs_of[i], admits[i], delay_ms, reply)
      if saves then save(call, m, KEYS[k], states[i], full_ms) end
    elseif saves then
      -- fullMsOf, as report works it out (a block that resets: its end; only then is block_ms > 0
      -- and block_resets read)
      local block_ms = block_left_ms(states[i], rule)
      if not (block_ms > 0 and rule.block_resets) then block_ms = max(block_ms, m.wait_ms(states[i], rule, rule.burst)) end
      save(call, m, KEYS[k], states[i], block_ms)
    end
  end
end

-- requests one after another, each against all of its policies (see DECIDE_LUA)
local function decide_call(KEYS, ARGV)
  local call = begin_call(KEYS, ARGV[1])
  local rule_count, keyed, plain, requests = number(ARGV[2]), ARGV[3] == '1', ARGV[5] == '1', number(ARGV[6])
  local late = past(call.now, ARGV[4])
  local rules = {}
  for r = 1, rule_count do rules[r] = read_rule(ARGV, 7 + (r - 1) * ${RULE_ARGS}) end
  -- the reply starts with the values read: the table MGET gave, grown
  local reply = call.values
  reply.n = #KEYS
  local next_key = 1
  local at = 7 + rule_count * ${RULE_ARGS}
  for _ = 1, requests do
    local n, costs, charge, skipped = 1, false, true, late
    if not plain then
      local head = number(ARGV[at])
      n, costs, charge = floor(head / 8), head % 2 == 1, head % 4 < 2
      at = at + 1
      if head % 8 >= 4 then
        skipped = past(call.now, ARGV[at])
        at = at + 1
      end
    end
    if skipped then
      append(reply, 0)
      local width = 0
      if keyed then width = width + 1 else next_key = next_key + n end
      if rule_count > 1 then width = width + 1 end
      if costs then width = width + 1 end
      at = at + n * width
    else
      for i = 1, n do
        local k = next_key
        if keyed then k = number(ARGV[at]); at = at + 1 else next_key = next_key + 1 end
        local rule = rules[1]
        if rule_count > 1 then rule = rules[number(ARGV[at])]; at = at + 1 end
        local cost = 1
        if costs then cost = number(ARGV[at]); at = at + 1 end
        indexes_of[i], rules_of[i], costs_of[i] = k, rule, cost
      end
      decide(call, KEYS, n, charge, reply)
    end
  end
  flush(call)
  append(reply, call.now)
  reply.n = nil
  return reply
end

-- gives back what a decide call charged, or settles it, policy after policy (see REFUND_LUA):
-- algorithms/decide.ts settleState
local function refund_call(KEYS, ARGV)
  local call = begin_call(KEYS, ARGV[1])
  local reply = { n = 0 }
  for i = 1, #KEYS do
    local at = 2 + (i - 1) * ${REFUND_ARGS}
    local rule = read_rule(ARGV, at)
    local m = rule.model
    -- signed: what to give back; below 0, what to take more (a settle above what was taken)
    local amount = number(ARGV[at + ${RULE_ARGS}])
    local loaded = load(call, m, KEYS[i], i, rule)
    -- a block that has ended and resets the bucket leaves a fresh one, as for a decision
    if rule.block_resets then loaded = after_block(m, loaded, call.now, rule) end
    local s = loaded
    if amount > 0 then
      s = m.refund(loaded, rule, amount, tonumber(ARGV[at + ${RULE_ARGS} + 1]))
    elseif amount < 0 and m.debit then
      -- (an algorithm without debit, concurrency, takes nothing more: decide.ts settleState)
      s = m.debit(loaded, rule, -amount)
      -- a log's debit logs entries as a charge does: add writes them
      if m.add and s ~= loaded then m.add(KEYS[i], s) end
    end
    -- the bucket after, as a peek of a request of cost 0 sees it: admitted unless in debt or blocked
    local full_ms = report(m, s, rule, 0, admitted(m, s, rule, 0), 0, reply)
    -- nothing given back (a charge of a window or quota period that has ended): the stored value and
    -- its TTL stand (MemoryStore.refund); a log's refund has removed its entries itself: save it
    if m.load or s ~= loaded then save(call, m, KEYS[i], s, full_ms) end
  end
  flush(call)
  append(reply, call.now)
  reply.n = nil
  return reply
end
`;

/**
 * `define_calls`, which defines everything the calls need and returns the two (`decide_call`,
 * `refund_call`): a script runs it on every call; a library, on its first call. A library's body
 * runs with no globals at all (no `math`, no `string`), so nothing can be defined as it loads.
 */
const CALLS_LUA = `local function define_calls()${SHARED_LUA}
return decide_call, refund_call
end
`;

/**
 * Requests against all of their policies, of any algorithms, one after another in one atomic
 * call: `decideAll` of `algorithms/decide.ts` in Lua for each request. Pass 1 reads every bucket
 * of the request and asks whether it admits it; pass 2 charges and writes every bucket only when
 * all of them do. A later request of the call sees what an earlier one charged, exactly as if
 * each had a call of its own; batching them saves Redis the cost of a script call per request.
 * Redis only reads, checks and writes: the figures of each decision (what is left, when to retry)
 * the app derives from the values the call read (see `script-protocol.ts`).
 *
 * KEYS, ARGV and the reply: see `script-protocol.ts`, which encodes and decodes them.
 *
 * A key expires (on the script's clock) when its bucket is full again and no block
 * holds. A refused request writes only the blocks it starts.
 */
export const DECIDE_LUA = `${CALLS_LUA}local decide_call = define_calls()
return decide_call(KEYS, ARGV)
`;

/**
 * Gives back what a decide call charged, when another hash slot of a Redis Cluster refused the
 * same request or a request ended (a refund), or makes it up to what the request really cost (a
 * settle): each algorithm's `refund` or `debit` (`algorithms/*.ts`) in Lua, for every policy.
 *
 * KEYS, ARGV and the reply: see `script-protocol.ts`.
 */
export const REFUND_LUA = `${CALLS_LUA}local _, refund_call = define_calls()
return refund_call(KEYS, ARGV)
`;

/** What names the library and its functions: the text's own digest, so two builds never share a name. */
const VERSION = createHash('sha1').update(CALLS_LUA).update(FLAT_CALL_LUA).digest('hex').slice(0, 12);

/** The library's name, and the three functions it registers (`FCALL` names them). */
export const LIBRARY = {
  name: `nestjs_ratelimit_${VERSION}`,
  decide: `nestjs_ratelimit_decide_${VERSION}`,
  refund: `nestjs_ratelimit_refund_${VERSION}`,
  flat: `nestjs_ratelimit_flat_${VERSION}`,
} as const;

/**
 * The decide, refund and flat calls as a Redis Functions library (Redis 7.0 on): the library's
 * first call defines the first two, and every call after runs only its function, where a script
 * defines every function above anew on every call (the flat call is defined as the library loads:
 * it touches no global until it runs). Its names carry the digest of its text: instances of two
 * builds sharing a Redis (a rolling deploy) each call their own.
 */
export const LIBRARY_LUA = `#!lua name=${LIBRARY.name}
${CALLS_LUA}${FLAT_CALL_LUA}
-- the calls, once the first has defined them (the flat call needs nothing defined first)
local decide_call, refund_call
local function defined()
  if decide_call == nil then decide_call, refund_call = define_calls() end
end
redis.register_function('${LIBRARY.decide}', function(keys, args) defined() return decide_call(keys, args) end)
redis.register_function('${LIBRARY.refund}', function(keys, args) defined() return refund_call(keys, args) end)
redis.register_function('${LIBRARY.flat}', flat_call)
`;
