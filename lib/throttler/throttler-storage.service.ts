import { Injectable } from '@nestjs/common';
import { RateLimitThrottlerStorage } from './rate-limit-throttler.storage.js';

/**
 * How often the memory store sweeps buckets that expired, ms, while it holds any (one
 * `unref()`'d timer for the whole store, never one per hit). @nestjs/throttler exports the same
 * name for its own sweep (60 s).
 *
 * @example DEFAULT_SWEEP_INTERVAL // 1000
 */
export const DEFAULT_SWEEP_INTERVAL = 1_000;

/**
 * The in-memory storage under @nestjs/throttler's name, and the module's default:
 * `RateLimitThrottlerStorage` on a `MemoryStore`. Unlike NT's, its memory is bounded (100,000
 * buckets, the ones closest to full evicted first) and it holds no timer per hit, only one
 * `unref()`'d sweep while it holds buckets, stopped on shutdown.
 *
 * @example ThrottlerModule.forRoot({ throttlers: [{ ttl: 60_000, limit: 10 }], storage: new ThrottlerStorageService() })
 */
@Injectable()
export class ThrottlerStorageService extends RateLimitThrottlerStorage {
  constructor() {
    super({});
  }
}
