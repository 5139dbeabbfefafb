/**
 * The flat call: a decide call of plain requests (one policy each, charged at cost 1, by the
 * call's deadline) of one rule without a block, of an algorithm whose state is one string (token
 * bucket, GCRA, leaky bucket, fixed window, quota, sliding window counter), which is what most calls are.
 * It gives the general decide call's verdicts and reply from a body small enough to run whole on
 * every call: no table per decision, none per key unless the call repeats keys, each admitted
 * bucket written with one `SET ... PX`. A script's body runs on every `EVALSHA`: the general
 * call's (every algorithm's model, blocks, costs, peeks) made a one-decision call cost Redis about
 * 200,000 instructions, this one about 74,000 (BENCHMARKS.md, redis-ir).
 *
 * It mirrors the models (`algorithms/token-bucket.ts`, `gcra.ts`, `fixed-window.ts`, `quota.ts`,
 * `sliding-window-counter.ts`) and their Lua mirrors beside them (`algorithms/*.lua.ts`) line for
 * line: current, admitted at cost 1, charge, and the expiry `save` works out; change them
 * together. KEYS, ARGV and the reply: see `script-protocol.ts` (`encodeDecide`, the flat call).
 *
 * `number` names how an argument that repeats from call to call is read: the library keeps what
 * it has read (a lookup hashes, `tonumber` runs `strtod`), a script cannot keep anything.
 */
