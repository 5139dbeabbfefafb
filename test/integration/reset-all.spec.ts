import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { Cluster, Redis } from 'ioredis';
import { RateLimiterService } from '../../lib/rate-limiter.service.js';
import { resolveOptions } from '../../lib/rate-limit-options.js';
import { RateLimitStoreError } from '../../lib/stores/rate-limit-store.error.js';
import { hashSlot } from '../../lib/stores/redis/hash-slot.js';
import { RedisStore } from '../../lib/stores/redis/redis.store.js';
import { globLiteral } from '../../lib/stores/redis/unlink-under.js';
import { startRedisServer, stopRedisServer } from '../support/redis/process.js';
import { connectTestCluster, connectTestRedis } from '../support/redis/test-redis.js';
import { StandaloneLimiter } from '../support/standalone-limiter.js';

/**
 * `RateLimiterService.resetAll()` on Redis (memory: test/unit/stores/reset-all.spec.ts): every bucket under the module's prefix is gone
 * (the next request finds it full), and nothing outside it is touched, even keys that the prefix
 * would match as a glob pattern if its `*?[]\` were not escaped. On Redis, enough identities for
 * several SCAN steps; on the Cluster, keys under and outside the prefix on every master.
 */

/** 2 at most, and 1 token in 1,000 s: two requests empty it for as long as the test runs. */
const POLICY = { name: 'api', rps: 0.001, burst: 2 };
/** Identities charged under the prefix: 2,500 buckets, several SCAN steps of 1,000. */
const IDENTITIES = Array.from({ length: 2_500 }, (_, i) => `ip:10.0.${i >> 8}.${i & 255}`);
/** The identities whose buckets the checks read back (reading all would cost a call each). */
const SAMPLE = [0, 999, 1_000, 2_499].map((i) => IDENTITIES[i]);

/** A prefix with every glob character Redis knows, unique per run. */
const globbyPrefix = () => `rl-reset-${randomUUID().slice(0, 8)}*?[ab]\\:`;

/**
 * Keys outside `prefix` that an unescaped `<prefix>*` pattern would match (`[ab]` taken as one of
 * a or b, `*` and `?` as wildcards), and one that merely shares its start; on a Cluster, enough
 * hash tags to land on every master.
 */
function outsideKeys(prefix: string): string[] {
  const stem = prefix.slice(0, prefix.indexOf('*'));
  const lookalikes = [`${stem}XYa:`, `${stem}-Zb:`, stem, `${prefix.slice(0, -2)}`];
  return lookalikes.flatMap((start) => Array.from({ length: 12 }, (_, i) => `${start}{tag-${i}}`));
}

/** Charges every identity's bucket twice (each is then empty). */
async function fill(limiter: RateLimiterService): Promise<void> {
  for (let i = 0; i < IDENTITIES.length; i += 250) {
    await Promise.all(IDENTITIES.slice(i, i + 250).map((id) => limiter.consume(id, POLICY, 2)));
  }
}

/** Whether each sampled identity's bucket is full (peek: nothing taken). */
async function sampledFull(limiter: RateLimiterService): Promise<boolean[]> {
  return Promise.all(SAMPLE.map(async (id) => (await limiter.peek(id, POLICY))[0].remaining === POLICY.burst));
}

/** Keys under `prefix` (glob characters taken literally) on every master of a Cluster, or on the server. */
async function keysUnder(client: Redis | Cluster, prefix: string): Promise<string[]> {
  const nodes = client instanceof Cluster ? client.nodes('master') : [client];
  const found: string[] = [];
  for (const node of nodes) {
    let cursor = '0';
    do {
      const [next, keys] = await node.scan(cursor, 'MATCH', `${globLiteral(prefix)}*`, 'COUNT', 1_000);
      cursor = next;
      found.push(...keys);
    } while (cursor !== '0');
  }
  return found;
}

/** How many of `keys` exist (one EXISTS per key: they span slots on a Cluster). */
async function existing(client: Redis | Cluster, keys: readonly string[]): Promise<number> {
  const counts = await Promise.all(keys.map((key) => client.exists(key)));
  return counts.reduce((sum, n) => sum + n, 0);
}

