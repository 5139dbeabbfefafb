import type { Outcome, Rule } from '../../../lib/algorithms/algorithm.types.js';
import {
  type DescribedPolicy,
  headerPlan,
  rateLimitHeaders,
  writeRateLimitHeaders,
} from '../../../lib/headers/rate-limit-headers.js';
import { windowMs } from '../../../lib/algorithms/conversions.js';
import { scaledRule } from '../../../lib/limiter/scales.js';
import { quotaRule } from '../../../lib/policy/quota-rule.js';
import { resolvePolicy } from '../../../lib/policy/resolve-policy.js';
import { StoreRequests } from '../../../lib/limiter/store-requests.js';
import { routePolicy } from '../../../lib/routes/route-policy.js';
import { toDecision } from '../../../lib/stores/decision.js';
import type { RateLimitDecision, RateLimitRequest } from '../../../lib/stores/rate-limit-store.interface.js';
import { waitForCost } from '../../../lib/stores/redis/wait-for-cost.js';
import { RefusedCache } from '../../../lib/stores/refusal-gate/refused-cache.js';

/**
 * What sets `concurrency` and `quota` apart outside their models: a slot comes back when a
 * request ends, which no time tells (decisions, the refusal cache, waiting, headers, factors),
 * and a quota's rule is made per request from its calendar (`quotaRule`, headers). Pure functions
 * and classes at fixed instants.
 */

const DAY = 86_400_000;
/** 2 in flight, a lease of 5 min (`{ algorithm: 'concurrency', limit: 2, lease: '5m' }`). */
const SLOTS: Rule = { algorithm: 'concurrency', rps: 2 / 300, burst: 2 };
/** 100 a month, UTC, as resolved: its rps that of the longest month until a request names its own. */
const MONTHLY: Rule = {
  algorithm: 'quota',
  rps: 100 / (31 * 86_400),
  burst: 100,
  calendar: { period: 'month', timeZone: 'UTC' },
};

/** An outcome of a policy, admitted with a slot left unless told otherwise. */
function outcome(fields: Partial<Outcome> = {}): Outcome {
  return {
    allowed: true,
    remaining: 1,
    retryMs: 0,
    fullMs: 300_000,
    nextMs: 300_000,
    delayMs: 0,
    blockedMs: 0,
    ...fields,
  };
}

const request = (rule: Rule, cost = 1, key = 'k'): RateLimitRequest => ({ key, policy: 'exports', rule, cost });

describe('a concurrency decision (toDecision)', () => {
  it('says retry in 1 s when refused, however long the oldest lease has left', () => {
    const refused = toDecision(
      request(SLOTS),
      outcome({ allowed: false, remaining: 0, retryMs: 299_000, nextMs: 299_000 }),
    );
    expect(refused).toMatchObject({ allowed: false, limit: 2, remaining: 0, retryAfter: 1, resetAfter: 1 });
    // a sliding window log with the same outcome waits for its oldest entry
    const logged = toDecision(
      request({ ...SLOTS, algorithm: 'sliding_window_log' }),
      outcome({ allowed: false, remaining: 0, retryMs: 299_000, nextMs: 299_000 }),
    );
    expect(logged).toMatchObject({ retryAfter: 299, resetAfter: 299 });
  });

  it('has resetAfter 0 while a slot is left, else 1', () => {
    expect(toDecision(request(SLOTS), outcome({ remaining: 1 }))).toMatchObject({ retryAfter: 0, resetAfter: 0 });
    expect(toDecision(request(SLOTS), outcome({ remaining: 0 }))).toMatchObject({ retryAfter: 0, resetAfter: 1 });
  });

  it('still says never for a cost above the limit', () => {
    const never = toDecision(request(SLOTS, 3), outcome({ allowed: false, remaining: 2, retryMs: -1 }));
    expect(never.retryAfter).toBe(Infinity);
  });
});

