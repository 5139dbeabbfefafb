import { randomUUID } from 'node:crypto';
import type { Cluster, Redis } from 'ioredis';
import { ALGORITHMS, type Algorithm, type Rule } from '../../lib/algorithms/algorithm.types.js';
import { bucketKey } from '../../lib/keys/bucket-key.js';
import { MemoryStore } from '../../lib/stores/memory/memory.store.js';
import type { RateLimitDecision, RateLimitRequest, RateLimitStore } from '../../lib/stores/rate-limit-store.interface.js';
import { hashSlot } from '../../lib/stores/redis/hash-slot.js';
import { RedisStore } from '../../lib/stores/redis/redis.store.js';
import { ManualClock } from '../../lib/testing/index.js';
import { CASE_EPOCH, CASES, longestTtlMs, ruleOf } from '../cases/index.js';
import { connectTestCluster, connectTestRedis, ttlsUnder } from '../support/redis/test-redis.js';

/** A store whose clock the test sets (ms after `CASE_EPOCH`) before each step. */
interface Clocked {
  store: RateLimitStore;
  setNow(at: number): void;
  /** `store.consume`, noting every Redis key it charges for the TTL checks at the end. */
  consume(requests: RateLimitRequest[]): Promise<RateLimitDecision[]>;
}

let redis: Redis;
let cluster: Cluster;
const prefix = `rl-test-${randomUUID()}:`;
/** Every Redis key a test charged: its rule and the latest time (test clock, ms) it was charged. */
const written = new Map<string, { rule: Rule; at: number }>();
/**
 * By key, the longest a call that wrote it took (real ms; a refused one too: on a Cluster it gives
 * back what another slot charged). The test clock is pinned ahead of real time, so Redis expires a
 * key at its time on the test clock plus its TTL, later by up to that (its TTL counts from the
 * app's real time as the call is made).
 */
const callTookMs = new Map<string, number>();

beforeAll(async () => {
  [redis, cluster] = await Promise.all([connectTestRedis(), connectTestCluster()]);
});
afterAll(async () => {
  await Promise.all([redis.quit(), cluster.quit()]);
});

/** A store on a `ManualClock` (any `{ now() }` does), set before each step. */
function clocked(make: (clock: ManualClock) => RateLimitStore): () => Clocked {
  return () => {
    const clock = new ManualClock(CASE_EPOCH);
    const store = make(clock);
    const consume = async (requests: RateLimitRequest[]) => {
      const sent = Date.now();
      const decisions = await store.consume(requests);
      const tookMs = Date.now() - sent;
      const admitted = decisions.every((d) => d.allowed);
      if (store instanceof RedisStore) {
        // the latest time a key has seen: the models count its expiry from there, clock gone back or not
        // (a refusal writes a block's key, or leaves the one a block wrote)
        for (const [i, { key, rule }] of requests.entries()) {
          const blocks = rule.blockMs !== undefined && !decisions[i].allowed && decisions[i].retryAfter < Infinity;
          if (admitted || blocks) written.set(key, { rule, at: Math.max(clock.now(), written.get(key)?.at ?? 0) });
          callTookMs.set(key, Math.max(tookMs, callTookMs.get(key) ?? 0));
        }
      }
      return decisions;
    };
    return { store, setNow: (at) => void clock.set(CASE_EPOCH + at), consume };
  };
}

const stores: Array<[string, () => Clocked]> = [
  ['MemoryStore', clocked((clock) => new MemoryStore({ clock }))],
  ['RedisStore (real Redis)', clocked((clock) => new RedisStore({ client: redis, clock, cacheRefusals: false }))],
  // the tight and loose policies below key different identities, so on the Cluster they live in
  // different hash slots: two script calls, and a refund when the tight one refuses
  ['RedisStore (Redis Cluster)', clocked((clock) => new RedisStore({ client: cluster, clock, cacheRefusals: false }))],
];

const request = (name: string, rule: Rule, identity: string, cost = 1): RateLimitRequest => ({
  key: bucketKey(prefix, name, rule, identity),
  policy: name,
  rule,
  cost,
});

