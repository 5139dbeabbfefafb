import { randomUUID } from 'node:crypto';
import { jest } from '@jest/globals';
import { Logger } from '@nestjs/common';
import { Redis } from 'ioredis';
import { ALGORITHMS, type Algorithm } from '../../lib/algorithms/algorithm.types.js';
import { bucketKey } from '../../lib/keys/bucket-key.js';
import { redisTimeUnusable } from '../../lib/rate-limit.messages.js';
import { MemoryStore } from '../../lib/stores/memory/memory.store.js';
import type { RateLimitDecision, RateLimitRequest, RateLimitStore } from '../../lib/stores/rate-limit-store.interface.js';
import { RedisStore, type RedisStoreClock } from '../../lib/stores/redis/redis.store.js';
import { TIME_PROBE } from '../../lib/stores/redis/time-probe.js';
import { CASE_EPOCH, ruleOf } from '../cases/index.js';
import { freePort, type RedisServer, startRedisServer, stopRedisServer } from '../support/redis/process.js';
import { connectTestRedis } from '../support/redis/test-redis.js';

/**
 * `RedisStore`'s clock on real Redis: the probe of `TIME` inside a script and its fallback to the
 * app's clock (driven by a probe script that fakes `TIME`, defined on the client before the store
 * defines its own), and `clock: 'app'`. The app's clock, `Date.now()`, is pinned at instants after
 * `CASE_EPOCH` (keys expire on Redis's clock at the given time plus their TTL: it must lie ahead).
 */

/** Instants (ms after `CASE_EPOCH`) and how many requests each algorithm's bucket gets at each. */
const STEPS: ReadonlyArray<[at: number, requests: number]> = [
  [0, 4],
  [400, 2],
  [1_500, 3],
  [1_501, 1],
  [9_000, 2],
];

/** A probe that fakes `TIME` answering 0, as Dragonfly's does. */
const TIME_ZERO = 'return 0';
/** A probe whose `TIME` is refused, as on ElastiCache Serverless. */
const TIME_REFUSED = "return redis.call('NO_SUCH_TIME')";

let redis: Redis;
let pinned: jest.SpiedFunction<typeof Date.now>;
let warn: jest.SpiedFunction<Logger['warn']>;

beforeAll(async () => {
  redis = await connectTestRedis();
});
afterAll(async () => {
  await redis.quit();
});
beforeEach(() => {
  pinned = jest.spyOn(Date, 'now');
  warn = jest.spyOn(Logger.prototype, 'warn').mockImplementation(() => undefined);
});
afterEach(() => {
  jest.restoreAllMocks();
});

/** A fresh client of the test Redis, with `probe` as its `TIME` probe when given. */
async function clientWith(probe?: string): Promise<Redis> {
  const client = await connectTestRedis();
  if (probe !== undefined) client.defineCommand(TIME_PROBE, { lua: probe });
  return client;
}

const request = (prefix: string, algorithm: Algorithm): RateLimitRequest => {
  const rule = ruleOf(algorithm, 2, 3);
  return { key: bucketKey(prefix, algorithm, rule, 'ip:1'), policy: algorithm, rule, cost: 1 };
};

/** Every algorithm's decisions at `STEPS`, the app's clock pinned at each instant in turn. */
async function decisionsAtSteps(store: RateLimitStore): Promise<RateLimitDecision[][]> {
  const prefix = `rl-clock-${randomUUID()}:`;
  const decisions: RateLimitDecision[][] = [];
  for (const [at, requests] of STEPS) {
    pinned.mockReturnValue(CASE_EPOCH + at);
    for (let i = 0; i < requests; i++) {
      for (const algorithm of ALGORITHMS) decisions.push(await store.consume([request(prefix, algorithm)]));
    }
  }
  return decisions;
}

/** The memory store's decisions at `STEPS`: what a store on the app's clock must answer. */
function memoryDecisions(): Promise<RateLimitDecision[][]> {
  return decisionsAtSteps(new MemoryStore({ clock: () => Date.now() }));
}

