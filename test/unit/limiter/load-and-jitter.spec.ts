import { bucketKey } from '../../../lib/keys/bucket-key.js';
import { identityFraction, jitteredRetryAfter } from '../../../lib/keys/retry-jitter.js';
import { ADAPTIVE_TICK_MS, ADAPTIVE_WINDOW_MS, AdaptiveRates } from '../../../lib/limiter/adaptive-rates.js';
import { type RoutePolicy, routePolicy } from '../../../lib/routes/route-policy.js';
import { Scales, scaledRule } from '../../../lib/limiter/scales.js';
import type { RateLimitPolicy } from '../../../lib/policy/policy.types.js';
import { resolvePolicy } from '../../../lib/policy/resolve-policy.js';

/** Pure pieces of per-client limits: the per-identity jitter, the scale factors and the adaptive controller (clock pinned). */

const policy = (fields: object): RoutePolicy =>
  routePolicy(
    resolvePolicy(
      JSON.parse(JSON.stringify({ name: 'api', rps: 10, burst: 20, ...fields })) as RateLimitPolicy,
      'Spec',
      'api',
    ),
    { prefix: 'rl:', key: ['ip'] },
  );
const keyOf = (identity: string) => bucketKey('rl:', 'login', 'fixed_window', identity);

describe('retry jitter', () => {
  const keys = Array.from({ length: 30 }, (_, i) => keyOf(`ip:198.51.100.${i}`));

  it('takes a fraction in [0, 1) from the identity, the same under every policy, spread across identities', () => {
    const fractions = keys.map(identityFraction);
    for (const u of fractions) expect(u >= 0 && u < 1).toBe(true);
    expect(identityFraction(bucketKey('x:', 'other', 'gcra', 'ip:198.51.100.3'))).toBe(fractions[3]);
    // 30 identities over 10 deciles: at least 5 of them hit
    expect(new Set(fractions.map((u) => Math.floor(u * 10))).size).toBeGreaterThanOrEqual(5);
  });

  it.each([
    [1, 0.5],
    [10, 0.5],
    [60, 1],
    [3600, 0.1],
  ])('stretches a wait of %i s by at most %f of it, never shortens it', (wait, jitter) => {
    const waits = keys.map((key) => jitteredRetryAfter(wait, jitter, key));
    for (const jittered of waits) {
      expect(Number.isInteger(jittered)).toBe(true);
      expect(jittered).toBeGreaterThanOrEqual(wait);
      expect(jittered).toBeLessThanOrEqual(Math.ceil(wait * (1 + jitter)));
    }
    expect(keys.map((key) => jitteredRetryAfter(wait, jitter, key))).toEqual(waits);
  });

  it('keeps a never-admittable wait infinite, and the exact wait without jitter', () => {
    expect(jitteredRetryAfter(Infinity, 0.5, keys[0])).toBe(Infinity);
    expect(keys.map((key) => jitteredRetryAfter(7, 0, key))).toEqual(keys.map(() => 7));
  });

  it('spreads 30 identities over at least 3 values within [W, ceil(1.5 W)]', () => {
    expect(new Set(keys.map((key) => jitteredRetryAfter(10, 0.5, key))).size).toBeGreaterThanOrEqual(3);
  });
});

