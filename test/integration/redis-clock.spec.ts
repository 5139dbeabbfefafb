import { randomUUID } from 'node:crypto';
import { jest } from '@jest/globals';
import { Logger } from '@nestjs/common';
import { Redis } from 'ioredis';
import { ALGORITHMS, type Algorithm } from '../../lib/algorithms/algorithm.types.js';
import { bucketKey } from '../../lib/keys/bucket-key.js';
import { MemoryStore } from '../../lib/stores/memory/memory.store.js';
import type {
  RateLimitDecision,
  RateLimitRequest,
  RateLimitStore,
} from '../../lib/stores/rate-limit-store.interface.js';
import { RedisStore, type RedisStoreClock } from '../../lib/stores/redis/redis.store.js';
import { redisTimeUnusable, TIME_PROBE } from '../../lib/stores/redis/time-probe.js';
import { ManualClock } from '../../lib/testing/index.js';
import { CASE_EPOCH, ruleOf } from '../cases/index.js';
import { freePort, type RedisServer, startRedisServer, stopRedisServer } from '../support/redis/process.js';
import { connectTestRedis, testRedisUrl } from '../support/redis/test-redis.js';

/**
 * `RedisStore`'s clock on real Redis: the probe of `TIME` inside a script and its fallback to the
 * app's clock (driven by a probe script that fakes `TIME`, defined on the client before the store
 * defines its own), and `clock: 'app'`. The app's clock, `Date.now()`, is pinned at instants after
 * `CASE_EPOCH` (keys expire on Redis's clock at the given time plus their TTL: it must lie ahead).
 * The probe starts with the store and no decision waits for it: a test that looks at its outcome
 * waits for the warning, or for a command sent after it (replies come in order).
 */

/**
 * Instants (ms after `CASE_EPOCH`) and how many requests each algorithm's bucket gets at each, at
 * `STEP_RPS`: 3 tokens refill in 96 s. Redis counts a key's TTL on its own clock while the app's is
 * pinned, so a key written at one step must not expire in the real time the test takes to reach
 * the next (a refill of 1.5 s did, on a loaded machine). 1/32 keeps the arithmetic exact.
 */
const STEPS: ReadonlyArray<[at: number, requests: number]> = [
  [0, 4],
  [25_600, 2],
  [96_000, 3],
  [96_001, 1],
  [576_000, 2],
];
const STEP_RPS = 1 / 32;

/** A probe that takes `PROBE_BUSY_MS` inside Redis, then fakes `TIME` answering 0. */
const PROBE_BUSY_MS = 200;
const TIME_ZERO_SLOWLY = `
local start = redis.call('TIME')
local t
repeat t = redis.call('TIME') until (t[1] - start[1]) * 1000000 + (t[2] - start[2]) >= ${PROBE_BUSY_MS * 1000}
return 0
`;

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

/** Resolves with the next warning logged. */
function nextWarning(): Promise<string> {
  return new Promise((resolve) => warn.mockImplementation((message: unknown) => void resolve(String(message))));
}

/** Once the probe a store sent on `client` when it was made has been answered and taken in. */
async function probeAnswered(client: Redis): Promise<void> {
  await client.ping();
  await new Promise(setImmediate);
}

/** A fresh client of the test Redis, with `probe` as its `TIME` probe when given. */
async function clientWith(probe?: string): Promise<Redis> {
  const client = await connectTestRedis();
  if (probe !== undefined) client.defineCommand(TIME_PROBE, { lua: probe });
  return client;
}

const request = (prefix: string, algorithm: Algorithm, rps = 2): RateLimitRequest => {
  const rule = ruleOf(algorithm, rps, 3);
  return { key: bucketKey(prefix, algorithm, rule, 'ip:1'), policy: algorithm, rule, cost: 1 };
};

