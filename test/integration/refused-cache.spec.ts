import { randomUUID } from 'node:crypto';
import { jest } from '@jest/globals';
import fc from 'fast-check';
import type { Redis } from 'ioredis';
import { type Algorithm, RATE_ALGORITHMS, type Rule } from '../../lib/algorithms/algorithm.types.js';
import { bucketKey } from '../../lib/keys/bucket-key.js';
import { MemoryStore } from '../../lib/stores/memory/memory.store.js';
import type { RateLimitDecision, RateLimitRequest } from '../../lib/stores/rate-limit-store.interface.js';
import { RedisStore } from '../../lib/stores/redis/redis.store.js';
import { RefusedCache } from '../../lib/stores/refusal-gate/refused-cache.js';
import { CASE_EPOCH, ruleOf } from '../cases/index.js';
import { connectTestRedis } from '../support/redis/test-redis.js';

const RUNS = Number(process.env.RATE_LIMIT_PROPERTY_RUNS ?? 300);
const SEED =
  process.env.RATE_LIMIT_PROPERTY_SEED === undefined ? undefined : Number(process.env.RATE_LIMIT_PROPERTY_SEED);

let redis: Redis;
beforeAll(async () => {
  redis = await connectTestRedis();
});
afterAll(async () => {
  await redis.quit();
});

/** A policy of the trace: small bursts and slow rates, so that refusals are common; some block. */
const policy = fc.record({
  algorithm: fc.constantFrom(...RATE_ALGORITHMS),
  burst: fc.integer({ min: 1, max: 5 }),
  rps: fc.constantFrom(0.5, 1, 2, 5, 20),
  blockMs: fc.constantFrom(undefined, undefined, 300, 2_000),
});

/** The rule of a policy of the trace. */
const ruleOfPolicy = ({
  algorithm,
  rps,
  burst,
  blockMs,
}: typeof policy extends fc.Arbitrary<infer P> ? P : never): Rule =>
  blockMs === undefined ? ruleOf(algorithm, rps, burst) : { ...ruleOf(algorithm, rps, burst), blockMs };

/** A request: which instance sends it, after how long, with which of the policies and cost. */
const step = fc.record({
  instance: fc.constantFrom(0, 0, 0, 1),
  dt: fc.oneof(
    { weight: 4, arbitrary: fc.constant(0) },
    { weight: 3, arbitrary: fc.integer({ min: 1, max: 50 }) },
    { weight: 1, arbitrary: fc.integer({ min: 100, max: 3_000 }) },
  ),
  identity: fc.constantFrom('a', 'b'),
  policies: fc.constantFrom([0], [0], [0, 1], [1]),
  cost: fc.constantFrom(1, 1, 2, 0.5),
});