describe.each(stores)('%s', (storeName, makeStore) => {
  describe.each(CASES)('%s table', (_algorithm, cases) => {
    it.each(cases)('$name', async ({ name, rule, steps }) => {
      const { setNow, consume } = makeStore();
      const req = request('case', rule, `${storeName}:${name}`);
      for (const [step, { at, cost = 1, rule: changed = rule, expect: expected }] of steps.entries()) {
        setNow(at);
        const [decision] = await consume([{ ...req, rule: changed, cost }]);
        expect({ step, ...decision }).toMatchObject({ step, ...expected });
      }
    });
  });

  describe.each(ALGORITHMS.map((a) => [a]))('all-or-nothing with a tight %s per-key policy', (tightAlgorithm) => {
    it.each(ALGORITHMS.map((a) => [a]))('leaves a loose %s per-IP policy uncharged when it refuses', async (looseAlgorithm) => {
      const { store, setNow, consume } = makeStore();
      setNow(1_000);
      const id = randomUUID();
      const tight = request('tight', ruleOf(tightAlgorithm, 1, 2), `api-key:${id}`);
      const loose = request('loose', ruleOf(looseAlgorithm, 100, 1000), `ip:${id}`);
      const both = async () => (await consume([tight, loose])).map((d) => [d.allowed, d.remaining]);
      expect(await both()).toEqual([[true, 1], [true, 999]]);
      expect(await both()).toEqual([[true, 0], [true, 998]]);
      // refused by the tight policy: the loose one keeps its 998
      expect(await both()).toEqual([[false, 0], [true, 998]]);
      expect(await both()).toEqual([[false, 0], [true, 998]]);
      expect((await store.peek([loose]))[0].remaining).toBe(998);
      if (store instanceof RedisStore) {
        for (const key of [tight.key, loose.key]) {
          if (key.includes(':swl:')) expect(await store.client.zcard(key)).toBe(2); // no entry for a refused request
        }
      }
    });
  });

  it.each(ALGORITHMS.map((a) => [a]))('%s with blockFor: only a refusal of its own starts a block, and a refusal still takes nothing', async (algorithm) => {
    const { store, setNow, consume } = makeStore();
    const id = randomUUID();
    // 1 token a second, 2 at most, a block of 60 s; beside it a policy that admits one request in all
    const blocking = request('blocking', { ...ruleOf(algorithm, 1, 2), blockMs: 60_000 }, `ip:${id}`);
    const once = request('once', ruleOf('fixed_window', 1 / 3600, 1), `user:${id}`);
    setNow(1_000);
    expect((await consume([blocking, once])).map((d) => d.allowed)).toEqual([true, true]);
    // refused by `once` alone: `blocking` admits it, so no block starts (and nothing is charged)
    expect((await consume([blocking, once])).map((d) => [d.allowed, d.remaining])).toEqual([[true, 1], [false, 0]]);
    expect(await consume([blocking])).toMatchObject([{ allowed: true, remaining: 0 }]);
    // refused by `blocking` itself: the block starts, for 60 s whatever refills
    expect(await consume([blocking])).toMatchObject([{ allowed: false, remaining: 0, retryAfter: 60 }]);
    setNow(31_000);
    expect(await consume([blocking])).toMatchObject([{ allowed: false, remaining: 0, retryAfter: 30 }]);
    // a peek sees the block and starts none
    expect(await store.peek([blocking])).toMatchObject([{ allowed: false, retryAfter: 30 }]);
    setNow(61_000);
    expect(await consume([blocking])).toMatchObject([{ allowed: true, remaining: 1 }]);
    if (store instanceof RedisStore) {
      // the key lives until the bucket is full again (2 s at most): the block is over
      const lives = (await store.client.pexpiretime(blocking.key)) - (CASE_EPOCH + 61_000);
      expect(lives).toBeGreaterThan(0);
      expect(lives).toBeLessThanOrEqual(longestTtlMs(ruleOf(algorithm, 1, 2)) + callTookMs.get(blocking.key)!);
    }
  });

  it.each(ALGORITHMS.map((a) => [a]))('%s with blockFor: a block keeps its key alive until it ends', async (algorithm) => {
    const { store, setNow, consume } = makeStore();
    setNow(0);
    const blocking = request('ttl-block', { ...ruleOf(algorithm, 1000, 1), blockMs: 3_600_000 }, randomUUID());
    await consume([blocking]);
    expect(await consume([blocking])).toMatchObject([{ allowed: false, retryAfter: 3600, fullAfter: 3600 }]);
    if (store instanceof RedisStore) {
      const late = (await store.client.pexpiretime(blocking.key)) - (CASE_EPOCH + 3_600_000);
      expect(late >= 0 && late <= callTookMs.get(blocking.key)!).toBe(true);
    }
    setNow(3_599_999);
    expect(await consume([blocking])).toMatchObject([{ allowed: false, retryAfter: 1 }]);
    setNow(3_600_000);
    expect(await consume([blocking])).toMatchObject([{ allowed: true, remaining: 0 }]);
  });

  it.each(ALGORITHMS.map((a) => [a]))('%s: peeks without charging and resets to full', async (algorithm) => {
    const { store, setNow, consume } = makeStore();
    setNow(0);
    const req = request('peek', ruleOf(algorithm, 1, 3), randomUUID(), 2);
    await consume([req]);
    expect((await store.peek([req]))[0]).toMatchObject({ allowed: false, remaining: 1 });
    expect((await store.peek([req]))[0].remaining).toBe(1);
    await store.reset([req.key]);
    expect((await store.peek([req]))[0]).toMatchObject({ allowed: true, remaining: 3 });
  });
});

