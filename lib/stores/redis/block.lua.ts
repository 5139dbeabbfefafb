/**
 * Blocks in Lua (`Rule.blockMs`): mirror the block functions of `algorithms/decide.ts` line for
 * line, and store a block's end after an algorithm's own fields. A rule without a block gets
 * `block_ms` 0 and never reads or starts one; only a rule whose block's end resets its bucket
 * (`Rule.blockResets`) has `block_resets` (true), so the others never look further than `block_ms`.
 */
export const BLOCK_LUA = `
-- a stored value with the end of a block appended, once one was set (0 is none: nothing appended)
local function with_block(raw, s)
  if s.blocked_until > 0 then return raw .. string.format('|%d', s.blocked_until) end
  return raw
end

-- algorithms/decide.ts blockLeftMs (a block_ms of 0 is none)
local function block_left_ms(s, rule)
  if rule.block_ms == 0 then return 0 end
  return max(0, s.blocked_until - s.at)
end

-- algorithms/decide.ts startsBlock
local function starts_block(s, rule, cost, admits)
  return not admits and rule.block_ms > 0 and cost <= rule.burst and block_left_ms(s, rule) == 0
end

-- algorithms/decide.ts currentOf, after the model's current (load) of a rule with block_resets: a
-- state whose block has ended is a key never seen (a model that keeps its state otherwise, the
-- sorted-set log, has forget: its set is deleted when the fresh state is written)
local function after_block(m, s, now, rule)
  if s.blocked_until > 0 and s.blocked_until <= s.at then
    if m.forget then return m.forget(s, now) end
    return m.current(nil, now, rule)
  end
  return s
end

-- algorithms/decide.ts block (the state is this call's own: set in place)
local function block(s, rule)
  s.blocked_until = s.at + rule.block_ms
  return s
end
`;