describe('the refusal cache and concurrency', () => {
  const refusedSlot = outcome({ allowed: false, remaining: 0, retryMs: 299_000, nextMs: 299_000, fullMs: 300_000 });

  it('never answers a concurrency refusal itself: a slot may be given back at any moment', () => {
    const cache = new RefusedCache();
    cache.remember([request(SLOTS)], [refusedSlot], 1_000);
    expect(cache.lookup([request(SLOTS)], 1_001)).toBeUndefined();
    expect(cache.lookupTogether([request(SLOTS)], 1_001)).toBeUndefined();
    // it is contended: the calls on it in flight are worth waiting for
    expect(cache.contended([request(SLOTS)], 1_001)).toBe(true);
  });

  it('answers the same refusal of a sliding window log, the same model with a time to wait', () => {
    const log = request({ ...SLOTS, algorithm: 'sliding_window_log' });
    const cache = new RefusedCache();
    cache.remember([log], [refusedSlot], 1_000);
    expect(cache.lookup([log], 1_001)?.[0]).toMatchObject({ allowed: false });
  });

  it('does not time a concurrency refusal beside another policy that refused', () => {
    const other = request({ algorithm: 'fixed_window', rps: 1, burst: 10 }, 1, 'other');
    const cache = new RefusedCache();
    cache.remember(
      [request(SLOTS), other],
      [refusedSlot, outcome({ allowed: false, remaining: 0, retryMs: 5_000, nextMs: 5_000 })],
      1_000,
    );
    // the fixed window's refusal is timed, and answers a request of it alone; with the slot, none is
    expect(cache.lookup([other], 1_001)?.[0]).toMatchObject({ allowed: false });
    expect(cache.lookup([request(SLOTS), other], 1_001)).toBeUndefined();
    expect(cache.lookupTogether([request(SLOTS), other], 1_001)).toBeUndefined();
  });
});

describe("waitForCost and a slot ('release')", () => {
  it('knows only that a cost fits now', () => {
    expect(waitForCost(SLOTS, 1, outcome({ remaining: 1 }))).toBe(0);
    // a fraction takes a whole slot
    expect(waitForCost(SLOTS, 0.5, outcome({ remaining: 1 }))).toBe(0);
    expect(waitForCost(SLOTS, 2, outcome({ remaining: 1, nextMs: 1_000, fullMs: 300_000 }))).toBeUndefined();
    expect(waitForCost(SLOTS, 1.5, outcome({ remaining: 1 }))).toBeUndefined();
  });
});

describe('headers of concurrency and quota policies', () => {
  const exports: DescribedPolicy = { name: 'exports', rule: SLOTS };
  const monthly: DescribedPolicy = { name: 'monthly', rule: MONTHLY, owes: { period: true } };
  const perUser: DescribedPolicy = { name: 'per-user', rule: { rps: 5, burst: 10 } };
  const decision = (policy: string, fields: Partial<RateLimitDecision>): RateLimitDecision => ({
    allowed: true,
    policy,
    limit: 2,
    remaining: 1,
    resetAfter: 0,
    fullAfter: 300,
    retryAfter: 0,
    delay: 0,
    ...fields,
  });

  it("describes slots in flight with the draft's quota unit, and no window", () => {
    const plan = headerPlan(['ietf'], [exports, perUser])!;
    const headers = rateLimitHeaders(
      plan,
      [decision('exports', {}), decision('per-user', { limit: 10, remaining: 9, resetAfter: 1 })],
      0,
    );
    expect(Object.fromEntries(headers)).toEqual({
      'RateLimit-Policy': '"exports";q=2;qu="concurrent-requests", "per-user";q=10;w=2',
      RateLimit: '"exports";r=1;t=0, "per-user";r=9;t=1',
    });
  });

  it("gives a quota's window as the period of the request's own rule", () => {
    const plan = headerPlan(['ietf'], [perUser, monthly])!;
    const headers: Record<string, string> = {};
    const set = (name: string, value: string) => void (headers[name] = value);
    const decisions = [
      decision('per-user', { limit: 10, remaining: 9, resetAfter: 1 }),
      decision('monthly', { limit: 100, remaining: 99, resetAfter: 1_555_200 }),
    ];
    // February 2026: 28 days; March: 31
    const february = quotaRule(MONTHLY, Date.UTC(2026, 1, 10));
    writeRateLimitHeaders(plan, decisions, Date.UTC(2026, 1, 10), set, [perUser.rule, february]);
    expect(headers['RateLimit-Policy']).toBe('"per-user";q=10;w=2, "monthly";q=100;w=2419200');
    expect(headers.RateLimit).toBe('"per-user";r=9;t=1, "monthly";r=99;t=1555200');
    writeRateLimitHeaders(plan, decisions, Date.UTC(2026, 2, 10), set, [
      perUser.rule,
      quotaRule(MONTHLY, Date.UTC(2026, 2, 10)),
    ]);
    expect(headers['RateLimit-Policy']).toBe('"per-user";q=10;w=2, "monthly";q=100;w=2678400');
  });
});