describe.each([
  ['answers 0 (Dragonfly)', TIME_ZERO, 'it answered 0'],
  ['is refused (ElastiCache Serverless)', TIME_REFUSED, 'a script calling it failed: ERR '],
])('a Redis whose TIME inside a script %s', (_server, probe, why) => {
  it("warns once, naming clock: 'app', and decides on the app's clock from the first call on", async () => {
    const client = await clientWith(probe);
    try {
      const store = new RedisStore({ client, cacheRefusals: false });
      pinned.mockReturnValue(CASE_EPOCH);
      // first calls at once: they wait for one probe together
      const first = await Promise.all([1, 2, 3].map(() => store.peek([request(`rl-clock-${randomUUID()}:`, 'gcra')])));
      expect(first.map(([decision]) => decision.remaining)).toEqual([3, 3, 3]);
      expect(await decisionsAtSteps(store)).toEqual(await memoryDecisions());
      expect(warn.mock.calls).toEqual([[expect.stringContaining(`(${why}`)]]);
      expect(warn.mock.calls[0][0]).toContain("Set RedisStore({ clock: 'app' }) to say so");
    } finally {
      await client.quit();
    }
  });
});

describe('a Redis whose TIME inside a script works', () => {
  it.each([['unset', undefined], ["'redis'", 'redis' as const]])('with clock %s, logs nothing and decides on Redis TIME', async (_name, clock) => {
    const client = await clientWith();
    try {
      const store = new RedisStore({ client, clock, cacheRefusals: false });
      // the app's clock far ahead of Redis's: a key written on it would live until then
      pinned.mockReturnValue(CASE_EPOCH);
      const [token] = [request(`rl-clock-${randomUUID()}:`, 'token_bucket')];
      expect(await store.consume([token])).toMatchObject([{ allowed: true, remaining: 2 }]);
      // full again 500 ms after the charge, on Redis's clock
      const ttl = await client.pttl(token.key);
      expect(ttl).toBeGreaterThan(0);
      expect(ttl).toBeLessThanOrEqual(500);
      expect(warn).not.toHaveBeenCalled();
    } finally {
      await client.quit();
    }
  });
});

describe.each<[string, () => RedisStoreClock]>([
  ["'app'", () => 'app'],
  ['{ now() }', () => ({ now: () => Date.now() })],
  ['a function', () => () => Date.now()],
])('clock %s', (_name, clock) => {
  it('decides as the memory store does at the same instants, with no probe', async () => {
    // a probe that would fall back and warn, were it run
    const client = await clientWith(TIME_ZERO);
    try {
      const store = new RedisStore({ client, clock: clock(), cacheRefusals: false });
      expect(await decisionsAtSteps(store)).toEqual(await memoryDecisions());
      expect(warn).not.toHaveBeenCalled();
    } finally {
      await client.quit();
    }
  });
});

describe('a Redis that is down at the first call (own redis-server)', () => {
  let server: RedisServer | undefined;
  afterEach(() => {
    if (server) stopRedisServer(server.pid);
  });

  it('is not waited for: the call fails, and the first call once it is up probes', async () => {
    const port = await freePort();
    const client = new Redis({ port, host: '127.0.0.1', maxRetriesPerRequest: 0, retryStrategy: () => 50 });
    client.on('error', () => undefined);
    client.defineCommand(TIME_PROBE, { lua: TIME_ZERO });
    try {
      const store = new RedisStore({ client, cacheRefusals: false });
      const token = request(`rl-clock-${randomUUID()}:`, 'token_bucket');
      await expect(store.consume([token])).rejects.toThrow();
      expect(warn).not.toHaveBeenCalled();

      server = await startRedisServer([], { port });
      if (client.status !== 'ready') await new Promise((ready) => client.once('ready', ready));
      pinned.mockReturnValue(CASE_EPOCH);
      expect(await store.consume([token])).toMatchObject([{ allowed: true, remaining: 2 }]);
      expect(warn.mock.calls).toEqual([[redisTimeUnusable('it answered 0')]]);
    } finally {
      client.disconnect();
    }
  });
});
