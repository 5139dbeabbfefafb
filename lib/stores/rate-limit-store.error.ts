import { storeTimedOut } from '../rate-limit.messages.js';

/**
 * Why a store could not decide: it took longer than `timeout` once the call had left the process
 * (`timeout`), its server could not be reached (`unavailable`), Redis ran the call only after its
 * caller had stopped waiting and dropped it (`stale`), the call was not made because the circuit
 * breaker is open (`breaker_open`), or anything else (`error`, a script error say).
 */
export type RateLimitStoreErrorReason = 'timeout' | 'unavailable' | 'stale' | 'breaker_open' | 'error';

/**
 * A store that could not decide (Redis down, slow past `timeout`, a script error). Never used
 * for "limited": that is a decision. The guard answers it with the module's `failMode`.
 *
 * @example new RateLimitStoreError('Redis is down', { reason: 'unavailable', cause: error })
 */
export class RateLimitStoreError extends Error {
  override readonly name = 'RateLimitStoreError';
  /** Why the store could not decide; `'error'` unless the store says. */
  readonly reason: RateLimitStoreErrorReason;

  constructor(message: string, options?: ErrorOptions & { reason?: RateLimitStoreErrorReason }) {
    super(message, options);
    this.reason = options?.reason ?? 'error';
  }
}

/** A store call that took longer than `timeoutMs` (from when it left the process, for a store that `timesCalls`). */
export function storeTimeout(timeoutMs: number): RateLimitStoreError {
  return new RateLimitStoreError(storeTimedOut(timeoutMs), { reason: 'timeout' });
}
