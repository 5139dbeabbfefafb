import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { type Cluster, Redis } from 'ioredis';
import type { Rule } from '../../lib/algorithms/algorithm.types.js';
import { MemoryStore } from '../../lib/stores/memory/memory.store.js';
import type { RateLimitRequest, RateLimitStore } from '../../lib/stores/rate-limit-store.interface.js';
import { hashSlot } from '../../lib/stores/redis/hash-slot.js';
import { RedisStore } from '../../lib/stores/redis/redis.store.js';
import { StoreCalls } from '../../lib/stores/store-calls.js';
import { CASE_EPOCH } from '../cases/index.js';
import { startCutProxy } from '../support/cut-proxy.js';
import { describeRefundCases } from '../support/refund-cases.js';
import { connectTestCluster, connectTestRedis, testRedisUrl } from '../support/redis/test-redis.js';

let redis: Redis;
let cluster: Cluster;
const prefix = `rl-refund-${randomUUID()}:`;

beforeAll(async () => {
  [redis, cluster] = await Promise.all([connectTestRedis(), connectTestCluster()]);
});
afterAll(async () => {
  await Promise.all([redis.quit(), cluster.quit()]);
});

/** A store on a clock the test sets, ms after `CASE_EPOCH`. */
function clocked(make: (clock: () => number) => RateLimitStore) {
  return () => {
    let now = CASE_EPOCH;
    return { store: make(() => now), setNow: (at: number) => (now = CASE_EPOCH + at) };
  };
}

const stores = [
  ['MemoryStore', clocked((clock) => new MemoryStore({ clock }))],
  ['RedisStore (real Redis)', clocked((clock) => new RedisStore({ client: redis, clock, cacheRefusals: false }))],
  // the tests' two policies key different identities: on the Cluster, two hash slots
  ['RedisStore (Redis Cluster)', clocked((clock) => new RedisStore({ client: cluster, clock }))],
] as const;

describeRefundCases(stores, prefix);

/** One slot in flight per identity: `limit` 1, held a minute at the most (`lease`). */
const LIMIT = 1;
const LEASE_SECONDS = 60;
const SLOT: Rule = { algorithm: 'concurrency', rps: LIMIT / LEASE_SECONDS, burst: LIMIT };
const slotOf = (identity: string): RateLimitRequest => ({
  key: `${prefix}exports:cc:{${identity}}`,
  policy: 'exports',
  rule: SLOT,
  cost: 1,
});

describe('a refund that fails, tried again (real Redis)', () => {
  it('meets a cut connection: rejects, the slot stays taken, and releasing the same decisions again frees it, once', async () => {
    const proxy = await startCutProxy(Number(new URL(testRedisUrl()).port));
    const client = new Redis({ host: '127.0.0.1', port: proxy.port, lazyConnect: true, maxRetriesPerRequest: 1 });
    // the cut connection's errors are the test's own doing; the calls' rejections are what it checks
    client.on('error', () => undefined);
    await client.connect();
    const store = new RedisStore({ client });
    const calls = new StoreCalls(store, { timeout: 1_000, failMode: 'closed' });
    try {
      const slot = [slotOf(randomUUID())];
      const held = await calls.consume(slot);
      expect(held[0].allowed).toBe(true);
      expect((await calls.consume(slot))[0].allowed).toBe(false);
      await proxy.cut();
      await expect(calls.release(held)).rejects.toMatchObject({ name: 'RateLimitStoreError', reason: 'unavailable' });
      await proxy.mend();
      if (client.status !== 'ready') await once(client, 'ready');
      expect((await store.peek(slot))[0].remaining).toBe(0);
      await calls.release(held);
      expect((await calls.consume(slot))[0].allowed).toBe(true);
      // given back already: the slot the last request holds stays taken
      await calls.release(held);
      expect((await store.peek(slot))[0].remaining).toBe(0);
    } finally {
      await calls.close();
      await store.close();
      client.disconnect();
      await proxy.close();
    }
  });

  it('fails in one hash slot of a Cluster: only that slot keeps its charge, which the next refund gives back', async () => {
    const store = new RedisStore({ client: cluster });
    const id = randomUUID();
    const [failing, passing] = [slotOf(`user:${id}`), slotOf(`ip:${id}`)];
    expect(hashSlot(failing.key)).not.toBe(hashSlot(passing.key));
    const held = await store.consume([failing, passing]);
    expect(held.map((decision) => decision.allowed)).toEqual([true, true]);
    // a string where the slot's log (a sorted set) was: Redis answers that slot's refund with an error
    const [log, ttl] = await Promise.all([cluster.dumpBuffer(failing.key), cluster.pttl(failing.key)]);
    await cluster.set(failing.key, 'not a sorted set');
    await expect(store.refund(held)).rejects.toMatchObject({ name: 'RateLimitStoreError', reason: 'error' });
    await cluster.restore(failing.key, ttl, log, 'REPLACE');
    expect((await store.peek([failing, passing])).map((decision) => decision.remaining)).toEqual([0, 1]);
    // the passing slot, taken again, is not given back a second time
    expect((await store.consume([passing]))[0].allowed).toBe(true);
    await store.refund(held);
    expect((await store.peek([failing, passing])).map((decision) => decision.remaining)).toEqual([1, 0]);
    await store.close();
  });
});
