import {
  type AlgorithmDescriptor,
  ALGORITHMS,
  type Algorithm,
  type Held,
  type Rule,
} from '../../../lib/algorithms/algorithm.types.js';
import {
  ALGORITHM_DESCRIPTORS,
  RELEASED,
  SCALED_BY_LIMIT,
  UNSCALED,
  WINDOW_ALGORITHMS,
} from '../../../lib/algorithms/registry.js';
import { PACKED_STATES, PACKED_WIDTH } from '../../../lib/stores/memory/packed-state.js';
import { LUA_MODELS, MODELS_LUA } from '../../../lib/stores/redis/models.lua.js';

/**
 * What the compiler cannot check of the registry: that the names are Lua identifiers and each
 * Lua body defines the table its name promises, that the key tags are the ones buckets are stored
 * under, and that every packing gives back the state it was given.
 */

/** The bucket-key tags as released: a changed one would orphan every bucket stored under it. */
const RELEASED_TAGS: Record<Algorithm, string> = {
  token_bucket: 'tb',
  leaky_bucket: 'lb',
  fixed_window: 'fw',
  sliding_window_log: 'swl',
  sliding_window_counter: 'swc',
  gcra: 'gcra',
  concurrency: 'cc',
  quota: 'qt',
};

describe('the algorithm registry', () => {
  it('lists the algorithms in the order docs/02-policies-and-algorithms.md does', () => {
    expect(ALGORITHMS).toEqual([
      'token_bucket',
      'leaky_bucket',
      'fixed_window',
      'sliding_window_log',
      'sliding_window_counter',
      'gcra',
      'concurrency',
      'quota',
    ]);
  });

  it('keeps every released key tag, and no two algorithms share one', () => {
    const tags = ALGORITHMS.map((algorithm) => ALGORITHM_DESCRIPTORS[algorithm].tag);
    expect(Object.fromEntries(ALGORITHMS.map((algorithm, i) => [algorithm, tags[i]]))).toEqual(RELEASED_TAGS);
    expect(new Set(tags).size).toBe(tags.length);
    // a tag sits between the key's separators and before its `.b` and `{digest}`
    for (const tag of tags) expect(tag).toMatch(/^[a-z0-9]+$/);
  });

  it('counts in windows, scales by the limit, leaves unscaled and regains by release exactly the algorithms it should', () => {
    expect([...WINDOW_ALGORITHMS].sort()).toEqual([
      'concurrency',
      'fixed_window',
      'quota',
      'sliding_window_counter',
      'sliding_window_log',
    ]);
    expect([...SCALED_BY_LIMIT].sort()).toEqual(['fixed_window', 'quota', 'sliding_window_counter']);
    // a number of requests in flight is not a rate: no factor scales it, and time does not give a slot back
    expect([...UNSCALED]).toEqual(['concurrency']);
    expect([...RELEASED]).toEqual(['concurrency']);
  });

  it.each(ALGORITHMS.map((a) => [a]))(
    '%s: its Lua body defines the table its name promises, and DEFINE names it',
    (algorithm) => {
      expect(algorithm).toMatch(/^[a-z_][a-z0-9_]*$/);
      expect(LUA_MODELS[algorithm]).toMatch(new RegExp(`^local ${algorithm} = `, 'm'));
      const define = new RegExp(`^  ${algorithm} = (define_\\w+),$`, 'm').exec(MODELS_LUA);
      expect(define).not.toBeNull();
      // the define function, to the next one (or DEFINE): its last line returns the tables it made
      const start = MODELS_LUA.indexOf(`local function ${define![1]}()`);
      const end = MODELS_LUA.slice(start + 1).search(/^local (function define_|DEFINE)/m) + start + 1;
      const text = MODELS_LUA.slice(start, end);
      const returned = [...text.matchAll(/^ {2}return \{ ([^}]*) \}$/gm)].at(-1);
      expect(returned?.[1].split(', ')).toContain(`${algorithm} = ${algorithm}`);
    },
  );

  it.each(ALGORITHMS.map((a) => [a]))('%s: its packing fits a row and gives back the state written', (algorithm) => {
    const { model, packing } = ALGORITHM_DESCRIPTORS[algorithm] as AlgorithmDescriptor<Held>;
    expect(PACKED_STATES[algorithm]).toBe(packing);
    expect(packing.width).toBeLessThanOrEqual(PACKED_WIDTH);
    const rule: Rule = { algorithm, rps: 10, burst: 5 };
    const fresh: Held = model.current(undefined, 1_000, rule);
    const charged: Held = model.charge(model.current(fresh, 1_250, rule), rule, 2.5);
    for (const state of [fresh, charged, { ...charged, blockedUntil: 61_250 }]) {
      // a row with numbers on both sides: a packing writes only its own width
      const row = new Float64Array(PACKED_WIDTH + 2).fill(-1);
      const extra = packing.write(state, row, 1);
      expect(packing.read(row, 1, extra)).toEqual(state);
      expect([row[0], ...row.slice(1 + packing.width)]).toEqual(new Array(PACKED_WIDTH + 2 - packing.width).fill(-1));
    }
  });
});
