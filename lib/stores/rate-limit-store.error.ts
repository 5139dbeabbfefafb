/**
 * A store that could not decide (Redis down, slow past `timeout`, a script error). Never used
 * for "limited": that is a decision. The guard answers it with the module's `failMode`.
 */
export class RateLimitStoreError extends Error {
  override readonly name = 'RateLimitStoreError';
}
