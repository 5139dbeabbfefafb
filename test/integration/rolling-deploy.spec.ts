import { randomUUID } from 'node:crypto';
import type { Redis } from 'ioredis';
import type { Algorithm, Rule } from '../../lib/algorithms/algorithm.types.js';
import type { RateLimitRequest } from '../../lib/stores/rate-limit-store.interface.js';
import { RedisStore } from '../../lib/stores/redis/redis.store.js';
import { CASE_EPOCH } from '../cases/index.js';
import { connectTestRedis } from '../support/redis/test-redis.js';

/**
 * A rolling deploy: instances of an older version and of this one share a Redis for a while. Each
 * bucket below is written as every earlier version wrote it (the formats each model's Lua
 * documents, unchanged since the Redis store began), and this version must count on from it:
 * admit exactly what is left and refuse the rest, through the flat call (one plain policy) and
 * through the general one (two policies a request). What it writes back must be in the same
 * format, so that an older instance reads it as well: while both run, no bucket admits more than
 * its limit.
 */

let redis: Redis;
const prefix = `rl-rolling-${randomUUID()}:`;

beforeAll(async () => {
  redis = await connectTestRedis();
});
afterAll(async () => {
  await redis.quit();
});

const NOW = CASE_EPOCH;
/** 1 token a second, 5 at most: a window is 5 s, and CASE_EPOCH starts one. */
const rule = (algorithm: Algorithm): Rule => ({ algorithm, rps: 1, burst: 5 });

/**
 * Per algorithm: a bucket as an older version stored it with 2 tokens left at NOW, and the value
 * it holds once both are taken (a sorted set's members for the log).
 */
const BUCKETS: ReadonlyArray<{ algorithm: Algorithm; before: string[]; after: string | string[] }> = [
  // <tokens>|<at>
  { algorithm: 'token_bucket', before: [`2|${NOW}`], after: `0|${NOW}` },
  // <backlog>|<at>
  { algorithm: 'gcra', before: [`3|${NOW}`], after: `5|${NOW}` },
  { algorithm: 'leaky_bucket', before: [`3|${NOW}`], after: `5|${NOW}` },
  // <start>|<count>
  { algorithm: 'fixed_window', before: [`${NOW}|3`], after: `${NOW}|5` },
  // <start>|<previous>|<count>
  { algorithm: 'sliding_window_counter', before: [`${NOW}|0|3`], after: `${NOW}|0|5` },
  // members <time>:<n>, scored by time
  {
    algorithm: 'sliding_window_log',
    before: [`${NOW - 100}:1`, `${NOW - 100}:2`, `${NOW - 100}:3`],
    after: [`${NOW - 100}:1`, `${NOW - 100}:2`, `${NOW - 100}:3`, `${NOW}:1`, `${NOW}:2`],
  },
];

async function write(key: string, algorithm: Algorithm, before: string[]): Promise<void> {
  if (algorithm === 'sliding_window_log') {
    await redis.zadd(key, ...before.flatMap((member) => [member.split(':')[0], member]));
  } else {
    await redis.set(key, before[0]);
  }
  await redis.pexpire(key, 60_000);
}

async function read(key: string, algorithm: Algorithm): Promise<string | string[] | null> {
  return algorithm === 'sliding_window_log' ? redis.zrange(key, '0', '-1') : redis.get(key);
}

describe('a rolling deploy: buckets an older version wrote', () => {
  let store: RedisStore;
  beforeEach(() => {
    store = new RedisStore({ client: redis, clock: () => NOW, cacheRefusals: false });
  });
  afterEach(async () => {
    await store.close();
  });

  it.each(BUCKETS)(
    '$algorithm: counts on from them with one policy a request',
    async ({ algorithm, before, after }) => {
      const key = `${prefix}one:${algorithm}`;
      await write(key, algorithm, before);
      const request: RateLimitRequest = { key, policy: 'p', rule: rule(algorithm), cost: 1 };
      const allowed = [];
      for (let i = 0; i < 3; i++) allowed.push((await store.consume([request]))[0].allowed);
      expect(allowed).toEqual([true, true, false]);
      expect(await read(key, algorithm)).toEqual(after);
    },
  );

  it.each(BUCKETS)(
    '$algorithm: counts on from them with two policies a request',
    async ({ algorithm, before, after }) => {
      const key = `${prefix}two:${algorithm}`;
      await write(key, algorithm, before);
      const request = (i: number): RateLimitRequest[] => [
        { key, policy: 'p', rule: rule(algorithm), cost: 1 },
        // a roomy second policy on a key of its own: the first decides
        { key: `${prefix}two:${algorithm}:other:${i}`, policy: 'q', rule: rule('token_bucket'), cost: 1 },
      ];
      const allowed = [];
      for (let i = 0; i < 3; i++) allowed.push((await store.consume(request(i))).every((decision) => decision.allowed));
      expect(allowed).toEqual([true, true, false]);
      expect(await read(key, algorithm)).toEqual(after);
    },
  );

  it('a block an older version stored holds', async () => {
    const key = `${prefix}blocked`;
    // <tokens>|<at>|<blocked until>
    await write(key, 'token_bucket', [`5|${NOW}|${NOW + 3_000}`]);
    const [decision] = await store.consume([
      { key, policy: 'p', rule: { ...rule('token_bucket'), blockMs: 3_000 }, cost: 1 },
    ]);
    expect(decision).toMatchObject({ allowed: false, retryAfter: 3 });
  });
});
