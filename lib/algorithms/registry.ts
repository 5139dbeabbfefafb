import { CONCURRENCY } from './concurrency.js';
import { FIXED_WINDOW } from './fixed-window.js';
import { GCRA } from './gcra.js';
import { LEAKY_BUCKET } from './leaky-bucket.js';
import type { AlgorithmDescriptor } from './model.types.js';
import { QUOTA } from './quota.js';
import { SLIDING_WINDOW_COUNTER } from './sliding-window-counter.js';
import { SLIDING_WINDOW_LOG } from './sliding-window-log.js';
import { TOKEN_BUCKET } from './token-bucket.js';

/**
 * The one list of algorithms: each by the name a policy gives it, in the order
 * docs/02-policies-and-algorithms.md lists them. `Algorithm` is its keys, so every record keyed
 * by `Algorithm` elsewhere (the tables of cases, their TTLs) fails to compile until it has an
 * entry for a new one, and refuses one for a name not here; the Redis store's scripts assemble
 * the Lua mirrors from it (`stores/redis/models.lua.ts`).
 */
const DESCRIPTORS = {
  token_bucket: TOKEN_BUCKET,
  leaky_bucket: LEAKY_BUCKET,
  fixed_window: FIXED_WINDOW,
  sliding_window_log: SLIDING_WINDOW_LOG,
  sliding_window_counter: SLIDING_WINDOW_COUNTER,
  gcra: GCRA,
  concurrency: CONCURRENCY,
  quota: QUOTA,
} satisfies Record<string, AlgorithmDescriptor>;

/** The rate-limiting algorithms a policy can name. */
export type Algorithm = keyof typeof DESCRIPTORS;

/**
 * Each algorithm's descriptor, by name: its model, its packing, its Lua mirror, its key tag, how
 * its quota comes back, what a factor scales and what a policy of it may say. A plain object with a
 * handful of fixed keys, so a lookup per decision costs what a property read does.
 *
 * @example ALGORITHM_DESCRIPTORS[rule.algorithm].regain  // 'rps' for token_bucket
 */
export const ALGORITHM_DESCRIPTORS: { readonly [A in Algorithm]: AlgorithmDescriptor } = DESCRIPTORS;

/** Every algorithm name, in the order docs/02-policies-and-algorithms.md lists them (its `algorithm` row). */
export const ALGORITHMS: readonly Algorithm[] = Object.keys(DESCRIPTORS) as Algorithm[];

/**
 * The algorithms that count in windows of `burst / rps` seconds: their quota comes back as a window
 * moves on, up to all of it at once, where the others refill at `rps` at the most (`regain`).
 */
export const WINDOW_ALGORITHMS: ReadonlySet<Algorithm> = new Set(
  ALGORITHMS.filter((a) => DESCRIPTORS[a].regain !== 'rps'),
);

/**
 * The algorithms a factor (`RateLimiterService.setScale`) scales by their limit (`Rule.limit`),
 * keeping their window (`scaledBy`); the others have their `rps` scaled, but for `UNSCALED`.
 */
export const SCALED_BY_LIMIT: ReadonlySet<Algorithm> = new Set(
  ALGORITHMS.filter((a) => DESCRIPTORS[a].scaledBy === 'limit'),
);

/**
 * The algorithms whose limit is a rate (`rps`/`burst` or `limit`/`window`): all but those a
 * policy says otherwise (`saidAs`: `concurrency` with a lease, `quota` with a period).
 */
export const RATE_ALGORITHMS: readonly Algorithm[] = ALGORITHMS.filter((a) => DESCRIPTORS[a].saidAs === undefined);

/** The algorithms a factor leaves as they are (`scaledBy: 'none'`): a number in flight is not a rate. */
export const UNSCALED: ReadonlySet<Algorithm> = new Set(ALGORITHMS.filter((a) => DESCRIPTORS[a].scaledBy === 'none'));

/** The algorithms whose quota comes back when a request gives it back (`regain: 'release'`), not with time. */
export const RELEASED: ReadonlySet<Algorithm> = new Set(ALGORITHMS.filter((a) => DESCRIPTORS[a].regain === 'release'));