describe.each(stores)('%s: what a call carries', (storeName, makeStore) => {
  const where = (method: string) => `Invalid argument to ${storeName.split(' ')[0]}.${method}:`;
  /** The error `promise` rejects with (`undefined` when it resolves). */
  const rejection = (promise: Promise<unknown>) =>
    promise.then(
      () => undefined,
      (error: unknown) => error as Error,
    );

  it.each(ALGORITHMS.map((a) => [a]))('%s: decides a key given twice in one call once, charging it once', async (algorithm) => {
    const { store, setNow, consume } = makeStore();
    setNow(1_000);
    const req = request('twice', ruleOf(algorithm, 1, 5), randomUUID(), 2);
    const decisions = await consume([req, { ...req, policy: 'again' }]);
    expect(decisions.map((d) => [d.policy, d.allowed, d.remaining])).toEqual([['twice', true, 3], ['again', true, 3]]);
    expect((await store.peek([req, req])).map((d) => d.remaining)).toEqual([3, 3]);
  });

  it('refuses a key given twice with a different rule or cost, charging nothing', async () => {
    const { store, setNow } = makeStore();
    setNow(1_000);
    const req = request('conflict', ruleOf('token_bucket', 1, 5), randomUUID());
    const other = request('other', ruleOf('token_bucket', 1, 5), randomUUID());
    for (const second of [{ ...req, rule: ruleOf('token_bucket', 1, 6) }, { ...req, cost: 2 }]) {
      const error = await rejection(store.consume([req, other, second]));
      expect(error).toBeInstanceOf(TypeError);
      expect(error?.message).toMatch(`${where('consume')} requests[0] and requests[2] are for the same key`);
    }
    expect((await store.peek([req, other])).map((d) => d.remaining)).toEqual([5, 5]);
  });

  it.each<[string, unknown, ErrorConstructor]>([
    ['NaN', NaN, RangeError],
    ['-1', -1, RangeError],
    ["'abc'", 'abc', TypeError],
    ['null', null, TypeError],
    ['{}', {}, TypeError],
  ])('rejects a call with a cost of %s, before it reaches the store, charging nothing', async (_name, cost, type) => {
    const { store, setNow } = makeStore();
    setNow(1_000);
    const good = request('good', ruleOf('sliding_window_log', 1, 5), randomUUID());
    const bad = { ...request('bad', ruleOf('sliding_window_log', 1, 5), randomUUID()), cost: cost as number };
    for (const method of ['consume', 'peek'] as const) {
      const error = await rejection(store[method]([good, bad]));
      expect(error).toBeInstanceOf(type);
      expect(error?.message).toMatch(`${where(method)} "requests[1].cost" must be a finite number > 0`);
    }
    expect((await store.peek([good, { ...bad, cost: 1 }])).map((d) => d.remaining)).toEqual([5, 5]);
  });
});

