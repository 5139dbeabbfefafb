import { FIXED_WINDOW_LUA } from './fixed-window.lua.js';
import { GCRA_LUA } from './gcra.lua.js';
import { SLIDING_WINDOW_COUNTER_LUA } from './sliding-window-counter.lua.js';
import { SLIDING_WINDOW_LOG_LUA } from './sliding-window-log.lua.js';
import { TOKEN_BUCKET_LUA } from './token-bucket.lua.js';

/**
 * The algorithms' models by name (`MODELS`), each defined when a call first asks for it: Redis
 * runs a script's whole body on every call, and making all six models' functions for every call
 * cost a call that decides one request about a third of its Redis CPU. Needs the shared helpers
 * and the blocks (`BLOCK_LUA`) defined before it.
 */
export const MODELS_LUA = `
local function define_token_bucket()${TOKEN_BUCKET_LUA}  return { token_bucket = token_bucket }
end

local function define_gcra()${GCRA_LUA}  return { gcra = gcra, leaky_bucket = leaky_bucket }
end

local function define_fixed_window()${FIXED_WINDOW_LUA}  return { fixed_window = fixed_window }
end

local function define_sliding_window_log()${SLIDING_WINDOW_LOG_LUA}  return { sliding_window_log = sliding_window_log }
end

local function define_sliding_window_counter()${SLIDING_WINDOW_COUNTER_LUA}  return { sliding_window_counter = sliding_window_counter }
end

local DEFINE = {
  token_bucket = define_token_bucket,
  leaky_bucket = define_gcra,
  fixed_window = define_fixed_window,
  sliding_window_log = define_sliding_window_log,
  sliding_window_counter = define_sliding_window_counter,
  gcra = define_gcra,
}

-- the models by algorithm name, each defined on first use
local MODELS = setmetatable({}, { __index = function(models, name)
  for defined, model in pairs(DEFINE[name]()) do models[defined] = model end
  return models[name]
end })
`;