describe('the refused-key cache of RedisStore (real Redis)', () => {
  it(
    'never refuses a request Redis would admit, while two instances with caches charge the same keys',
    async () => {
      // counts the requests the cache answers
      const lookup = RefusedCache.prototype.lookup;
      let hits = 0;
      const lookups = jest.spyOn(RefusedCache.prototype, 'lookup').mockImplementation(function (
        this: RefusedCache,
        ...args
      ) {
        const outcomes = lookup.apply(this, args);
        if (outcomes !== undefined) hits++;
        return outcomes;
      });
      let answered = 0;
      let refused = 0;
      await fc.assert(
        fc.asyncProperty(
          fc.tuple(policy, policy),
          fc.array(step, { minLength: 10, maxLength: 40 }),
          async (rules, steps) => {
            const prefix = `rl-cache-${randomUUID()}:`;
            let now = CASE_EPOCH;
            const clock = () => now;
            // two app instances, each with its cache, and Redis's own answer without one
            const instances = [new RedisStore({ client: redis, clock }), new RedisStore({ client: redis, clock })];
            const truth = new RedisStore({ client: redis, clock, cacheRefusals: false });
            for (const { instance, dt, identity, policies, cost } of steps) {
              now += dt;
              const requests: RateLimitRequest[] = policies.map((i) => {
                const rule = ruleOfPolicy(rules[i]);
                return { key: bucketKey(prefix, `p${i}`, rule, `${i}:${identity}`), policy: `p${i}`, rule, cost };
              });
              const wouldAdmit = (await truth.peek(requests)).every((d) => d.allowed);
              const hitsBefore = hits;
              const decisions = await instances[instance].consume(requests);
              const fromCache = hits > hitsBefore;
              expect({ wouldAdmit, allowed: decisions.every((d) => d.allowed) }).toEqual({
                wouldAdmit,
                allowed: wouldAdmit,
              });
              if (fromCache) {
                answered++;
                // what the cache answers with: the refusing policy still needs time, never more than Redis says
                const redisSays = await truth.peek(requests);
                decisions.forEach((d, i) => {
                  if (!d.allowed) expect(d.retryAfter).toBeLessThanOrEqual(redisSays[i].retryAfter);
                });
              }
              if (!wouldAdmit) refused++;
            }
          },
        ),
        { numRuns: RUNS, seed: SEED },
      );
      lookups.mockRestore();
      console.log(
        `refused-key cache: ${refused} refusals in ${RUNS} traces, ${answered} answered from the cache, none wrongly`,
      );
      // the property is not vacuous: the cache did answer
      expect(answered).toBeGreaterThan(RUNS / 2);
    },
    30_000 + RUNS * 50,
  );

  it(
    'refuses in the process only what Redis refuses when a flood waits for a call and goes on together',
    async () => {
      // one instance with the cache, and the same requests on buckets of their own without it: with
      // one clock and one instance, a sound cache admits exactly as many as Redis alone
      const flood = fc.record({
        dt: fc.oneof(
          { weight: 3, arbitrary: fc.integer({ min: 0, max: 20 }) },
          { weight: 1, arbitrary: fc.integer({ min: 100, max: 2_000 }) },
        ),
        together: fc.integer({ min: 1, max: 8 }),
        policies: fc.constantFrom([0], [0], [0, 1], [1]),
        cost: fc.constantFrom(1, 1, 2, 0.5),
      });
      const together = RefusedCache.prototype.lookupTogether;
      let refusedTogether = 0;
      const lookups = jest.spyOn(RefusedCache.prototype, 'lookupTogether').mockImplementation(function (
        this: RefusedCache,
        ...args
      ) {
        const outcomes = together.apply(this, args);
        if (outcomes !== undefined && !outcomes.every((outcome) => outcome.allowed)) refusedTogether++;
        return outcomes;
      });
      await fc.assert(
        fc.asyncProperty(
          fc.tuple(policy, policy),
          fc.array(flood, { minLength: 5, maxLength: 25 }),
          async (rules, steps) => {
            const run = randomUUID();
            let now = CASE_EPOCH;
            const clock = () => now;
            const cached = new RedisStore({ client: redis, clock });
            const alone = new RedisStore({ client: redis, clock, cacheRefusals: false });
            const requestsOf = (prefix: string, policies: readonly number[], cost: number): RateLimitRequest[] =>
              policies.map((i) => {
                const rule = ruleOfPolicy(rules[i]);
                return { key: bucketKey(prefix, `p${i}`, rule, `${i}:flood`), policy: `p${i}`, rule, cost };
              });
            for (const { dt, together, policies, cost } of steps) {
              now += dt;
              const admitted = async (store: RedisStore, prefix: string) => {
                const requests = requestsOf(prefix, policies, cost);
                const decisions = await Promise.all(Array.from({ length: together }, () => store.consume(requests)));
                return decisions.filter((request) => request.every((decision) => decision.allowed)).length;
              };
              const withCache = await admitted(cached, `rl-together-${run}:`);
              const byRedis = await admitted(alone, `rl-alone-${run}:`);
              expect({ withCache, byRedis }).toEqual({ withCache: byRedis, byRedis });
            }
          },
        ),
        { numRuns: RUNS, seed: SEED },
      );
      lookups.mockRestore();
      console.log(
        `refused-key cache, requests going on together: ${refusedTogether} refused in the process, none wrongly`,
      );
      expect(refusedTogether).toBeGreaterThan(RUNS / 10);
    },
    30_000 + RUNS * 100,
  );

  it('goes to Redis for a request one policy refuses while another, with a block, may refuse and start it', async () => {
    // found by the property above (seed 146812577): a refusal of p0 remembered while p1 had room
    // was reused after another request had filled p1's window, so Redis never started p1's block
    const run = randomUUID();
    let now = CASE_EPOCH;
    const clock = () => now;
    const rules: Rule[] = [ruleOf('token_bucket', 0.5, 1), { ...ruleOf('fixed_window', 20, 1), blockMs: 300 }];
    const stores = {
      withCache: new RedisStore({ client: redis, clock }),
      byRedis: new RedisStore({ client: redis, clock, cacheRefusals: false }),
    };
    const trace: Array<[number, number[]]> = [
      [3, [0]],
      [1, [0, 1]],
      [2, [1]],
      [9, [0, 1]],
      [3, [0]],
      [16, [0]],
      [16, [1]],
      [100, [0]],
    ];
    const byRedis: boolean[] = [];
    for (const [dt, policies] of trace) {
      now += dt;
      const admitted = await Promise.all(
        Object.entries(stores).map(async ([name, store]) => {
          const requests = policies.map((i) => ({
            key: bucketKey(`rl-block-${run}-${name}:`, `p${i}`, rules[i], 'a'),
            policy: `p${i}`,
            rule: rules[i],
            cost: 1,
          }));
          return (await store.consume(requests)).every((decision) => decision.allowed);
        }),
      );
      expect({ at: now - CASE_EPOCH, withCache: admitted[0] }).toEqual({
        at: now - CASE_EPOCH,
        withCache: admitted[1],
      });
      byRedis.push(admitted[1]);
    }
    // at 15 ms p1's full window refused too and started its block: at 50 ms, in a new window, p1 still refuses
    expect(byRedis).toEqual([true, false, true, false, false, false, false, false]);
  });
});

