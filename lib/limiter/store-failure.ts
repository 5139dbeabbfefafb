import { KeyTimeoutError } from '../keys/identity.js';
import { RateLimitStoreError } from '../stores/rate-limit-store.error.js';

/**
 * A failure `failMode` answers, as a `RateLimitStoreError`: the store's own, or a key function's
 * past `timeout` (`reason: 'timeout'`; no bucket to charge either way).
 *
 * @throws failure itself when it is anything else (a key or cost source's bug)
 */
export function storeFailure(failure: unknown): RateLimitStoreError {
  if (failure instanceof RateLimitStoreError) return failure;
  if (!(failure instanceof KeyTimeoutError)) throw failure;
  return new RateLimitStoreError(failure.message, { cause: failure, reason: 'timeout' });
}
