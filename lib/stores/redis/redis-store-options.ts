import {
  invalidCacheRefusals,
  invalidRedisClient,
  invalidStoreClock,
  unknownStoreOption,
} from '../../rate-limit.messages.js';
import { clockReader, type StoreClock } from '../store-clock.js';
import { isRedisClient, type RedisClient } from './redis-clients.js';

/** Options of `RedisStore`. */
export interface RedisStoreOptions<C extends RedisClient = RedisClient> {
  /**
   * The Redis client: ioredis (or iovalkey) `Redis` (single server or Sentinel) or `Cluster`, or a
   * node-redis v5 client (`createClient`, `createCluster`, `createSentinel`), connected or to be.
   * The store never closes it: whoever created it does.
   */
  client: C;
  /**
   * Remember refusals, so a flood from a refused client is refused without a Redis call until
   * Redis would admit it again (never longer). Default `true`.
   */
  cacheRefusals?: boolean;
  /**
   * Where the time of every decision comes from. `'redis'` (default): Redis `TIME`, read inside
   * the script, so every instance of the app shares Redis's one clock. `'app'`: this process's
   * `Date.now()`, sent with every call, for Redis-compatible servers whose scripts cannot read
   * `TIME` (Dragonfly answers 0, ElastiCache Serverless refuses it); the instances' clocks must
   * then agree (NTP). Tests: any `{ now() }` (`ManualClock`), integer ms, pinned; a function
   * returning ms is taken too.
   *
   * On a given clock a key's TTL is its bucket's time to full on that clock, which the server
   * counts on its own from the call, however far the two clocks are apart; a given clock ahead
   * of the app's real time (a test's, pinned in the future) keeps its keys until its own time for
   * them comes (a clock moved by hand may be slower than the server's). With `'redis'`, the store checks once, from the
   * moment it is made, that `TIME` works inside a script (one round trip no decision waits for),
   * and falls back to `'app'` with a warning when it does not.
   */
  clock?: RedisStoreClock;
}

/** The clock a `RedisStore` decides on (see `RedisStoreOptions.clock`). */
export type RedisStoreClock = 'redis' | 'app' | StoreClock | (() => number);

/** Every option there is: any other key is a typo, refused rather than ignored. */
const OPTIONS = new Set<string>(['client', 'cacheRefusals', 'clock']);

/**
 * Checks `RedisStore`'s options, once, when it is made.
 *
 * @throws Error naming the first bad option
 */
export function checkRedisStoreOptions(options: RedisStoreOptions): void {
  // a client given as the options themselves has no `client`: the same message says how
  if (!isRedisClient(options?.client)) throw new Error(invalidRedisClient(options?.client));
  for (const option of Object.keys(options)) {
    if (!OPTIONS.has(option)) {
      throw new Error(
        unknownStoreOption('RedisStore', option, (options as unknown as Record<string, unknown>)[option], OPTIONS),
      );
    }
  }
  if (options.cacheRefusals !== undefined && typeof options.cacheRefusals !== 'boolean')
    throw new Error(invalidCacheRefusals(options.cacheRefusals));
  if (options.clock !== undefined && givenClock(options.clock) === undefined && options.clock !== 'redis') {
    throw new Error(
      invalidStoreClock('RedisStore', options.clock, `'redis', 'app', { now() } or a function returning ms`),
    );
  }
}

/** The clock a `RedisStore` sends with its calls, ms: `undefined` for Redis `TIME` (and for a bad option). */
export function givenClock(clock: RedisStoreClock | undefined): (() => number) | undefined {
  return clock === 'app' ? Date.now : clockReader(clock);
}
