import type { Algorithm } from '../../lib/algorithms/algorithm.types.js';
import type { Case } from './cases.js';
import { TOKEN_BUCKET_CASES } from './token-bucket.cases.js';

export * from './cases.js';

/**
 * Every algorithm's table of cases at fixed instants. Each runs against the pure function
 * (test/unit/algorithms.spec.ts), the memory store and the Redis store
 * (test/integration/stores.spec.ts): all must agree with the table.
 */
export const CASES: ReadonlyArray<readonly [Algorithm, readonly Case[]]> = [
  ['token_bucket', TOKEN_BUCKET_CASES],
];