describe('scaledRule and a concurrency rule', () => {
  it('leaves it as it is at any factor: slots in flight are not a rate', () => {
    for (const factor of [0.5, 0.1, 0.001]) expect(scaledRule(SLOTS, factor)).toBe(SLOTS);
    // a quota is scaled by its limit, as a window is
    expect(scaledRule(MONTHLY, 0.5)).toEqual({ ...MONTHLY, limit: 50 });
  });
});

describe('quotaRule', () => {
  it('makes the rule of the calendar period that holds the request: its start as origin, its length as the window', () => {
    const rule = quotaRule(MONTHLY, Date.UTC(2026, 1, 10, 12));
    expect(rule).toEqual({ ...MONTHLY, rps: (100 * 1000) / (28 * DAY), origin: Date.UTC(2026, 1, 1) });
    expect((rule.burst * 1000) / rule.rps).toBeCloseTo(28 * DAY, 3);
  });

  it('hands every request of one period the same rule, and the next period a new one', () => {
    const first = quotaRule(MONTHLY, Date.UTC(2026, 1, 1));
    expect(quotaRule(MONTHLY, Date.UTC(2026, 1, 28) - 1)).toBe(first);
    const march = quotaRule(MONTHLY, Date.UTC(2026, 2, 1));
    expect(march.origin).toBe(Date.UTC(2026, 2, 1));
    expect((march.burst * 1000) / march.rps).toBeCloseTo(31 * DAY, 3);
  });

  it("counts from an identity's anchor: a month anchored on the 31st starts on the last day of a shorter one", () => {
    const anchor = Date.UTC(2025, 0, 31);
    const rule = quotaRule(MONTHLY, Date.UTC(2026, 1, 10), anchor);
    expect(rule.origin).toBe(Date.UTC(2026, 0, 31));
    // to February's last day, the 28th
    expect(Math.round((rule.burst * 1000) / rule.rps)).toBe(28 * DAY);
    const after = quotaRule(MONTHLY, Date.UTC(2026, 1, 28, 1), anchor);
    expect(after.origin).toBe(Date.UTC(2026, 1, 28));
    expect(Math.round((after.burst * 1000) / after.rps)).toBe(31 * DAY);
  });

  it('follows the time zone: a Berlin month starts at 23:00 UTC in winter', () => {
    const berlin: Rule = { ...MONTHLY, calendar: { period: 'month', timeZone: 'Europe/Berlin' } };
    expect(quotaRule(berlin, Date.UTC(2026, 0, 31, 23, 30)).origin).toBe(Date.UTC(2026, 0, 31, 23));
  });

  it('returns any other rule as it is', () => {
    expect(quotaRule(SLOTS, Date.UTC(2026, 1, 10))).toBe(SLOTS);
  });
});

describe('a tiered quota as routes and RateLimiterService use it (StoreRequests)', () => {
  /** The requests the engine builds at `now`. */
  const at = (now: number) => new StoreRequests({ now: () => now });
  const policy = routePolicy(
    resolvePolicy(
      {
        name: 'plan',
        tier: 'user:plan',
        tiers: {
          free: { algorithm: 'quota', limit: 100, period: 'month' },
          pro: { algorithm: 'quota', limit: 10_000, period: 'day', timeZone: 'Europe/Berlin' },
          burst: { rps: 5, burst: 10 },
        },
        defaultTier: 'free',
        anchor: () => Date.UTC(2026, 0, 31),
      },
      'concurrency-quota.spec',
      'plan',
    ),
    { prefix: 'rl:', key: ['user'] },
  );

  it('knows the policy is a quota, with its anchor, from its tiers', () => {
    expect(policy.owes.period).toBe(true);
    expect(policy.owes.anchor).toBeInstanceOf(Function);
  });

  it("names the period of each tier's own calendar, from the anchor", () => {
    const now = Date.UTC(2026, 1, 15, 12);
    const free = at(now).request(policy, 'user:1', 1, 'free', Date.UTC(2026, 0, 31)).rule;
    expect(free.origin).toBe(Date.UTC(2026, 0, 31));
    expect(windowMs(free.rps, free.burst)).toBe(28 * 86_400_000);
    const pro = at(now).request(policy, 'user:1', 1, 'pro').rule;
    // a Berlin day in winter: from 23:00 UTC the day before
    expect(pro.origin).toBe(Date.UTC(2026, 1, 14, 23));
    expect(windowMs(pro.rps, pro.burst)).toBe(86_400_000);
  });

  it('leaves a tier that is a rate as it is', () => {
    const rate = at(Date.UTC(2026, 1, 15)).request(policy, 'user:1', 1, 'burst').rule;
    expect(rate).toEqual({ algorithm: 'token_bucket', rps: 5, burst: 10 });
  });
});