describe('Scales', () => {
  const api = policy({});
  const other = policy({ name: 'other' });

  it('hands back the route list itself while no factor is set', () => {
    const scales = new Scales();
    const route = [api, other];
    expect(scales.apply(route)).toBe(route);
    scales.set('api', 1);
    expect(scales.apply(route)).toBe(route);
  });

  it("scales each policy's rps by its own factor, or the '*' one, one copy per change", () => {
    const scales = new Scales();
    const route = [api, other];
    scales.set('api', 0.5);
    const scaled = scales.apply(route);
    expect(scaled.map(({ rule }) => rule.rps)).toEqual([5, 10]);
    expect(scaled[1]).toBe(other);
    expect(scales.apply(route)).toBe(scaled);
    scales.set('*', 0.2);
    expect(scales.get('api')).toBe(0.2);
    expect(scales.apply(route).map(({ rule }) => rule.rps)).toEqual([2, 2]);
    scales.set('other', 1);
    expect(scales.apply(route).map(({ rule }) => rule.rps)).toEqual([2, 10]);
    expect(scales.get('*')).toBe(0.2);
    scales.set('*', 1);
    expect(scales.apply(route)).toBe(route);
  });

  it("scales every tier's rps of a tiered policy, its default tier's rule as the policy's", () => {
    const tiered = policy({
      rps: undefined,
      burst: undefined,
      tier: 'user:plan',
      tiers: { free: { rps: 2, burst: 4 }, pro: { rps: 20, burst: 40 } },
      defaultTier: 'free',
    });
    const scales = new Scales();
    scales.set('api', 0.5);
    const [scaled] = scales.apply([tiered]);
    expect([...scaled.tiers!.byName.values()].map(({ name, rule }) => [name, rule.rps])).toEqual([
      ['free', 1],
      ['pro', 10],
    ]);
    expect(scaled.rule.rps).toBe(1);
    expect(scaled.tiers!.byDefault).toBe(scaled.tiers!.byName.get('free'));
    expect(scaled.tiers!.byName.get('pro')!.keyPrefix).toBe(tiered.tiers!.byName.get('pro')!.keyPrefix);
  });

  it('refuses a factor outside (0, 1] and a name that is not a string', () => {
    const scales = new Scales();
    expect(() => scales.set('api', 0)).toThrow(RangeError);
    expect(() => scales.set('api', 1.01)).toThrow(RangeError);
    expect(() => scales.set(7 as never, 0.5)).toThrow(TypeError);
    expect(scales.get('api')).toBe(1);
  });

  it("scales a fixed or sliding window counter's limit and keeps its window (rps and burst), its key the same", () => {
    const scales = new Scales();
    const fixed = policy({ algorithm: 'fixed_window', rps: undefined, burst: undefined, limit: 10, window: '10s' });
    const counter = policy({
      name: 'other',
      algorithm: 'sliding_window_counter',
      rps: undefined,
      burst: undefined,
      limit: 100,
      window: '1m',
    });
    scales.set('*', 0.75);
    const [scaledFixed, scaledCounter] = scales.apply([fixed, counter]);
    expect(scaledFixed.rule).toEqual({ ...fixed.rule, limit: 7.5 });
    expect(scaledCounter.rule).toEqual({ ...counter.rule, limit: 75 });
    expect([scaledFixed.keyPrefix, scaledCounter.keyPrefix]).toEqual([fixed.keyPrefix, counter.keyPrefix]);
  });

  it.each([['token_bucket'], ['leaky_bucket'], ['gcra'], ['sliding_window_log']])(
    "scales a %s policy's rps",
    (algorithm) => {
      const scales = new Scales();
      const bucket = policy({ algorithm });
      scales.set('api', 0.25);
      expect(scales.scaled(bucket).rule).toEqual({ ...bucket.rule, rps: 2.5 });
    },
  );

  it('takes a scaled limit within rounding of a whole number as that number (100 x 0.29 is 28.999999999999996)', () => {
    expect(scaledRule({ algorithm: 'fixed_window', rps: 10, burst: 100 }, 0.29).limit).toBe(29);
    expect(scaledRule({ algorithm: 'fixed_window', rps: 10, burst: 10 }, 0.75).limit).toBe(7.5);
  });

  it('checks a factor against the policies it is given: none may take more than 365 days to refill under it', () => {
    const scales = new Scales();
    const yearly = policy({ name: 'yearly', rps: undefined, burst: undefined, limit: 1, window: '300d' });
    const tiered = policy({
      name: 'tiered',
      rps: undefined,
      burst: undefined,
      tier: 'user:plan',
      tiers: { free: { limit: 1, window: '200d' }, pro: { rps: 1 } },
      defaultTier: 'pro',
    });
    // 300 days: 0.822 at least (300 / 365, rounded up), for that policy only
    expect(() => scales.set('yearly', 0.8, [api, yearly])).toThrow(
      'at least 0.822: below it policy "yearly" would take more than 365 days',
    );
    scales.set('yearly', 0.83, [api, yearly]);
    scales.set('api', 0.01, [api, yearly]);
    expect(() => scales.set('*', 0.5, [api, tiered])).toThrow(
      'below it policy "tiered" (tier "free") would take more than 365 days',
    );
    scales.set('*', 0.55, [api, tiered]);
    // 1e6 tokens a second with a burst of 1 is the fastest policy there is: 3.17e-14 of it takes 365 days
    expect(() => scales.set('other', 3e-14)).toThrow(
      'at least 3.18e-14: below it every policy would take more than 365 days',
    );
    expect([scales.get('yearly'), scales.get('api'), scales.get('tiered')]).toEqual([0.55, 0.55, 0.55]);
  });

  it('holds a policy it was not given at the least factor it takes: 365 days to refill, never more', () => {
    const scales = new Scales();
    scales.set('api', 1e-12);
    const { rule } = scales.scaled(api);
    // rps 10, burst 20: 2 s to refill, 365 days at 6.34e-8
    expect(rule.burst / rule.rps / 86_400).toBeCloseTo(365, 6);
    const window = policy({ algorithm: 'fixed_window', rps: 10, burst: 20 });
    expect(scales.scaled(window).rule.limit).toBeCloseTo(20 * (2 / (365 * 86_400)), 20);
  });
});

