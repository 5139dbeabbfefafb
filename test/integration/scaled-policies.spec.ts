import { randomUUID } from 'node:crypto';
import type { Redis } from 'ioredis';
import {
  RATE_ALGORITHMS,
  type Algorithm,
  SCALED_BY_LIMIT,
  WINDOW_ALGORITHMS,
} from '../../lib/algorithms/algorithm.types.js';
import type { RateLimitPolicy } from '../../lib/policy/policy.types.js';
import { RateLimiterService } from '../../lib/rate-limiter.service.js';
import { resolveOptions } from '../../lib/rate-limit-options.js';
import { AdaptiveRates, ADAPTIVE_TICK_MS } from '../../lib/limiter/adaptive-rates.js';
import { MemoryStore } from '../../lib/stores/memory/memory.store.js';
import type { RateLimitStore } from '../../lib/stores/rate-limit-store.interface.js';
import { RedisStore } from '../../lib/stores/redis/redis.store.js';
import { ManualClock } from '../../lib/testing/manual-clock.js';
import { CASE_EPOCH } from '../cases/index.js';
import { connectTestRedis } from '../support/redis/test-redis.js';
import { StandaloneLimiter } from '../support/standalone-limiter.js';

/**
 * Policies under a factor (`RateLimiterService.setScale`, `adaptive`), on the memory store and
 * on Redis, on a pinned clock: a lower factor never admits more than the policy unscaled, however
 * the factor moves and whatever factors the instances sharing the store have. For
 * `fixed_window` and `sliding_window_counter` the factor scales the limit and keeps the window
 * (a longer window used to start its count again at 0: `setScale(0.5)` on a full window let 10
 * more through at once, and two instances at 0.75 and 1 on one Redis let through 100 of 100 at
 * a limit of 10). A factor no policy can take is refused; one a policy first used after it was
 * set cannot take holds that policy at the 365 days it may take to refill.
 */

/** 10 per 10 s, in each algorithm. */
const policyOf = (algorithm: Algorithm): RateLimitPolicy => ({ name: 'api', algorithm, limit: 10, window: '10s' });
const YEAR_MS = 365 * 86_400_000;

let redis: Redis;
let other: Redis;
beforeAll(async () => {
  [redis, other] = await Promise.all([connectTestRedis(), connectTestRedis()]);
});
afterAll(async () => {
  await Promise.all([redis.quit(), other.quit()]);
});

/** Instances of the app sharing one store: each its own service (its own factors) and, on Redis, its own connection. */
type Instances = (count: number, clock: ManualClock, options?: { cacheRefusals?: boolean }) => RateLimiterService[];

const STORES: Array<[string, Instances]> = [
  [
    'memory',
    (count, clock) => {
      const store = new MemoryStore({ clock });
      return Array.from({ length: count }, () => service(store));
    },
  ],
  [
    'Redis',
    (count, clock, { cacheRefusals = false } = {}) => {
      const prefix = `rl-scaled-${randomUUID()}:`;
      return Array.from({ length: count }, (_, i) =>
        service(new RedisStore({ client: i % 2 ? other : redis, clock, cacheRefusals }), prefix),
      );
    },
  ],
];

function service(store: RateLimitStore, prefix = 'rl:'): RateLimiterService {
  return new StandaloneLimiter(resolveOptions({ store, prefix, failMode: 'closed', timeout: 5_000 }), store);
}

/** How many of `count` requests the instances admit, taking turns, the clock moving `stepMs` after each. */
async function admitted(
  instances: readonly RateLimiterService[],
  clock: ManualClock,
  policy: RateLimitPolicy,
  count: number,
  stepMs = 0,
): Promise<number> {
  let admitted = 0;
  for (let i = 0; i < count; i++) {
    const [decision] = await instances[i % instances.length].consume('ip:203.0.113.9', policy);
    if (decision.allowed) admitted++;
    clock.advance(stepMs);
  }
  return admitted;
}

