import type { AlgorithmDescriptor, AlgorithmModel } from './model.types.js';
import { durationMs } from './conversions.js';
import { GCRA, gcra, type GcraState } from './gcra.js';
import { GCRA_LUA } from './gcra.lua.js';

/** A leaky bucket's stored state: the queue, in tokens, as of `at` (GCRA's backlog). */
export type LeakyBucketState = GcraState;

/**
 * Leaky bucket as a queue: requests leave at exactly `rps` tokens per second. An accepted
 * request waits until the tokens queued ahead of it have left (`delayMs`, at most
 * `burst / rps` seconds); a request that does not fit in the queue of `burst` is refused at
 * once. Which requests fit is GCRA's test (GCRA is the leaky bucket used as a meter), so this
 * model is `gcra` plus the wait, and so is its Lua mirror in `gcra.lua.ts` beside it.
 */
export const leakyBucket: AlgorithmModel<LeakyBucketState> = {
  ...gcra,

  delayMs(state, { rps }) {
    // `state` is the queue before this request joins it: it leaves once those ahead have.
    return durationMs(state.backlog, rps);
  },
};

/** The leaky bucket, for the registry: GCRA's state, packed as GCRA's, under a tag of its own. */
export const LEAKY_BUCKET: AlgorithmDescriptor<LeakyBucketState> = {
  model: leakyBucket,
  packing: GCRA.packing,
  lua: GCRA_LUA,
  decodeStored: GCRA.decodeStored,
  tag: 'lb',
  regain: 'rps',
  scaledBy: 'rps',
  flatArgs: [],
};
