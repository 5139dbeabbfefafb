import type { ThrottlerStorageRecord } from './throttler-storage-record.interface.js';

/**
 * Where throttlers count hits: @nestjs/throttler's storage interface. `RateLimitThrottlerStorage`
 * implements it on our stores; `ThrottlerStorage` is also the injection token of the module's
 * storage (`getStorageToken()`, `@InjectThrottlerStorage()`).
 *
 * @example const { totalHits, isBlocked } = await storage.increment(key, 60_000, 10, 60_000, 'default');
 */
export interface ThrottlerStorage {
  /**
   * Counts one hit of `key` and answers for it. `ttl` and `blockDuration` are milliseconds; the
   * answer's times are seconds.
   */
  increment(
    key: string,
    ttl: number,
    limit: number,
    blockDuration: number,
    throttlerName: string,
  ): Promise<ThrottlerStorageRecord>;
}

/** Injection token of the module's storage. */
export const ThrottlerStorage = Symbol('ThrottlerStorage');
