import { randomUUID } from 'node:crypto';
import type { Redis } from 'ioredis';
import { MemoryStore } from '../../lib/stores/memory.store.js';
import type { RateLimitRequest, RateLimitStore } from '../../lib/stores/rate-limit-store.interface.js';
import { RedisStore } from '../../lib/stores/redis/redis.store.js';
import { bucketKey } from '../../lib/keys/bucket-key.js';
import { TOKEN_BUCKET_CASES } from '../cases/token-bucket.cases.js';
import { connectTestRedis, ttlsUnder } from '../redis/test-redis.js';

/** A store whose clock the test sets before each step. */
interface Clocked {
  store: RateLimitStore;
  setNow(ms: number): void;
}

let redis: Redis;
const prefix = `rl-test-${randomUUID()}:`;

beforeAll(async () => {
  redis = await connectTestRedis();
});
afterAll(async () => {
  await redis.quit();
});

const stores: Array<[string, () => Clocked]> = [
  ['MemoryStore', () => {
    let now = 0;
    return { store: new MemoryStore({ clock: () => now }), setNow: (ms) => (now = ms) };
  }],
  ['RedisStore (real Redis)', () => {
    let now = 0;
    return { store: new RedisStore({ client: redis, clock: () => now }), setNow: (ms) => (now = ms) };
  }],
];

describe.each(stores)('%s', (_name, makeStore) => {
  describe.each(TOKEN_BUCKET_CASES)('token bucket: $name', ({ name, limit, steps }) => {
    it('decides every step as the pure table says', async () => {
      const { store, setNow } = makeStore();
      const key = bucketKey(prefix, 'case', `${_name}:${name}`);
      for (const [step, { at, cost = 1, expect: expected }] of steps.entries()) {
        setNow(at);
        const [decision] = await store.consume([{ key, policy: 'case', limit, cost }]);
        expect({ step, ...decision }).toMatchObject({ step, ...expected });
      }
    });
  });

  it('charges no policy when one refuses (tight per-key, loose per-IP)', async () => {
    const { store, setNow } = makeStore();
    setNow(1_000);
    const id = randomUUID();
    const tight: RateLimitRequest = { key: bucketKey(prefix, 'tight', id), policy: 'tight', limit: { algorithm: 'token_bucket', rps: 1, burst: 2 }, cost: 1 };
    const loose: RateLimitRequest = { key: bucketKey(prefix, 'loose', `ip:${id}`), policy: 'loose', limit: { algorithm: 'token_bucket', rps: 100, burst: 1000 }, cost: 1 };
    const remaining = async () => (await store.consume([tight, loose])).map((d) => [d.allowed, d.remaining]);
    expect(await remaining()).toEqual([[true, 1], [true, 999]]);
    expect(await remaining()).toEqual([[true, 0], [true, 998]]);
    // refused by the tight policy: the loose one keeps its 998
    expect(await remaining()).toEqual([[false, 0], [true, 998]]);
    expect(await remaining()).toEqual([[false, 0], [true, 998]]);
    expect((await store.peek([loose]))[0].remaining).toBe(998);
  });

  it('peeks without charging and resets to full', async () => {
    const { store, setNow } = makeStore();
    setNow(0);
    const request: RateLimitRequest = { key: bucketKey(prefix, 'peek', randomUUID()), policy: 'peek', limit: { algorithm: 'token_bucket', rps: 1, burst: 3 }, cost: 2 };
    await store.consume([request]);
    expect((await store.peek([request]))[0]).toMatchObject({ allowed: false, remaining: 1, retryAfter: 1 });
    expect((await store.peek([request]))[0].remaining).toBe(1);
    await store.reset([request.key]);
    expect((await store.peek([request]))[0]).toMatchObject({ allowed: true, remaining: 3 });
  });
});

describe('RedisStore keys', () => {
  it('every key the tables wrote has a TTL no longer than the time to refill fully', async () => {
    const ttls = await ttlsUnder(redis, prefix);
    expect(ttls.size).toBeGreaterThan(TOKEN_BUCKET_CASES.length);
    // the longest refill in the tables: burst 1000 at 100/s after 2 tokens, or 2 tokens at 0.1/s = 20 s
    for (const [key, ttl] of ttls) {
      expect({ key, hasTtl: ttl > 0 }).toEqual({ key, hasTtl: true });
      expect(ttl).toBeLessThanOrEqual(20_000);
    }
  });

  it('sets the TTL to the time to refill fully, on the real clock', async () => {
    const store = new RedisStore({ client: redis });
    const key = bucketKey(prefix, 'ttl', randomUUID());
    await store.consume([{ key, policy: 'ttl', limit: { algorithm: 'token_bucket', rps: 10, burst: 50 }, cost: 20 }]);
    const ttl = await redis.pttl(key);
    expect(ttl).toBeGreaterThan(1_500);
    expect(ttl).toBeLessThanOrEqual(2_000);
  });

  it('uses Redis TIME when no test clock is given, and reloads the script after SCRIPT FLUSH', async () => {
    const store = new RedisStore({ client: redis });
    const request: RateLimitRequest = { key: bucketKey(prefix, 'flush', randomUUID()), policy: 'flush', limit: { algorithm: 'token_bucket', rps: 1, burst: 2 }, cost: 1 };
    expect((await store.consume([request]))[0]).toMatchObject({ allowed: true, remaining: 1 });
    await redis.script('FLUSH');
    expect((await store.consume([request]))[0]).toMatchObject({ allowed: true, remaining: 0 });
    expect((await store.consume([request]))[0]).toMatchObject({ allowed: false, remaining: 0, retryAfter: 1 });
  });
});