describe.each(STORES)('policies under a factor, %s store', (_store, instances) => {
  it.each(RATE_ALGORITHMS.map((a) => [a]))(
    '%s: setScale(0.5) on a full window admits nothing more',
    async (algorithm) => {
      // 15 s into a 20 s period: the 10 s window began 5 s ago
      const clock = new ManualClock(CASE_EPOCH + 15_000);
      const [limiter] = instances(1, clock);
      const policy = policyOf(algorithm);
      expect(await admitted([limiter], clock, policy, 15)).toBe(10);
      limiter.setScale('api', 0.5);
      clock.advance(100);
      expect(await admitted([limiter], clock, policy, 15)).toBe(0);
      if (algorithm === 'fixed_window') {
        // the window ends when it did: the next one admits 5
        clock.set(CASE_EPOCH + 20_000);
        expect(await admitted([limiter], clock, policy, 15)).toBe(5);
      }
    },
  );

  it.each(RATE_ALGORITHMS.map((a) => [a]))(
    '%s: two instances at factors 0.75 and 1 admit the limit of 10 together, no more',
    async (algorithm) => {
      const clock = new ManualClock(CASE_EPOCH);
      const [a, b] = instances(2, clock);
      a.setScale('api', 0.75);
      expect(await admitted([a, b], clock, policyOf(algorithm), 100)).toBe(10);
    },
  );

  it.each(RATE_ALGORITHMS.map((a) => [a]))(
    '%s: instances at factors 0.75, 0.5 and 1 admit no more over time than all at 1',
    async (algorithm) => {
      const policy = policyOf(algorithm);
      const clock = new ManualClock(CASE_EPOCH);
      const mixed = instances(3, clock);
      mixed[0].setScale('api', 0.75);
      mixed[1].setScale('api', 0.5);
      // 300 requests 100 ms apart: 30 s, three windows
      const underFactors = await admitted(mixed, clock, policy, 300, 100);
      const unscaledClock = new ManualClock(CASE_EPOCH);
      const unscaled = await admitted(instances(3, unscaledClock), unscaledClock, policy, 300, 100);
      expect(underFactors).toBeLessThanOrEqual(unscaled);
      expect(underFactors).toBeGreaterThan(0);
      if (WINDOW_ALGORITHMS.has(algorithm)) expect(unscaled).toBeLessThanOrEqual(60);
    },
  );

  it.each([['fixed_window'], ['sliding_window_counter']] as const)(
    '%s: a cost above the scaled limit but within the limit waits for a later window, it is not "never"',
    async (algorithm) => {
      const clock = new ManualClock(CASE_EPOCH + 1_000);
      const [limiter] = instances(1, clock);
      const policy = policyOf(algorithm);
      await limiter.consume('ip:203.0.113.9', policy);
      limiter.setScale('api', 0.5);
      const [refused] = await limiter.consume('ip:203.0.113.9', policy, 8);
      expect(refused).toMatchObject({ allowed: false, limit: 5 });
      expect(Number.isFinite(refused.retryAfter)).toBe(true);
      expect((await limiter.consume('ip:203.0.113.9', policy, 11))[0].retryAfter).toBe(Infinity);
      // once the window holds nothing, it gets in
      clock.advance(refused.retryAfter * 1000);
      expect((await limiter.consume('ip:203.0.113.9', policy, 8))[0].allowed).toBe(true);
    },
  );

  it('steering down every 500 ms (adaptive) admits less than the policy unscaled, not more', async () => {
    // 20 per 2 s, 240 requests 25 ms apart, every one it admits answered in 300 ms: the target is 50 ms
    const policy: RateLimitPolicy = { name: 'reports', algorithm: 'fixed_window', limit: 20, window: '2s' };
    const run = async (steered: boolean) => {
      const clock = new ManualClock(CASE_EPOCH);
      const [limiter] = instances(1, clock);
      const rates = new AdaptiveRates(
        (name, factor) => limiter.setScale(name, factor),
        () => clock.now(),
      );
      const watched = { name: 'reports', adaptive: { latency: 50, min: 0.1 } } as Parameters<
        AdaptiveRates['record']
      >[0];
      let count = 0;
      for (let i = 0; i < 240; i++) {
        const [decision] = await limiter.consume('ip:203.0.113.9', policy);
        if (decision.allowed) {
          count++;
          if (steered) rates.record(watched, 300);
        }
        clock.advance(25);
        if (steered && clock.now() % ADAPTIVE_TICK_MS === 0) rates.tick();
      }
      rates.close();
      return { count, factor: limiter.getScale('reports') };
    };
    const unscaled = await run(false);
    const steered = await run(true);
    // three windows of 20
    expect(unscaled.count).toBe(60);
    expect(steered.factor).toBe(0.1);
    expect(steered.count).toBeLessThan(unscaled.count);
  });

  it.each(RATE_ALGORITHMS.map((a) => [a]))(
    '%s: a factor a policy first used after it cannot take holds it at 365 days to refill, every number finite',
    async (algorithm) => {
      const clock = new ManualClock(CASE_EPOCH);
      const [limiter] = instances(1, clock);
      // no policy named 'api' known yet: a factor any policy could take
      limiter.setScale('api', 1e-9);
      const policy: RateLimitPolicy = { name: 'api', algorithm, rps: 10, burst: 5 };
      const decisions = [
        ...(await limiter.consume('ip:203.0.113.9', policy)),
        ...(await limiter.consume('ip:203.0.113.9', policy, 5)),
      ];
      for (const decision of decisions) {
        for (const value of Object.values(decision))
          if (typeof value === 'number') expect(Number.isNaN(value)).toBe(false);
        expect(decision.fullAfter).toBeLessThanOrEqual(YEAR_MS / 1000);
        expect(decision.retryAfter === Infinity || decision.retryAfter <= YEAR_MS / 1000).toBe(true);
      }
      // a window under so low a factor admits one request while it holds nothing
      expect(decisions[0]).toMatchObject({ allowed: true, remaining: SCALED_BY_LIMIT.has(algorithm) ? 0 : 4 });
    },
  );
});