describe.each([
  ['a single Redis', () => connectTestRedis()],
  ['the Redis Cluster', () => connectTestCluster()],
] as const)('resetAll on %s', (topology, connect) => {
  let client: Redis | Cluster;
  beforeAll(async () => {
    client = await connect();
  });
  afterAll(async () => {
    await client.quit();
  });

  it('unlinks every bucket under the prefix in several SCAN steps, and no key outside it', async () => {
    const prefix = globbyPrefix();
    const limiter = new StandaloneLimiter(resolveOptions({ prefix, timeout: 2_000 }), new RedisStore({ client }));
    const outside = outsideKeys(prefix);
    await Promise.all(outside.map((key) => client.set(key, 'theirs')));
    await fill(limiter);
    const under = await keysUnder(client, prefix);
    expect(under).toHaveLength(IDENTITIES.length);
    if (client instanceof Cluster) {
      // both kinds of key on every master, in many slots: the reset has to visit each master
      for (const node of client.nodes('master')) {
        expect(await keysUnder(node, prefix)).not.toHaveLength(0);
        expect(await keysUnder(node, prefix.slice(0, prefix.indexOf('*')))).not.toHaveLength(0);
      }
      expect(new Set(under.map(hashSlot)).size).toBeGreaterThan(1_000);
      expect(new Set(outside.map(hashSlot)).size).toBe(12);
    }
    expect(await sampledFull(limiter)).toEqual([false, false, false, false]);

    const started = performance.now();
    await limiter.resetAll();
    console.log(
      `${topology}: resetAll unlinked ${under.length} buckets in ${(performance.now() - started).toFixed(0)} ms`,
    );

    expect(await keysUnder(client, prefix)).toEqual([]);
    expect(await existing(client, outside)).toBe(outside.length);
    expect(await sampledFull(limiter)).toEqual([true, true, true, true]);
    await Promise.all(outside.map((key) => client.del(key)));
    await limiter.onApplicationShutdown();
  });

  it('forgets remembered refusals: the next request goes to Redis and is admitted', async () => {
    const prefix = globbyPrefix();
    const limiter = new StandaloneLimiter(resolveOptions({ prefix, timeout: 2_000 }), new RedisStore({ client }));
    const tight = { name: 'tight', rps: 0.001, burst: 1 };
    expect((await limiter.consume('ip:1', tight))[0].allowed).toBe(true);
    expect((await limiter.consume('ip:1', tight))[0].allowed).toBe(false);
    await limiter.resetAll();
    expect((await limiter.consume('ip:1', tight))[0].allowed).toBe(true);
    await limiter.resetAll();
    await limiter.onApplicationShutdown();
  });
});

describe("resetAll with failMode 'local' (own redis-server)", () => {
  it('empties the local limiter too, and rejects with RateLimitStoreError when Redis is down', async () => {
    const server = await startRedisServer();
    const client = new Redis(server.url, {
      maxRetriesPerRequest: 0,
      enableOfflineQueue: false,
      retryStrategy: () => 50,
    });
    client.on('error', () => undefined);
    const limiter = new StandaloneLimiter(
      resolveOptions({ failMode: 'local', timeout: 200 }),
      new RedisStore({ client }),
    );
    try {
      await once(client, 'ready');
      // not once(): the connection may end in a reset (the store's calls at start still on it), an 'error'
      const closed = new Promise((resolve) => client.once('close', resolve));
      stopRedisServer(server.pid);
      await closed;
      // decided by the local limiter while Redis is down
      expect((await limiter.consume('ip:1', POLICY, 2))[0].allowed).toBe(true);
      expect((await limiter.consume('ip:1', POLICY))[0].allowed).toBe(false);
      await expect(limiter.resetAll()).rejects.toThrow(RateLimitStoreError);
      expect((await limiter.consume('ip:1', POLICY))[0].allowed).toBe(true);
    } finally {
      stopRedisServer(server.pid);
      await limiter.onApplicationShutdown();
      client.disconnect();
    }
  });
});
