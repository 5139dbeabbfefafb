import type { Algorithm } from '../../algorithms/algorithm.types.js';
import { ALGORITHM_DESCRIPTORS } from '../../algorithms/registry.js';

/**
 * Each algorithm's Lua mirror, by name, from its descriptor (`AlgorithmDescriptor.lua`): a body
 * that defines a local table named after the algorithm, with the functions of its pure model.
 * Algorithms whose mirrors share a body (GCRA's defines `leaky_bucket` as well) name the same one,
 * and it is defined once.
 *
 * @example LUA_MODELS.gcra === LUA_MODELS.leaky_bucket  // true: one body, one define_gcra
 */
export const LUA_MODELS = Object.fromEntries(
  Object.entries(ALGORITHM_DESCRIPTORS).map(([algorithm, descriptor]) => [algorithm, descriptor.lua]),
) as Record<Algorithm, string>;

/** The algorithms of `LUA_MODELS` by the body they share, each body once, in the order first named. */
function algorithmsByBody(): Map<string, Algorithm[]> {
  const byBody = new Map<string, Algorithm[]>();
  for (const [algorithm, body] of Object.entries(LUA_MODELS) as [Algorithm, string][]) {
    const algorithms = byBody.get(body);
    if (algorithms === undefined) byBody.set(body, [algorithm]);
    else algorithms.push(algorithm);
  }
  return byBody;
}

/**
 * One Lua function per body, `define_<its first algorithm>`, that runs the body and returns the
 * tables of every algorithm that shares it; and `DEFINE`, the function each algorithm's table comes
 * from, by name.
 */
function defineFunctions(): string {
  const functions: string[] = [];
  const entries: string[] = [];
  for (const [body, algorithms] of algorithmsByBody()) {
    const define = `define_${algorithms[0]}`;
    const tables = algorithms.map((algorithm) => `${algorithm} = ${algorithm}`).join(', ');
    functions.push(`local function ${define}()${body}  return { ${tables} }\nend\n`);
    for (const algorithm of algorithms) entries.push(`  ${algorithm} = ${define},\n`);
  }
  return `${functions.join('\n')}\nlocal DEFINE = {\n${entries.join('')}}\n`;
}

/**
 * The algorithms' models by name (`MODELS`), each defined when a call first asks for it: Redis
 * runs a script's whole body on every call, and making all six models' functions for every call
 * cost a call that decides one request about a third of its Redis CPU. Needs the shared helpers
 * and the blocks (`BLOCK_LUA`) defined before it.
 */
export const MODELS_LUA = `
${defineFunctions()}
-- the models by algorithm name, each defined on first use
local MODELS = setmetatable({}, { __index = function(models, name)
  for defined, model in pairs(DEFINE[name]()) do models[defined] = model end
  return models[name]
end })
`;
