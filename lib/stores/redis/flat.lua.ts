/**
 * The flat call: a decide call of plain requests (one policy each, charged at cost 1, by the
 * call's deadline) of one rule of the GCRA family (token_bucket, gcra, leaky_bucket) without a
 * block, which is what most calls are. It gives the general decide call's verdicts and reply from a
 * body small enough to run whole on every call: no table per decision, none per key unless the
 * call repeats keys, each admitted bucket written with one `SET ... PX`. A script's body runs on
 * every `EVALSHA`: the general call's (every algorithm's model, blocks, costs, peeks) made a
 * one-decision call cost Redis about 200,000 instructions, this one about 74,000 (BENCHMARKS.md,
 * redis-ir).
 *
 * It mirrors `tokenBucket` and `gcra` (`algorithms/token-bucket.ts`, `algorithms/gcra.ts`) and
 * their Lua (`token-bucket.lua.ts`, `gcra.lua.ts`) line for line: current, admitted at cost 1,
 * charge, and the expiry `save` works out; change them together. KEYS, ARGV and the reply: see
 * `script-protocol.ts` (`encodeDecide`, the flat call).
 *
 * `number` names how an argument that repeats from call to call is read: the library keeps what
 * it has read (a lookup hashes, `tonumber` runs `strtod`), a script cannot keep anything.
 */
function flatCall(number: (text: string) => string): string {
  return `
-- the library and string functions the call uses: looked up on a call that finds them unset (a
-- library's every call but its first; a script's every call)
local floor, ceil, max, min, format, match

-- save and flush (bucket-io.lua.ts) of a bucket charged to level as of since: one SET, the value as
-- encode in token-bucket.lua.ts and gcra.lua.ts writes it (a whole level as %d, which writes what
-- %.17g would for a fraction of the work), to expire when the bucket is full again (a charge of 1
-- always leaves it short of full, so never at once), its TTL from base, the clock the state is on
local function save(key, backlog, level, since, blocked_until, burst, rps, base)
  local value
  if level % 1 == 0 then value = format('%d|%d', level, since) else value = format('%.17g|%d', level, since) end
  if blocked_until > 0 then value = value .. format('|%d', blocked_until) end
  -- waitMs(burst): until the backlog has drained, or the tokens are back
  local full_ms
  if backlog then full_ms = ceil((level * 1000) / rps) else full_ms = ceil(((burst - level) * 1000) / rps) end
  local ttl = format('%d', max(1, since + max(1, full_ms) - base))
  redis.call('SET', key, value, 'PX', ttl)
end

local function flat_call(KEYS, ARGV)
  if floor == nil then
    floor, ceil, max, min = math.floor, math.ceil, math.max, math.min
    format, match = string.format, string.match
  end
  -- the reply starts with the values read: the table MGET gives, grown
  local reply
  if #KEYS <= 1000 then
    reply = redis.call('MGET', unpack(KEYS))
  else
    -- unpack passes a few thousand values at most
    reply = {}
    for from = 1, #KEYS, 1000 do
      local got = redis.call('MGET', unpack(KEYS, from, min(#KEYS, from + 999)))
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
  -- request i takes KEYS[i], unless key indexes follow the rule
  local keyed = #ARGV > 5
  local requests = #KEYS
  if keyed then requests = #ARGV - 5 end
  -- a call past its deadline decides nothing (see past() in decide.lua.ts)
  if ARGV[2] ~= '' and now > ARGV[2] + 0 then
    for i = 1, requests do reply[answers + i] = 0 end
    reply[answers + requests + 1] = now
    return reply
  end
  local backlog = ARGV[3] ~= 'token_bucket'
  local rps, burst = ${number('ARGV[4]')}, ${number('ARGV[5]')}
  -- algorithms/conversions.ts WHOLE_TOLERANCE (wholeIfNear) times burst
  local near = burst * 256 * 2 ^ (-52)
  -- the buckets this call wrote, by key index, where keys repeat
  local levels, times, blocks, written, count
  if keyed then levels, times, blocks, written, count = {}, {}, {}, {}, 0 end
  for i = 1, requests do
    local k = i
    if keyed then k = ${number('ARGV[5 + i]')} end
    -- the bucket as stored: as this call wrote it, else as it was read (nil: none)
    local level, time, blocked_until = nil, nil, 0
    if keyed and times[k] then
      level, time, blocked_until = levels[k], times[k], blocks[k]
    elseif values[k] then
      -- fields() in decide.lua.ts
      local a, b, c = match(values[k], '^([^|]*)|([^|]*)|?([^|]*)|?[^|]*$')
      level, time, blocked_until = tonumber(a), tonumber(b), tonumber(c) or 0
    end
    -- (max, min and abs written out: a call of one costs more than the arithmetic; and where no
    -- time has passed, neither full-again test can change the level, so the ceil is skipped)
    local since, admits = now, false
    if backlog then
      -- gcra.current, then admitted at cost 1 (waitMs(1) == 0: the backlog leaves room for 1)
      local left = 0
      if level ~= nil then
        local elapsed = now - time
        if elapsed < 0 then elapsed = 0 end
        local stored = level
        if stored > burst then stored = burst end
        left = stored - (elapsed * rps) / 1000
        if left < 0 then left = 0 end
        local whole = floor(left + 0.5)
        if left - whole <= near and whole - left <= near then left = whole end
        if elapsed > 0 and elapsed >= ceil((stored * 1000) / rps) then left = 0 end
        if time > now then since = time end
      end
      admits = 1 <= burst and left <= burst - 1
      -- gcra.charge
      level = left + 1
    else
      -- tokenBucket.current, then admitted at cost 1 (waitMs(1) == 0: a whole token is there)
      local tokens = burst
      if level ~= nil then
        local elapsed = now - time
        if elapsed < 0 then elapsed = 0 end
        tokens = level + (elapsed * rps) / 1000
        if tokens > burst then tokens = burst end
        local whole = floor(tokens + 0.5)
        if tokens - whole <= near and whole - tokens <= near then tokens = whole end
        if elapsed > 0 and elapsed >= ceil(((burst - level) * 1000) / rps) then tokens = burst end
        if time > now then since = time end
      end
      admits = 1 <= burst and tokens >= 1
      -- tokenBucket.charge
      level = tokens - 1
    end
    if admits then
      reply[answers + i] = 2
      if keyed then
        if times[k] == nil then
          count = count + 1
          written[count] = k
        end
        levels[k], times[k], blocks[k] = level, since, blocked_until
      else
        save(KEYS[k], backlog, level, since, blocked_until, burst, rps, base)
      end
    else
      reply[answers + i] = 1
    end
  end
  if keyed then
    for j = 1, count do
      local k = written[j]
      save(KEYS[k], backlog, levels[k], times[k], blocks[k], burst, rps, base)
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