/** Every algorithm's decisions at `STEPS`, the app's clock pinned at each instant in turn. */
async function decisionsAtSteps(store: RateLimitStore): Promise<RateLimitDecision[][]> {
  const prefix = `rl-clock-${randomUUID()}:`;
  const decisions: RateLimitDecision[][] = [];
  for (const [at, requests] of STEPS) {
    pinned.mockReturnValue(CASE_EPOCH + at);
    for (let i = 0; i < requests; i++) {
      for (const algorithm of ALGORITHMS) decisions.push(await store.consume([request(prefix, algorithm, STEP_RPS)]));
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
  it("warns once, naming clock: 'app', and decides on the app's clock once the probe has answered", async () => {
    const client = await clientWith(probe);
    try {
      const warned = nextWarning();
      const store = new RedisStore({ client, cacheRefusals: false });
      expect(await warned).toContain(`(${why}`);
      expect(await warned).toContain("Set RedisStore({ clock: 'app' }) to say so");
      pinned.mockReturnValue(CASE_EPOCH);
      expect(await decisionsAtSteps(store)).toEqual(await memoryDecisions());
      expect(warn).toHaveBeenCalledTimes(1);
    } finally {
      await client.quit();
    }
  });
});

describe('a Redis whose TIME inside a script works', () => {
  it.each([
    ['unset', undefined],
    ["'redis'", 'redis' as const],
  ])('with clock %s, logs nothing and decides on Redis TIME', async (_name, clock) => {
    const client = await clientWith();
    try {
      const store = new RedisStore({ client, clock, cacheRefusals: false });
      await probeAnswered(client);
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
      await probeAnswered(client);
      expect(warn).not.toHaveBeenCalled();
    } finally {
      await client.quit();
    }
  });
});

describe('the probe, on a server of its own', () => {
  let server: RedisServer | undefined;
  afterEach(() => {
    if (server) stopRedisServer(server.pid);
  });

  it('delays no decision: the first one is sent at once, while the probe is still running', async () => {
    server = await startRedisServer();
    const client = new Redis(server.url);
    client.defineCommand(TIME_PROBE, { lua: TIME_ZERO_SLOWLY });
    await client.ping(); // connected: commands go out as they are sent, not from the offline queue
    // when each script call was handed to the connection (the probe's too: its reply comes PROBE_BUSY_MS later)
    const sentAt: number[] = [];
    const send = client.sendCommand.bind(client);
    client.sendCommand = (command: { name: string }, ...rest: unknown[]) => {
      if (/^eval(sha)?$/i.test(command.name)) sentAt.push(performance.now());
      return (send as (...args: unknown[]) => unknown)(command, ...rest);
    };
    try {
      const warned = nextWarning().then(() => performance.now());
      const store = new RedisStore({ client, cacheRefusals: false });
      const decided = await store.consume([request(`rl-clock-${randomUUID()}:`, 'token_bucket')]);
      const warnedAt = await warned;
      // Redis TIME works here: the first decision read it (only the probe fakes 0)
      expect(decided).toMatchObject([{ allowed: true, remaining: 2 }]);
      // the probe, then the decision, sent before the probe's answer came back and was acted on
      expect(sentAt).toHaveLength(2);
      expect(sentAt[1]).toBeLessThan(warnedAt);
      console.log(
        `decision sent ${(sentAt[1] - sentAt[0]).toFixed(1)} ms after the probe, ${(warnedAt - sentAt[1]).toFixed(0)} ms before its answer was acted on`,
      );
    } finally {
      client.disconnect();
    }
  });
});

describe('a lazyConnect client', () => {
  it('is left alone until the first call, which the probe goes ahead of', async () => {
    const client = new Redis(testRedisUrl(), { lazyConnect: true });
    client.defineCommand(TIME_PROBE, { lua: TIME_ZERO });
    try {
      const store = new RedisStore({ client, cacheRefusals: false });
      await new Promise(setImmediate);
      expect(client.status).toBe('wait');
      const warned = nextWarning();
      expect(await store.consume([request(`rl-clock-${randomUUID()}:`, 'token_bucket')])).toMatchObject([
        { allowed: true, remaining: 2 },
      ]);
      expect(await warned).toBe(redisTimeUnusable('it answered 0'));
    } finally {
      client.disconnect();
    }
  });
});

describe('a Redis that is down at the first call (own redis-server)', () => {
  let server: RedisServer | undefined;
  afterEach(() => {
    if (server) stopRedisServer(server.pid);
  });

  it('is not waited for: the call fails, and the first call once it is up probes again', async () => {
    const port = await freePort();
    const client = new Redis({ port, host: '127.0.0.1', maxRetriesPerRequest: 0, retryStrategy: () => 50 });
    client.on('error', () => undefined);
    client.defineCommand(TIME_PROBE, { lua: TIME_ZERO });
    try {
      const store = new RedisStore({ client, cacheRefusals: false });
      const token = request(`rl-clock-${randomUUID()}:`, 'token_bucket');
      await expect(store.consume([token])).rejects.toThrow();
      expect(warn).not.toHaveBeenCalled();

      // listened for before the server is up: a probe still queued in the client runs as it connects
      const warned = nextWarning();
      server = await startRedisServer([], { port });
      if (client.status !== 'ready') await new Promise((ready) => client.once('ready', ready));
      // decided on Redis TIME, which works here: only the probe fakes 0
      expect(await store.consume([token])).toMatchObject([{ allowed: true, remaining: 2 }]);
      expect(await warned).toBe(redisTimeUnusable('it answered 0'));
      expect(warn).toHaveBeenCalledTimes(1);
    } finally {
      client.disconnect();
    }
  });
});

describe('a given clock far from real time', () => {
  it.each([0, 2_000_000])(
    'a ManualClock at %i keeps its buckets: a key lives its time to full, counted on Redis from the call',
    async (start) => {
      const clock = new ManualClock(start);
      const store = new RedisStore({ client: redis, clock });
      // full again 100 s after a token is taken: on any clock, no key of it expires during the test
      const rule = ruleOf('token_bucket', 0.01, 2);
      const req: RateLimitRequest = {
        key: bucketKey(`rl-clock-${randomUUID()}:`, 'given', rule, 'ip:1'),
        policy: 'given',
        rule,
        cost: 1,
      };
      const decisions = [];
      for (let i = 0; i < 3; i++) decisions.push((await store.consume([req]))[0]);
      expect(decisions.map((d) => [d.allowed, d.remaining])).toEqual([
        [true, 1],
        [true, 0],
        [false, 0],
      ]);
      const ttl = await redis.pttl(req.key);
      expect(ttl).toBeGreaterThan(190_000);
      expect(ttl).toBeLessThanOrEqual(200_000);
      // the clock moves on by hand: the bucket refills on it, not on Redis's
      clock.advance('100s');
      expect((await store.consume([req]))[0]).toMatchObject({ allowed: true, remaining: 0 });
    },
  );
});