describe('RedisStore keys', () => {
  it.each([
    ['Redis', () => [redis]],
    ['Redis Cluster', () => cluster.nodes('master')],
  ])('every key the tests above left on the %s expires, no later than the time from empty to full', async (_name, servers) => {
    const keys: Array<[Redis, string]> = [];
    for (const server of servers()) for (const key of (await ttlsUnder(server, prefix)).keys()) keys.push([server, key]);
    expect(keys.length).toBeGreaterThan(CASES.length);
    for (const [server, key] of keys) {
      // every key left is one a test charged (a refused or peeked request, or a refund to full, writes nothing)
      const { rule, at } = written.get(key)!;
      const lives = (await server.pexpiretime(key)) - at;
      expect({ key, lives: lives > 0 && lives <= longestTtlMs(rule) + callTookMs.get(key)! }).toEqual({ key, lives: true });
    }
  });

  it('puts the buckets of one identity in one Cluster hash slot, and of two identities (here) in two', async () => {
    const perKey = request('tight', ruleOf('token_bucket', 1, 2), 'api-key:abc');
    const sameIdentity = request('other', ruleOf('gcra', 5, 5), 'api-key:abc');
    const perIp = request('loose', ruleOf('token_bucket', 1, 2), 'ip:1.2.3.4');
    expect(hashSlot(perKey.key)).toBe(hashSlot(sameIdentity.key));
    expect(hashSlot(perKey.key)).not.toBe(hashSlot(perIp.key));
    // the same slots Redis works out, braces or not
    for (const key of [perKey.key, perIp.key, 'plain-key', 'a{}b', '{}{x}', 'é{ü}', 'x{'.repeat(40)]) {
      expect([key, hashSlot(key)]).toEqual([key, await cluster.cluster('KEYSLOT', key)]);
    }
  });

  it.each<[Algorithm, number, number]>([
    ['token_bucket', 1_500, 2_000], // 20 of 50 tokens back at 10/s
    ['gcra', 1_500, 2_000],
    ['leaky_bucket', 1_500, 2_000],
    ['fixed_window', 0, 5_000], // until the 5 s window ends
    ['sliding_window_log', 4_500, 5_000], // until the entries leave the window
    ['sliding_window_counter', 5_000, 10_000], // until this window's count has slid out of the next
  ])('%s: sets the TTL to the time until full, on the real clock', async (algorithm, least, most) => {
    const store = new RedisStore({ client: redis });
    const req = request('ttl', ruleOf(algorithm, 10, 50), randomUUID(), 20);
    await store.consume([req]);
    const ttl = await redis.pttl(req.key);
    expect(ttl).toBeGreaterThan(least);
    expect(ttl).toBeLessThanOrEqual(most);
  });

  it('uses Redis TIME when no test clock is given, and reloads the script after SCRIPT FLUSH', async () => {
    const store = new RedisStore({ client: redis });
    const req = request('flush', ruleOf('token_bucket', 1, 2), randomUUID());
    expect((await store.consume([req]))[0]).toMatchObject({ allowed: true, remaining: 1 });
    await redis.script('FLUSH');
    expect((await store.consume([req]))[0]).toMatchObject({ allowed: true, remaining: 0 });
    expect((await store.consume([req]))[0]).toMatchObject({ allowed: false, remaining: 0, retryAfter: 1 });
  });
});
