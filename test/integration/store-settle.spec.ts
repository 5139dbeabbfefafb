import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { jest } from '@jest/globals';
import { type Cluster, Redis } from 'ioredis';
import type { Rule } from '../../lib/algorithms/algorithm.types.js';
import type { RateLimitDecision, RateLimitRequest } from '../../lib/stores/rate-limit-store.interface.js';
import { hashSlot } from '../../lib/stores/redis/hash-slot.js';
import { RedisScripts } from '../../lib/stores/redis/redis-scripts.js';
import { RedisStore } from '../../lib/stores/redis/redis.store.js';
import { startCutProxy } from '../support/cut-proxy.js';
import { connectTestCluster, connectTestRedis, testRedisUrl } from '../support/redis/test-redis.js';

/**
 * `RedisStore.settle` where Redis makes it hard: a Cluster (one refund call per hash slot), a call
 * that fails (in one slot, or on a cut connection) and is settled again, and settles of one key
 * from two clients at once. The tables of cases (test/cases, run by stores.spec.ts) say what a
 * settle does to each algorithm's bucket; the differential spec compares it with the memory store.
 */

let redis: Redis;
let cluster: Cluster;
const prefix = `rl-settle-${randomUUID()}:`;

beforeAll(async () => {
  [redis, cluster] = await Promise.all([connectTestRedis(), connectTestCluster()]);
});
afterAll(async () => {
  await Promise.all([redis.quit(), cluster.quit()]);
});

/** 1,000 tokens, one back every 1,000 s (none in a test), that a settle may take 1,000 past empty. */
const TOKENS: Rule = { algorithm: 'token_bucket', rps: 0.001, burst: 1_000, debt: 1_000 };
/** A log of 10 entries a day that a settle may take 10 past its limit. */
const LOG: Rule = { algorithm: 'sliding_window_log', rps: 10 / 86_400, burst: 10, debt: 10 };

const requestOf = (name: string, rule: Rule, identity: string, cost = 1): RateLimitRequest => ({
  key: `${prefix}${name}:{${identity}}`,
  policy: name,
  rule,
  cost,
});

describe('RedisStore.settle on a Redis Cluster', () => {
  it('settles each hash slot in a call of its own, in parallel, each bucket made up to its actual cost', async () => {
    const store = new RedisStore({ client: cluster });
    const refunds = jest.spyOn(RedisScripts.prototype, 'refund');
    try {
      const id = randomUUID();
      const [user, ip, other] = [
        requestOf('tokens', TOKENS, `user:${id}`, 100),
        requestOf('tokens', TOKENS, `ip:${id}`, 100),
        requestOf('log', LOG, `user:${id}`, 2),
      ];
      expect(hashSlot(user.key)).toBe(hashSlot(other.key));
      expect(hashSlot(user.key)).not.toBe(hashSlot(ip.key));
      const decisions = await store.consume([user, ip, other]);
      expect(decisions.every((decision) => decision.allowed)).toBe(true);
      refunds.mockClear();
      const settled = await store.settle([
        { decision: decisions[0], actual: 350 },
        { decision: decisions[1], actual: 40 },
        { decision: decisions[2], actual: 15 },
      ]);
      // two slots: two calls, the user's two buckets in one
      expect(refunds.mock.calls.map(([requests, , , slot]) => [requests.length, slot]).sort()).toEqual(
        [
          [2, hashSlot(user.key)],
          [1, hashSlot(ip.key)],
        ].sort(),
      );
      // 250 more; 60 back; 13 more entries, 3 of them past the limit
      expect(settled).toMatchObject([
        { allowed: true, remaining: 650 },
        { allowed: true, remaining: 960 },
        { allowed: false, remaining: 0 },
      ]);
      expect(
        (
          await store.peek([
            { ...user, cost: 0 },
            { ...ip, cost: 0 },
          ])
        ).map((d) => d.remaining),
      ).toEqual([650, 960]);
      expect(await cluster.zcard(other.key)).toBe(15);
    } finally {
      refunds.mockRestore();
      await store.close();
    }
  });

  it('fails in one hash slot: only that slot keeps its charges as they were, which the next settle makes up, once', async () => {
    const store = new RedisStore({ client: cluster });
    const id = randomUUID();
    const [failing, passing] = [requestOf('log', LOG, `user:${id}`, 2), requestOf('tokens', TOKENS, `ip:${id}`, 100)];
    expect(hashSlot(failing.key)).not.toBe(hashSlot(passing.key));
    const held = await store.consume([failing, passing]);
    const settles = [
      { decision: held[0], actual: 5 },
      { decision: held[1], actual: 300 },
    ];
    // a string where the slot's log (a sorted set) was: Redis answers that slot's call with an error
    const [log, ttl] = await Promise.all([cluster.dumpBuffer(failing.key), cluster.pttl(failing.key)]);
    await cluster.set(failing.key, 'not a sorted set');
    await expect(store.settle(settles)).rejects.toMatchObject({ name: 'RateLimitStoreError', reason: 'error' });
    await cluster.restore(failing.key, ttl, log, 'REPLACE');
    expect(await cluster.zcard(failing.key)).toBe(2);
    expect((await store.peek([{ ...passing, cost: 0 }]))[0].remaining).toBe(700);
    // again: the failed slot's log is made up to 5; the other holds 300 already, and takes nothing more
    expect(await store.settle(settles)).toMatchObject([
      { allowed: true, remaining: 5 },
      { allowed: true, remaining: 700 },
    ]);
    expect(await cluster.zcard(failing.key)).toBe(5);
    // and a refund gives back what the decision holds now: 300
    await store.refund([held[1]]);
    expect((await store.peek([{ ...passing, cost: 0 }]))[0].remaining).toBe(1_000);
    await store.close();
  });
});

