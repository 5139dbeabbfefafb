import type { Cluster, Redis } from 'ioredis';
import { invalidCacheRefusals, invalidRedisClient, invalidStoreClock, unknownStoreOption } from '../../rate-limit.messages.js';

/** Options of `RedisStore`. */
export interface RedisStoreOptions {
  /** An ioredis client, `Redis` (single server or Sentinel) or `Cluster`. The store never closes it: whoever created it does. */
  client: Redis | Cluster;
  /**
   * Remember refusals, so a flood from a refused client is refused without a Redis call until
   * Redis would admit it again (never longer). Default `true`.
   */
  cacheRefusals?: boolean;
  /**
   * Tests only: a clock (integer ms) sent with every call instead of using Redis `TIME`.
   * Keys still expire on Redis's own clock, at this clock's time plus their TTL, so a test
   * clock must not lie in the past. In production, leave it unset so every instance shares
   * Redis's one clock.
   */
  clock?: () => number;
}

/** Every option there is: any other key is a typo, refused rather than ignored. */
const OPTIONS = new Set<string>(['client', 'cacheRefusals', 'clock']);

/**
 * Checks `RedisStore`'s options, once, when it is made.
 *
 * @throws Error naming the first bad option
 */
export function checkRedisStoreOptions(options: RedisStoreOptions): void {
  // an ioredis client given as the options themselves has no `client`: the same message says how
  if (typeof (options?.client as Redis | undefined)?.defineCommand !== 'function') throw new Error(invalidRedisClient(options?.client));
  for (const option of Object.keys(options)) {
    if (!OPTIONS.has(option)) {
      throw new Error(unknownStoreOption('RedisStore', option, (options as unknown as Record<string, unknown>)[option], OPTIONS));
    }
  }
  if (options.cacheRefusals !== undefined && typeof options.cacheRefusals !== 'boolean') throw new Error(invalidCacheRefusals(options.cacheRefusals));
  if (options.clock !== undefined && typeof options.clock !== 'function') throw new Error(invalidStoreClock('RedisStore', options.clock));
}
