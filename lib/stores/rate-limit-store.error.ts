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
  /**
   * The server that failed, for a store of several that fail apart (a Redis Cluster master's
   * address, `host:port`): calls to the others go on. `undefined`: the store as a whole.
   */
  readonly node: string | undefined;

  constructor(message: string, options?: ErrorOptions & { reason?: RateLimitStoreErrorReason; node?: string }) {
    super(message, options);
    this.reason = options?.reason ?? 'error';
    this.node = options?.node;
  }
}

/** A store call that took longer than `timeoutMs` (from when it left the process, for a store that `timesCalls`), on `node` if it says. */
export function storeTimeout(timeoutMs: number, node?: string): RateLimitStoreError {
  return new RateLimitStoreError(storeTimedOut(timeoutMs), { reason: 'timeout', node });
}

/** `error` as the failure of server `node`: a store error naming it, anything else as it is. */
export function failedAt(error: unknown, node: string | undefined): unknown {
  if (node === undefined || !(error instanceof RateLimitStoreError) || error.node !== undefined) return error;
  return new RateLimitStoreError(error.message, { reason: error.reason, cause: error.cause, node });
}