describe('RedisStore.settle that fails (real Redis)', () => {
  it('meets a cut connection: rejects, the charge stays as it was, and settling the same decision again makes it up, once', async () => {
    const proxy = await startCutProxy(Number(new URL(testRedisUrl()).port));
    const client = new Redis({ host: '127.0.0.1', port: proxy.port, lazyConnect: true, maxRetriesPerRequest: 1 });
    // the cut connection's errors are the test's own doing; the settle's rejection is what it checks
    client.on('error', () => undefined);
    await client.connect();
    const store = new RedisStore({ client });
    try {
      const tokens = requestOf('cut', TOKENS, randomUUID(), 100);
      const [decision] = await store.consume([tokens]);
      expect(decision.allowed).toBe(true);
      await proxy.cut();
      await expect(store.settle([{ decision, actual: 400 }])).rejects.toMatchObject({
        name: 'RateLimitStoreError',
        reason: 'unavailable',
      });
      await proxy.mend();
      if (client.status !== 'ready') await once(client, 'ready');
      expect((await store.peek([{ ...tokens, cost: 0 }]))[0].remaining).toBe(900);
      expect(await store.settle([{ decision, actual: 400 }])).toMatchObject([{ allowed: true, remaining: 600 }]);
      // made up already: the same settle again takes nothing more
      expect(await store.settle([{ decision, actual: 400 }])).toMatchObject([{ allowed: true, remaining: 600 }]);
      expect((await store.peek([{ ...tokens, cost: 0 }]))[0].remaining).toBe(600);
    } finally {
      await store.close();
      client.disconnect();
      await proxy.close();
    }
  });
});

describe.each([
  ['real Redis', () => [new Redis(testRedisUrl()), new Redis(testRedisUrl())]],
  ['Redis Cluster', async () => Promise.all([connectTestCluster(), connectTestCluster()])],
] as const)('RedisStore.settle from two clients at once (%s)', (_name, connect) => {
  it('charges one bucket exactly the sum of what every request cost', async () => {
    const clients: (Redis | Cluster)[] = await connect();
    const stores = clients.map((client) => new RedisStore({ client, cacheRefusals: false }));
    try {
      const tokens = requestOf('shared', TOKENS, randomUUID());
      // 40 reservations of 1 token from each client, all in flight at once
      const held = await Promise.all(
        stores.flatMap((store) =>
          Array.from({ length: 40 }, async (): Promise<[RedisStore, RateLimitDecision]> => {
            const [decision] = await store.consume([tokens]);
            return [store, decision];
          }),
        ),
      );
      expect(held.every(([, decision]) => decision.allowed)).toBe(true);
      // each settled by the client that took it, to 0 ... 20 tokens, all at once
      const actuals = held.map((_, i) => (i * 7) % 21);
      const settled = await Promise.all(
        held.map(([store, decision], i) => store.settle([{ decision, actual: actuals[i] }])),
      );
      expect(settled.every(([answer]) => answer !== undefined)).toBe(true);
      const sum = actuals.reduce((a, b) => a + b, 0);
      expect(sum).toBeLessThan(1_000);
      expect((await stores[0].peek([{ ...tokens, cost: 0 }]))[0].remaining).toBe(1_000 - sum);
    } finally {
      await Promise.all(stores.map((store) => store.close()));
      for (const client of clients) client.disconnect();
    }
  });
});