describe('AdaptiveRates', () => {
  const adaptive = policy({ adaptive: { latency: 100, min: 0.2 } });

  function steering() {
    let now = 0;
    const set: Array<[string, number]> = [];
    const rates = new AdaptiveRates(
      (name, factor) => set.push([name, factor]),
      () => now,
    );
    const advance = (ms: number) => (now += ms);
    return { rates, set, advance };
  }

  it('steers down while the p99 is above the target, not below min, and back up to 1 once it is under', () => {
    const { rates, set, advance } = steering();
    const factors: number[] = [];
    for (let tick = 0; tick < 10; tick++) {
      for (let i = 0; i < 50; i++) rates.record(adaptive, 300);
      advance(ADAPTIVE_TICK_MS);
      rates.tick();
      factors.push(rates.factor('api'));
    }
    expect(factors[0]).toBe(0.75);
    expect(factors[2]).toBeLessThanOrEqual(0.5);
    expect(factors.at(-1)).toBe(0.2);
    expect(set.at(-1)).toEqual(['api', 0.2]);

    // fast again: the slow ones leave the window, then the factor climbs by 0.1 a tick
    const recovering: number[] = [];
    for (let tick = 0; tick < 14; tick++) {
      for (let i = 0; i < 50; i++) rates.record(adaptive, 20);
      advance(ADAPTIVE_TICK_MS);
      rates.tick();
      recovering.push(rates.factor('api'));
    }
    const climbing = recovering.findIndex((factor) => factor > 0.2);
    expect(climbing).toBeLessThanOrEqual(ADAPTIVE_WINDOW_MS / ADAPTIVE_TICK_MS);
    expect(recovering.at(-1)).toBe(1);
    expect(set.at(-1)).toEqual(['api', 1]);
    rates.close();
  });

  it('leaves a factor where it is when setScale refuses the next one (a policy of the same name cannot take it)', () => {
    let now = 0;
    const scales = new Scales();
    const yearly = policy({ name: 'api', rps: undefined, burst: undefined, limit: 1, window: '300d' });
    const rates = new AdaptiveRates(
      (name, factor) => scales.set(name, factor, [adaptive, yearly]),
      () => now,
    );
    for (let tick = 0; tick < 3; tick++) {
      rates.record(adaptive, 300);
      now += ADAPTIVE_TICK_MS;
      expect(() => rates.tick()).not.toThrow();
    }
    // 0.75 is refused (300 days / 0.75 is more than 365): the factor stays at 1
    expect([rates.factor('api'), scales.get('api')]).toEqual([1, 1]);
    rates.close();
  });

  it('reads the 99th percentile: one slow request in 200 does not slow the rate', () => {
    const { rates, advance } = steering();
    for (let i = 0; i < 199; i++) rates.record(adaptive, 10);
    rates.record(adaptive, 5_000);
    advance(ADAPTIVE_TICK_MS);
    rates.tick();
    expect(rates.factor('api')).toBe(1);
    rates.record(adaptive, 5_000);
    rates.record(adaptive, 5_000);
    advance(ADAPTIVE_TICK_MS);
    rates.tick();
    expect(rates.factor('api')).toBe(0.75);
    rates.close();
  });

  it('takes one stall of the app for no trend: one slow request among a few does not slow the rate, two do', () => {
    const { rates, advance } = steering();
    // 16 requests a second for 2 s, one held 500 ms by a collection pause
    for (let i = 0; i < 31; i++) rates.record(adaptive, 10);
    rates.record(adaptive, 500);
    advance(ADAPTIVE_TICK_MS);
    rates.tick();
    expect(rates.factor('api')).toBe(1);
    rates.record(adaptive, 500);
    advance(ADAPTIVE_TICK_MS);
    rates.tick();
    expect(rates.factor('api')).toBe(0.75);
    rates.close();
  });

  it('climbs back when nothing is measured (no sign of load), then forgets the policy', () => {
    const { rates, set, advance } = steering();
    rates.record(adaptive, 1_000);
    advance(ADAPTIVE_TICK_MS);
    rates.tick();
    expect(rates.factor('api')).toBe(0.75);
    advance(ADAPTIVE_WINDOW_MS);
    for (let tick = 0; tick < 3; tick++) rates.tick();
    expect(rates.factor('api')).toBe(1);
    expect(set.at(-1)).toEqual(['api', 1]);
    rates.tick();
    expect(set.length).toBe(4);
    rates.close();
  });
});
