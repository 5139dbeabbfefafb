import type { Algorithm } from '../../lib/algorithms/algorithm.types.js';
import type { Case } from './cases.js';
import { CONCURRENCY_CASES } from './concurrency.cases.js';
import { FIXED_WINDOW_CASES } from './fixed-window.cases.js';
import { GCRA_CASES } from './gcra.cases.js';
import { LEAKY_BUCKET_CASES } from './leaky-bucket.cases.js';
import { QUOTA_CASES } from './quota.cases.js';
import { SLIDING_WINDOW_COUNTER_CASES } from './sliding-window-counter.cases.js';
import { SLIDING_WINDOW_LOG_CASES } from './sliding-window-log.cases.js';
import { TOKEN_BUCKET_CASES } from './token-bucket.cases.js';

export * from './cases.js';

/**
 * Every algorithm's table of cases at fixed instants. Each runs against the pure function
 * (test/unit/algorithms/algorithms.spec.ts), the memory store and the Redis store
 * (test/integration/stores.spec.ts): all must agree with the table. Keyed by `Algorithm`, so a
 * new algorithm does not compile without its table.
 */
export const CASES: ReadonlyArray<readonly [Algorithm, readonly Case[]]> = Object.entries({
  token_bucket: TOKEN_BUCKET_CASES,
  leaky_bucket: LEAKY_BUCKET_CASES,
  fixed_window: FIXED_WINDOW_CASES,
  sliding_window_log: SLIDING_WINDOW_LOG_CASES,
  sliding_window_counter: SLIDING_WINDOW_COUNTER_CASES,
  gcra: GCRA_CASES,
  concurrency: CONCURRENCY_CASES,
  quota: QUOTA_CASES,
} satisfies Record<Algorithm, readonly Case[]>) as [Algorithm, readonly Case[]][];