/** A request of the costly kind: its policies (algorithm, rps, burst) and its cost, the same for each. */
interface Costly {
  policies: ReadonlyArray<readonly [Algorithm, number, number]>;
  cost: number;
  /** A request of cost 1 this many ms before the first: the bucket is then part refilled, a window part gone. */
  oneBeforeMs?: number;
}

/**
 * Requests whose cost is over 1, for each algorithm: a cost that empties the bucket at once, a
 * fractional one that takes two requests, the fractional one with a faster token bucket beside it
 * (the slower policy then says when the request fits), and a cost of 3 after one of 1 earlier.
 */
const COSTLY: Array<[string, Costly]> = RATE_ALGORITHMS.flatMap((algorithm): Array<[string, Costly]> => [
  [`${algorithm}, cost 100 of 100 at 20/s`, { policies: [[algorithm, 20, 100]], cost: 100 }],
  [`${algorithm}, cost 2.5 of 5 at 2/s`, { policies: [[algorithm, 2, 5]], cost: 2.5 }],
  [
    `${algorithm} at 0.5/s and a token bucket at 20/s, cost 2.5 of 5`,
    {
      policies: [
        [algorithm, 0.5, 5],
        ['token_bucket', 20, 5],
      ],
      cost: 2.5,
    },
  ],
  [
    `${algorithm}, cost 3 of 5 at 0.5/s, 1.5 s after a cost of 1`,
    { policies: [[algorithm, 0.5, 5]], cost: 3, oneBeforeMs: 1_500 },
  ],
]);

/** The stores whose answers must agree, on one clock: the memory store, and RedisStore without and with its cache. */
function comparedStores(clock: () => number) {
  return {
    memory: new MemoryStore({ clock }),
    uncached: new RedisStore({ client: redis, clock, cacheRefusals: false }),
    cached: new RedisStore({ client: redis, clock }),
  };
}