function flatCall(number: (text: string) => string): string {
  return `
-- the library and string functions the call uses: looked up on a call that finds them unset (a
-- library's every call but its first; a script's every call)
local floor, ceil, max, format, match

-- save and flush (bucket-io.lua.ts) of a bucket charged by a request: one SET of the value encode
-- writes (a whole number as %d, which writes what %.17g would for a fraction of the work), to
-- expire when the bucket is full again, waitMs(burst) after its at (a charge of 1 always leaves
-- it short of full, so never at once), its TTL from base, the clock the state is dated on. a, b, c:
-- the state's fields in the order its value stores them; at: its time
local function save(key, algorithm, a, b, c, blocked_until, at, burst, rps, w, base)
  local value, full_ms
  if w == 0 then
    -- a bucket (no window): <tokens or backlog>|<at>: until the tokens are back, or the backlog has drained
    if a % 1 == 0 then value = format('%d|%d', a, b) else value = format('%.17g|%d', a, b) end
    if algorithm == 'token_bucket' then
      full_ms = ceil(((burst - a) * 1000) / rps)
    else
      full_ms = ceil((a * 1000) / rps)
    end
  elseif algorithm == 'sliding_window_counter' then
    -- <start>|<previous>|<count>: until the next window ends (this one's count, >= 1, fills it)
    if b % 1 == 0 and c % 1 == 0 then
      value = format('%d|%d|%d', a, b, c)
    else
      value = format('%d|%.17g|%.17g', a, b, c)
    end
    full_ms = 2 * w - (at - a)
  else
    -- fixed_window, quota: <start>|<count>: until the window (a quota's period) ends
    if b % 1 == 0 then value = format('%d|%d', a, b) else value = format('%d|%.17g', a, b) end
    full_ms = a + w - at
  end
  if blocked_until > 0 then value = value .. format('|%d', blocked_until) end
  local ttl = format('%d', max(1, at + max(1, full_ms) - base))
  redis.call('SET', key, value, 'PX', ttl)
end

local function flat_call(KEYS, ARGV)
  if floor == nil then
    local maths, strings = math, string
    floor, ceil, max = maths.floor, maths.ceil, maths.max
    format, match = strings.format, strings.match
  end
  -- the reply starts with the values read: the table MGET gives, grown
  local reply
  if #KEYS <= 1000 then
    reply = redis.call('MGET', unpack(KEYS))
  else
    -- unpack passes a few thousand values at most
    reply = {}
    for from = 1, #KEYS, 1000 do
      local got = redis.call('MGET', unpack(KEYS, from, math.min(#KEYS, from + 999)))
      for j = 1, #got do reply[from + j - 1] = got[j] end
    end
  end
  -- the clock, as clock() in bucket-io.lua.ts: now, and the time on it that TTLs count from
  local now, base
  if ARGV[1] == '' then
    local time = redis.call('TIME')
    now = time[1] * 1000 + floor(time[2] / 1000)
    base = now
  else
    local given, real = match(ARGV[1], '^(%S+) ?(%S*)$')
    now = tonumber(given)
    base = tonumber(real) or now
  end
  local values, answers = reply, #KEYS
  local algorithm = ARGV[3]
  local backlog = algorithm == 'gcra' or algorithm == 'leaky_bucket'
  local quota = algorithm == 'quota'
  local fixed, counter = quota or algorithm == 'fixed_window', algorithm == 'sliding_window_counter'
  local windowed = fixed or counter
  local rps, burst = ${number('ARGV[4]')}, ${number('ARGV[5]')}
  -- algorithms/conversions.ts WHOLE_TOLERANCE (wholeIfNear) times burst
  local near = burst * 256 * 2 ^ (-52)
  -- a window's length (windowMs) and what it admits a request of 1 under (windowLimit(rule, 1))
  -- (anchored: a fixed window anchored at a key's first request, whose limit comes negated: see
  -- limitArg in script-protocol.ts)
  local w, limit, anchored = 0, burst, false
  if windowed then
    w = floor((burst * 1000) / rps + 0.5)
    if w < 1 then w = 1 end
    if ARGV[6] ~= '' then
      limit = ${number('ARGV[6]')}
      if limit < 0 then limit, anchored = -limit, true end
    end
    if limit < 1 then limit = 1 end
  end
  -- a quota's period starts at origin (its rule's, from the argument after the limit), its windows
  -- are periods of w from there (quota.ts)
  local origin = 0
  -- request i takes KEYS[i], unless key indexes follow the rule's arguments
  local first = 6
  if windowed then first = 7 end
  if quota then
    origin = ${number('ARGV[7]')}
    first = 8
  end
  local keyed = #ARGV >= first
  local requests = #KEYS
  if keyed then requests = #ARGV - first + 1 end
  -- one request: a table made for its three numbers costs Redis less than growing MGET's twice
  if requests == 1 then reply = { values[1], 0, 0 } end
  -- a call past its deadline decides nothing (see past() in decide.lua.ts)
  if ARGV[2] ~= '' and now > ARGV[2] + 0 then
    for i = 1, requests do reply[answers + i] = 0 end
    reply[answers + requests + 1] = now
    return reply
  end
  -- the buckets this call wrote, by key index, where keys repeat: their fields, and only where
  -- they carry one, a window's time and a block's end (a bucket's time is its second field; a
  -- nil written to a key a table lacks adds the key, so none is)
  local as, bs, cs, ats, blocks, written, count
  if keyed then as, bs, cs, ats, blocks, written, count = {}, {}, {}, {}, {}, {}, 0 end
  for i = 1, requests do
    local k = i
    if keyed then k = ${number('ARGV[first + i - 1]')} end
    -- the bucket as stored (a, b, c: its fields in the order its value stores them): as this call
    -- wrote it, else as it was read (a nil: none)
    local a, b, c, blocked_until = nil, nil, nil, 0
    if keyed and as[k] ~= nil then
      a, b, c, blocked_until = as[k], bs[k], cs[k], blocks[k] or 0
    elseif values[k] then
      -- fields() in decide.lua.ts, each number read by arithmetic (one strtod; tonumber runs two:
      -- a third of the cost); the block's end follows the algorithm's fields
      local ta, tb, tc, td = match(values[k], '^([^|]*)|([^|]*)|?([^|]*)|?([^|]*)$')
      if ta ~= nil then
        a, b = ta + 0, tb + 0
        if tc ~= '' then c = tc + 0 end
        if counter then
          if td ~= '' then blocked_until = td + 0 end
        elseif c ~= nil then
          blocked_until = c
        end
      end
    end
    -- each algorithm's current, admitted at cost 1 (its waitMs(1) == 0) and charge, with max, min,
    -- abs and wholeIfNear's floor written out (a call of one costs more than the arithmetic; x - x %
    -- 1 is floor(x) exactly); where no time has passed, neither full-again test of the buckets can
    -- change the level, so the ceil is skipped
    local at, admits = now, false
    if backlog then
      -- gcra (a: the backlog, b: its time): admitted while the backlog leaves room for 1
      local left = 0
      if a ~= nil then
        local elapsed = now - b
        if elapsed < 0 then elapsed = 0 end
        local stored = a
        if stored > burst then stored = burst end
        left = stored - (elapsed * rps) / 1000
        if left < 0 then left = 0 end
        local whole = left + 0.5
        whole = whole - whole % 1
        if left - whole <= near and whole - left <= near then left = whole end
        if elapsed > 0 and elapsed >= ceil((stored * 1000) / rps) then left = 0 end
        if b > now then at = b end
      end
      admits = 1 <= burst and left <= burst - 1
      a, b = left + 1, at
    elseif not windowed then
      -- tokenBucket (a: the tokens, b: their time): admitted while a whole token is there
      local tokens = burst
      if a ~= nil then
        local elapsed = now - b
        if elapsed < 0 then elapsed = 0 end
        tokens = a + (elapsed * rps) / 1000
        if tokens > burst then tokens = burst end
        local whole = tokens + 0.5
        whole = whole - whole % 1
        if tokens - whole <= near and whole - tokens <= near then tokens = whole end
        if elapsed > 0 and elapsed >= ceil(((burst - a) * 1000) / rps) then tokens = burst end
        if b > now then at = b end
      end
      admits = 1 <= burst and tokens >= 1
      a, b = tokens - 1, at
    else
      -- the windows (a: the window's start; a clock that goes back into an earlier window stays
      -- in the stored one), counts written under a larger limit taken as the whole burst; an
      -- anchored window: the stored one while it lasts, else one that starts now
      if a ~= nil and a > now then at = a end
      local start
      if quota then
        -- never before the period the request is in (quota.current)
        if at < origin then at = origin end
        start = origin + floor((at - origin) / w) * w
      elseif not anchored then
        start = floor(at / w) * w
      elseif a ~= nil and at < a + w then
        start = a
      else
        start = at
      end
      if fixed then
        -- fixedWindow (b: the count)
        local counted = 0
        if a == start then
          counted = b
          if counted > burst then counted = burst end
        end
        admits = 1 <= burst and counted + 1 <= limit
        a, b = start, counted + 1
      else
        -- slidingWindowCounter (b: the previous window's count, c: this one's), admitted while
        -- this window's count leaves room for the previous one's weight (previousScaled)
        local previous, counted = 0, 0
        if a == start then
          previous, counted = b, c
          if previous > burst then previous = burst end
          if counted > burst then counted = burst end
        elseif a ~= nil and a + w == start then
          previous = c
          if previous > burst then previous = burst end
        end
        local room = limit - counted - 1
        admits = 1 <= burst and room >= 0 and previous * (w - (at - start)) <= room * w
        a, b, c = start, previous, counted + 1
      end
    end
    if admits then
      reply[answers + i] = 2
      if keyed then
        if as[k] == nil then
          count = count + 1
          written[count] = k
        end
        as[k], bs[k] = a, b
        if counter then cs[k] = c end
        if windowed then ats[k] = at end
        if blocked_until > 0 then blocks[k] = blocked_until end
      else
        save(KEYS[k], algorithm, a, b, c, blocked_until, at, burst, rps, w, base)
      end
    else
      reply[answers + i] = 1
    end
  end
  if keyed then
    for j = 1, count do
      local k = written[j]
      save(KEYS[k], algorithm, as[k], bs[k], cs[k], blocks[k] or 0, ats[k] or bs[k], burst, rps, w, base)
    end
  end
  reply[answers + requests + 1] = now
  return reply
end
`;
}

/** The flat call as a script, run whole on every call. */
export const FLAT_LUA = `${flatCall((text) => `(${text} + 0)`)}return flat_call(KEYS, ARGV)
`;

/**
 * The flat call in the library (`flat_call(KEYS, ARGV)`), with the numbers it reads kept by their
 * text (at most 4096): defined as the library loads, it touches no global until it runs.
 */
export const FLAT_CALL_LUA = `
local flat_numbers, flat_kept = {}, 0
local function flat_number(text)
  local value = flat_numbers[text]
  if value == nil then
    value = text + 0
    if flat_kept >= 4096 then flat_numbers, flat_kept = {}, 0 end
    flat_numbers[text], flat_kept = value, flat_kept + 1
  end
  return value
end
${flatCall((text) => `(flat_numbers[${text}] or flat_number(${text}))`)}`;
