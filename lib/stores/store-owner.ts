import { once } from 'node:events';
import { type OnApplicationShutdown } from '@nestjs/common';
import type { Redis, RedisOptions } from 'ioredis';
import { ioredisMissing } from '../rate-limit.messages.js';
import { MemoryStore } from './memory/memory.store.js';
import type { RateLimitStore } from './rate-limit-store.interface.js';
import { isRedisClient, type RedisClient } from './redis/redis-clients.js';
import { RedisStore } from './redis/redis.store.js';

export { isRedisClient } from './redis/redis-clients.js';

/**
 * What the module's `redis` option takes: a client (ioredis or iovalkey `Redis` or `Cluster`, a
 * node-redis v5 client), or a `redis://` URL or ioredis options, from which it creates an ioredis
 * client.
 */
export type RedisOption = RedisClient | string | RedisOptions;

/** The module options that say which store to use (checked before, by `resolveOptions`). */
export interface StoreChoice {
  store?: RateLimitStore;
  redis?: RedisOption;
}

/** How long start waits for a Redis client the module created to connect, ms. */
const READY_WAIT_MS = 1_000;
/** Longest wait between reconnection attempts of a client the module created, ms. */
const RECONNECT_MAX_MS = 250;

/**
 * The store the module uses, and the one owner of what the module opened for it: a store it
 * created (a `MemoryStore` by default, a `RedisStore` for `redis`) and a Redis client it created
 * from a URL or options. `close()` closes exactly those, on shutdown and on a failed start; a
 * store or client the app passed in is the app's to close.
 */
export class StoreOwner implements OnApplicationShutdown {
  private constructor(
    readonly store: RateLimitStore,
    private readonly openedStore: RateLimitStore | undefined,
    private readonly openedClient: Redis | undefined,
  ) {}

  /** Opens the store the options choose. */
  static async open({ store, redis }: StoreChoice): Promise<StoreOwner> {
    if (store !== undefined) return new StoreOwner(store, undefined, undefined);
    if (redis === undefined) {
      const memory = new MemoryStore();
      return new StoreOwner(memory, memory, undefined);
    }
    if (isRedisClient(redis)) {
      const store = new RedisStore({ client: redis });
      return new StoreOwner(store, store, undefined);
    }
    const client = await createRedisClient(redis);
    const created = new RedisStore({ client });
    return new StoreOwner(created, created, client);
  }

  /** Closes what it opened: never a store or client the app passed in. */
  async close(): Promise<void> {
    await this.openedStore?.close?.();
    const client = this.openedClient;
    if (client === undefined) return;
    await client.quit().catch(() => undefined);
    // QUIT closes the command connection only: through Sentinel, disconnect() also closes the
    // connections to the sentinels that watch for a failover
    client.disconnect();
  }

  onApplicationShutdown(): Promise<void> {
    return this.close();
  }
}

/**
 * A client fit for a limiter: a request must never wait on Redis longer than the limiter's
 * timeout, and a command must never run late. So commands are not queued while disconnected
 * (they fail at once and `failMode` decides), none is retried or resent after a reconnect,
 * reconnecting is tried every 250 ms at most, and a READONLY or LOADING reply (a primary turned
 * replica, a server still loading) makes it reconnect. Through Sentinel it follows a failover
 * when the sentinels announce it. No `commandTimeout`: the store bounds each call itself, from
 * when it is sent and after reading the replies that came (ioredis's timer per command fires
 * before a reply that arrived during a stall of the app is read).
 */
async function createRedisClient(redis: string | RedisOptions): Promise<Redis> {
  let Client: typeof Redis;
  try {
    ({ Redis: Client } = await import('ioredis'));
  } catch {
    throw new Error(ioredisMissing(redis));
  }
  const limiterDefaults: RedisOptions = {
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    autoResendUnfulfilledCommands: false,
    retryStrategy: (attempt) => Math.min(attempt * 50, RECONNECT_MAX_MS),
    reconnectOnError: (error) => /READONLY|LOADING/.test(error.message),
    // with `sentinels`: follow a failover as the sentinels announce it, not once the old primary answers READONLY
    failoverDetector: true,
  };
  const client =
    typeof redis === 'string' ? new Client(redis, limiterDefaults) : new Client({ ...limiterDefaults, ...redis });
  // The limiter logs when its calls start and stop failing; ioredis would print every retry.
  client.on('error', () => undefined);
  // Without an offline queue, requests before the first connection would all fall to failMode:
  // give it a moment at start. A Redis that is down does not stop the app from starting.
  await once(client, 'ready', { signal: AbortSignal.timeout(READY_WAIT_MS) }).catch(() => undefined);
  return client;
}