describe('policies under a factor, Redis only', () => {
  it.each(RATE_ALGORITHMS.map((a) => [a]))(
    '%s: a factor a policy cannot take makes no call fail, and its key lives 365 days at most',
    async (algorithm) => {
      const clock = new ManualClock(CASE_EPOCH);
      const prefix = `rl-scaled-${randomUUID()}:`;
      const limiter = service(new RedisStore({ client: redis, clock, cacheRefusals: false }), prefix);
      limiter.setScale('api', 1e-9);
      // failMode 'closed': a failed call would reject
      const sent = Date.now();
      const [decision] = await limiter.consume('ip:203.0.113.9', { name: 'api', algorithm, rps: 10, burst: 5 });
      // the clock is pinned ahead of real time: the key's TTL counts from the real time of the call
      const took = Date.now() - sent;
      expect(decision.allowed).toBe(true);
      const [key] = await redis.keys(`${prefix}*`);
      expect(await redis.pexpiretime(key)).toBeLessThanOrEqual(CASE_EPOCH + YEAR_MS + took);
      await redis.del(key);
    },
  );

  it("does not answer from a refusal remembered under another factor (the store's cache of refusals)", async () => {
    const clock = new ManualClock(CASE_EPOCH);
    const [limiter] = STORES[1][1](1, clock, { cacheRefusals: true });
    const policy = policyOf('fixed_window');
    expect(await admitted([limiter], clock, policy, 5)).toBe(5);
    limiter.setScale('api', 0.5);
    expect(await admitted([limiter], clock, policy, 3)).toBe(0);
    // back at the full limit: 5 more, not the refusal remembered at 0.5 until the window ends
    limiter.setScale('api', 1);
    expect(await admitted([limiter], clock, policy, 10)).toBe(5);
  });
});
