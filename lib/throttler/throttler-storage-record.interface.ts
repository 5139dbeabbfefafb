/**
 * What a `ThrottlerStorage` answers for one hit. Times are whole seconds, rounded up.
 *
 * @example { totalHits: 3, timeToExpire: 42, isBlocked: false, timeToBlockExpire: 0 }
 */
export interface ThrottlerStorageRecord {
  /** Hits the key holds, this one included; `limit + 1` on a refusal. */
  totalHits: number;
  /** Seconds until the key's window (anchored at its first hit) ends: `X-RateLimit-Reset`. */
  timeToExpire: number;
  /** Whether this hit is refused. */
  isBlocked: boolean;
  /** Seconds until a refused key admits again: `Retry-After`; 0 when admitted. */
  timeToBlockExpire: number;
}

/** A token of the same name, as @nestjs/throttler exports one. */
export const ThrottlerStorageRecord = Symbol('ThrottlerStorageRecord');