describe('the refused-key cache of RedisStore on requests of cost over 1 (real Redis)', () => {
  it.each(COSTLY)('%s: answers what Redis and the memory store answer', async (_, { policies, cost, oneBeforeMs }) => {
    const run = randomUUID();
    let now = CASE_EPOCH;
    const clock = () => now;
    const stores = comparedStores(clock);
    // each store its own buckets
    const requestsOf = (store: string, cost: number): RateLimitRequest[] =>
      policies.map(([algorithm, rps, burst], i) => {
        const rule = ruleOf(algorithm, rps, burst);
        return {
          key: bucketKey(`rl-costly-${run}-${store}:`, `p${i}`, algorithm, 'costly'),
          policy: `p${i}`,
          rule,
          cost,
        };
      });
    const seen = ({ policy, allowed, retryAfter, remaining }: RateLimitDecision) => ({
      policy,
      allowed,
      retryAfter,
      remaining,
    });
    const consume = async (ofCost = cost) => {
      const [memory, uncached, cached] = await Promise.all(
        Object.entries(stores).map(async ([name, store]) => (await store.consume(requestsOf(name, ofCost))).map(seen)),
      );
      return { memory, uncached, cached };
    };

    if (oneBeforeMs !== undefined) {
      now -= oneBeforeMs;
      await consume(1);
      now += oneBeforeMs;
    }

    // at one instant: until the bucket refuses, then the same request again
    let refusals = 0;
    let waitMs = 0;
    for (let step = 0; refusals < 2; step++) {
      const answerable = stores.cached.cached(requestsOf('cached', cost)) !== undefined;
      const { memory, uncached, cached } = await consume();
      expect({ step, uncached, cached }).toEqual({ step, uncached: memory, cached: memory });
      if (memory.every((decision) => decision.allowed)) continue;
      refusals++;
      waitMs = Math.max(...memory.map((decision) => decision.retryAfter)) * 1_000;
      // the first refusal is answered without Redis where the charge before it times it: everywhere
      // but the sliding window counter, whose outcome tells when a cost of its whole burst fits,
      // not less; the repeat, from what Redis said of the refusal, everywhere
      const timed = policies.every(([algorithm, , burst]) => algorithm !== 'sliding_window_counter' || cost === burst);
      expect({ refusals, answerable }).toEqual({ refusals, answerable: refusals === 1 ? timed : true });
    }

    // a second later, a second less to wait (`remaining` left out: a cached answer keeps the one Redis said)
    now += 1_000;
    const later = await consume();
    const timing = (decisions: ReturnType<typeof seen>[]) =>
      decisions.map(({ policy, allowed, retryAfter }) => ({ policy, allowed, retryAfter }));
    expect({ uncached: timing(later.uncached), cached: timing(later.cached) }).toEqual({
      uncached: timing(later.memory),
      cached: timing(later.memory),
    });

    // once the wait is over, admitted everywhere
    now = CASE_EPOCH + waitMs;
    const after = await consume();
    expect(after.memory.every((decision) => decision.allowed)).toBe(true);
    expect({ uncached: after.uncached, cached: after.cached }).toEqual({
      uncached: after.memory,
      cached: after.memory,
    });
    await Promise.all(Object.values(stores).map((store) => store.close()));
  });
});

describe('the refused-key cache of RedisStore with blockFor (real Redis)', () => {
  it.each(RATE_ALGORITHMS.map((a) => [a]))(
    '%s: leaves the refusal that starts a block to Redis, and answers the block to its end',
    async (algorithm) => {
      const run = randomUUID();
      let now = CASE_EPOCH;
      const clock = () => now;
      const stores = comparedStores(clock);
      // 10 a second, 2 at most, an hour's block: each store its own bucket
      const rule: Rule = { ...ruleOf(algorithm, 10, 2), blockMs: 3_600_000 };
      const requestOf = (store: string): RateLimitRequest[] => [
        { key: bucketKey(`rl-block-${run}-${store}:`, 'login', rule, 'ip:1.2.3.4'), policy: 'login', rule, cost: 1 },
      ];
      const seen = ({ allowed, retryAfter, remaining, fullAfter }: RateLimitDecision) => ({
        allowed,
        retryAfter,
        remaining,
        fullAfter,
      });
      const consume = async () => {
        const [memory, uncached, cached] = await Promise.all(
          Object.entries(stores).map(async ([name, store]) => (await store.consume(requestOf(name))).map(seen)),
        );
        expect({ uncached, cached }).toEqual({ uncached: memory, cached: memory });
        return memory[0];
      };
      const answerable = () => stores.cached.cached(requestOf('cached'))?.map(seen)[0];

      expect(await consume()).toMatchObject({ allowed: true, remaining: 1 });
      expect(await consume()).toMatchObject({ allowed: true, remaining: 0 });
      // the next one would be refused, but answered here it would start no block: Redis answers it
      expect(answerable()).toBeUndefined();
      expect(await consume()).toEqual({ allowed: false, retryAfter: 3_600, remaining: 0, fullAfter: 3_600 });
      // the block, from what Redis said: refused, until the block ends
      expect(answerable()).toMatchObject({ allowed: false, retryAfter: 3_600 });
      // a second on, the bucket has refilled: the block holds, a second shorter, cached or not
      now += 1_000;
      expect(answerable()).toMatchObject({ allowed: false, retryAfter: 3_599 });
      expect(await consume()).toMatchObject({ allowed: false, retryAfter: 3_599 });
      // never past the block's end: the cache lets go of it before, and Redis refuses to the last ms
      now = CASE_EPOCH + 3_600_000 - 1;
      expect(answerable()).toBeUndefined();
      expect(await consume()).toMatchObject({ allowed: false, retryAfter: 1 });
      expect(answerable()?.allowed).not.toBe(true);
      now = CASE_EPOCH + 3_600_000;
      expect(answerable()).toBeUndefined();
      expect(await consume()).toMatchObject({ allowed: true, remaining: 1 });
      await Promise.all(Object.values(stores).map((store) => store.close()));
    },
  );
});
