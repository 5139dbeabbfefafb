import {
  type DescribedPolicy,
  headerPlan,
  durationText,
  limiting,
  rateLimitHeaders,
  windowSeconds,
} from '../../../lib/headers/rate-limit-headers.js';
import type { RateLimitDecision } from '../../../lib/stores/rate-limit-store.interface.js';

/**
 * The header serialiser: exact values per family, one `RateLimit` member per policy, and the one
 * rule (`limiting`) that picks the policy the single-policy headers, `Retry-After` and the 429
 * describe. Pure functions at a fixed instant.
 */

/** 2026-01-01T00:00:00.250Z: `X-RateLimit-Reset` rounds it up to ...601. */
const NOW_MS = 1_767_225_600_250;
const NOW_S = 1_767_225_601;

const PER_USER: DescribedPolicy = { name: 'per-user', rule: { rps: 5, burst: 10 } };
const PER_IP: DescribedPolicy = { name: 'per-ip', rule: { rps: 1000 / 3600, burst: 1000 } };

/** A decision of `policy`, admitted unless told otherwise. */
function decision(policy: string, fields: Partial<RateLimitDecision> = {}): RateLimitDecision {
  return {
    allowed: true,
    policy,
    limit: 10,
    remaining: 5,
    resetAfter: 1,
    fullAfter: 2,
    retryAfter: 0,
    delay: 0,
    ...fields,
  };
}

/** A refusal of `policy` that frees up in `retryAfter` seconds. */
const refusal = (policy: string, retryAfter: number, fields: Partial<RateLimitDecision> = {}) =>
  decision(policy, { allowed: false, remaining: 0, retryAfter, ...fields });

describe('headerPlan', () => {
  it('is undefined without a family or without a policy', () => {
    expect(headerPlan([], [PER_USER])).toBeUndefined();
    expect(headerPlan(['ietf'], [])).toBeUndefined();
  });

  it('works out RateLimit-Policy and each RateLimit member up to the remaining', () => {
    expect(headerPlan(['ietf'], [PER_USER, PER_IP])).toEqual({
      policy: '"per-user";q=10;w=2, "per-ip";q=1000;w=3600',
      members: ['"per-user";r=', '"per-ip";r='],
      xRateLimit: false,
      legacy: false,
    });
  });

  it('has no RateLimit-Policy without ietf', () => {
    expect(headerPlan(['x-ratelimit', 'legacy'], [PER_USER])).toEqual({
      policy: undefined,
      members: ['"per-user";r='],
      xRateLimit: true,
      legacy: true,
    });
  });

  it('quotes a name with " or \\ as an RFC 8941 sf-string', () => {
    const plan = headerPlan(['ietf'], [{ name: 'a"b\\c', rule: { rps: 1, burst: 1 } }]);
    expect(plan?.policy).toBe('"a\\"b\\\\c";q=1;w=1');
    expect(plan?.members).toEqual(['"a\\"b\\\\c";r=']);
  });
});

describe('rateLimitHeaders', () => {
  const headers = (
    families: Parameters<typeof headerPlan>[0],
    policies: DescribedPolicy[],
    decisions: RateLimitDecision[],
  ) => rateLimitHeaders(headerPlan(families, policies)!, decisions, NOW_MS);

  const ONE = [decision('per-user', { limit: 10, remaining: 7, resetAfter: 1, fullAfter: 3 })];

  it("'ietf': RateLimit-Policy and RateLimit", () => {
    expect(headers(['ietf'], [PER_USER], ONE)).toEqual([
      ['RateLimit-Policy', '"per-user";q=10;w=2'],
      ['RateLimit', '"per-user";r=7;t=1'],
    ]);
  });

  it("'x-ratelimit': limit, remaining and the Unix second it is full again, from nowMs rounded up", () => {
    expect(headers(['x-ratelimit'], [PER_USER], ONE)).toEqual([
      ['X-RateLimit-Limit', '10'],
      ['X-RateLimit-Remaining', '7'],
      ['X-RateLimit-Reset', String(NOW_S + 3)],
    ]);
    const plan = headerPlan(['x-ratelimit'], [PER_USER])!;
    expect(rateLimitHeaders(plan, ONE, 1_767_225_600_000)).toContainEqual(['X-RateLimit-Reset', '1767225603']);
  });

  it("'legacy': limit, remaining and the delta seconds until more quota", () => {
    expect(headers(['legacy'], [PER_USER], ONE)).toEqual([
      ['RateLimit-Limit', '10'],
      ['RateLimit-Remaining', '7'],
      ['RateLimit-Reset', '1'],
    ]);
  });

  it('sends every family listed, ietf first, then x-ratelimit, then legacy, whatever their order', () => {
    expect(headers(['legacy', 'x-ratelimit', 'ietf'], [PER_USER], ONE).map(([name]) => name)).toEqual([
      'RateLimit-Policy',
      'RateLimit',
      'X-RateLimit-Limit',
      'X-RateLimit-Remaining',
      'X-RateLimit-Reset',
      'RateLimit-Limit',
      'RateLimit-Remaining',
      'RateLimit-Reset',
    ]);
    expect(headers(['ietf', 'legacy'], [PER_USER], ONE).map(([name]) => name)).toEqual([
      'RateLimit-Policy',
      'RateLimit',
      'RateLimit-Limit',
      'RateLimit-Remaining',
      'RateLimit-Reset',
    ]);
  });

  it('gives one RateLimit member per policy, and the single-policy trios to the limiting one', () => {
    const decisions = [
      decision('per-user', { limit: 10, remaining: 8, resetAfter: 1, fullAfter: 1 }),
      decision('per-ip', { limit: 1000, remaining: 3, resetAfter: 4, fullAfter: 3590 }),
    ];
    expect(headers(['ietf', 'x-ratelimit', 'legacy'], [PER_USER, PER_IP], decisions)).toEqual([
      ['RateLimit-Policy', '"per-user";q=10;w=2, "per-ip";q=1000;w=3600'],
      ['RateLimit', '"per-user";r=8;t=1, "per-ip";r=3;t=4'],
      ['X-RateLimit-Limit', '1000'],
      ['X-RateLimit-Remaining', '3'],
      ['X-RateLimit-Reset', String(NOW_S + 3590)],
      ['RateLimit-Limit', '1000'],
      ['RateLimit-Remaining', '3'],
      ['RateLimit-Reset', '4'],
    ]);
  });

  it('describes the refusing policy in both trios when another admits with less left', () => {
    const decisions = [
      decision('per-user', { limit: 10, remaining: 0, resetAfter: 1, fullAfter: 2 }),
      refusal('per-ip', 9, { limit: 1000, resetAfter: 9, fullAfter: 3600 }),
    ];
    const sent = new Map(headers(['x-ratelimit', 'legacy'], [PER_USER, PER_IP], decisions));
    expect(sent.get('X-RateLimit-Limit')).toBe('1000');
    expect(sent.get('RateLimit-Limit')).toBe('1000');
    expect(sent.get('RateLimit-Reset')).toBe('9');
  });
});

describe('headers of a tiered policy', () => {
  const API: DescribedPolicy = {
    name: 'api',
    rule: { rps: 1, burst: 2 },
    tiers: {
      byName: new Map([
        ['free', { rule: { rps: 1, burst: 2 } }],
        ['pro', { rule: { rps: 100 / 3600, burst: 100 } }],
      ]),
    },
  };
  const plan = headerPlan(['ietf', 'x-ratelimit'], [PER_USER, API])!;

  it("plans each tier's RateLimit-Policy member, and keeps the plan of an untiered route as it was", () => {
    expect(plan.tiered).toEqual([
      '"per-user";q=10;w=2',
      new Map([
        ['free', '"api";q=2;w=2'],
        ['pro', '"api";q=100;w=3600'],
      ]),
    ]);
    expect(plan.policy).toBe('"per-user";q=10;w=2, "api";q=2;w=2');
    expect(headerPlan(['ietf'], [PER_USER])?.tiered).toBeUndefined();
    expect(headerPlan(['x-ratelimit'], [API])?.tiered).toBeUndefined();
  });

  it("sends the numbers of the tier each decision names, the default tier's when it names none", () => {
    const decisions = (tier: string | undefined) => [
      decision('per-user', { limit: 10, remaining: 9 }),
      decision('api', { limit: tier === 'pro' ? 100 : 2, remaining: 1, ...(tier === undefined ? {} : { tier }) }),
    ];
    expect(rateLimitHeaders(plan, decisions('pro'), NOW_MS).slice(0, 3)).toEqual([
      ['RateLimit-Policy', '"per-user";q=10;w=2, "api";q=100;w=3600'],
      ['RateLimit', '"per-user";r=9;t=1, "api";r=1;t=1'],
      ['X-RateLimit-Limit', '100'],
    ]);
    expect(rateLimitHeaders(plan, decisions('free'), NOW_MS)[0]).toEqual([
      'RateLimit-Policy',
      '"per-user";q=10;w=2, "api";q=2;w=2',
    ]);
    expect(rateLimitHeaders(plan, decisions(undefined), NOW_MS)[0]).toEqual([
      'RateLimit-Policy',
      '"per-user";q=10;w=2, "api";q=2;w=2',
    ]);
  });
});

describe('limiting', () => {
  it('without a refusal, picks the lowest remaining / limit', () => {
    const tight = decision('b', { limit: 100, remaining: 5 });
    expect(
      limiting([decision('a', { limit: 10, remaining: 1 }), tight, decision('c', { limit: 2, remaining: 2 })]),
    ).toBe(tight);
  });

  it('without a refusal, picks the first on ties', () => {
    const first = decision('a', { limit: 10, remaining: 5 });
    expect(limiting([first, decision('b', { limit: 100, remaining: 50 })])).toBe(first);
  });

  it('picks a refusing policy over an admitting one with a lower ratio', () => {
    const refused = refusal('b', 1, { limit: 1000, remaining: 900 });
    expect(limiting([decision('a', { limit: 10, remaining: 0 }), refused])).toBe(refused);
  });

  it('of several refusals, picks the one that frees up last', () => {
    const last = refusal('b', 30);
    expect(limiting([refusal('a', 2), last, refusal('c', 5)])).toBe(last);
  });

  it('of equal refusals, picks the first', () => {
    const first = refusal('a', 5);
    expect(limiting([first, refusal('b', 5)])).toBe(first);
  });

  it('puts a never-admittable refusal (retryAfter Infinity) first', () => {
    const never = refusal('b', Infinity);
    expect(limiting([refusal('a', 3600), never, refusal('c', 86_400)])).toBe(never);
  });
});

describe('windowSeconds', () => {
  const windows = [1, 2, 7, 10, 60, 90, 300, 3600, 86_400, 604_800];
  const limits = [...Array.from({ length: 2000 }, (_, i) => i + 1), 12_345, 1_000_000];

  it.each(windows)('gives back a window of %p s for every limit from 1 to 2000 per window', (window) => {
    const off = limits.filter((limit) => windowSeconds({ rps: limit / window, burst: limit }) !== window);
    expect(off).toEqual([]);
  });

  // limit / (limit / window) is a hair over the window for these: not a second more
  it.each([
    [65, 3600],
    [11, 60],
    [17, 7],
    [11, 86_400],
  ])('gives back the window for %p per %p s, where the division overshoots it', (limit, window) => {
    expect(limit / (limit / window)).toBeGreaterThan(window);
    expect(windowSeconds({ rps: limit / window, burst: limit })).toBe(window);
  });

  it('gives back 3600 for 1000 per 3600 s', () => {
    expect(windowSeconds({ rps: 1000 / 3600, burst: 1000 })).toBe(3600);
  });

  it.each([
    [{ rps: 3, burst: 10 }, 4],
    [{ rps: 4, burst: 10 }, 3],
    [{ rps: 10, burst: 15 }, 2],
    [{ rps: 0.001, burst: 1 }, 1000],
  ])('rounds %p up to %p s', (rule, seconds) => {
    expect(windowSeconds(rule)).toBe(seconds);
  });

  it.each([[{ rps: 10, burst: 5 }], [{ rps: 1e6, burst: 1 }]])('is at least 1 (%p)', (rule) => {
    expect(windowSeconds(rule)).toBe(1);
  });
});

describe('units and dimensions', () => {
  const RPM: DescribedPolicy = { name: 'rpm', rule: { rps: 20 / 60, burst: 20 } };
  const TPM: DescribedPolicy = { name: 'tpm', rule: { rps: 10_000 / 60, burst: 10_000 }, unit: 'tokens' };
  const GLOBAL: DescribedPolicy = { name: 'global', rule: { rps: 100 / 60, burst: 100 } };

  it("writes a unit other than requests as the draft's qu", () => {
    expect(headerPlan(['ietf'], [RPM, TPM])!.policy).toBe('"rpm";q=20;w=60, "tpm";q=10000;w=60;qu="tokens"');
  });

  it("'dimensions': limit, remaining and reset per unit, each from its policy closest to refusing", () => {
    const plan = headerPlan(['dimensions'], [GLOBAL, RPM, TPM])!;
    const headers = rateLimitHeaders(
      plan,
      [
        decision('global', { limit: 100, remaining: 90, fullAfter: 6 }),
        decision('rpm', { limit: 20, remaining: 3, fullAfter: 51 }),
        decision('tpm', { limit: 10_000, remaining: 2_500, fullAfter: 45 }),
      ],
      NOW_MS,
    );
    expect(headers).toEqual([
      ['x-ratelimit-limit-requests', '20'],
      ['x-ratelimit-remaining-requests', '3'],
      ['x-ratelimit-reset-requests', '51s'],
      ['x-ratelimit-limit-tokens', '10000'],
      ['x-ratelimit-remaining-tokens', '2500'],
      ['x-ratelimit-reset-tokens', '45s'],
    ]);
  });

  it.each([
    [0, '0s'],
    [45, '45s'],
    [60, '1m0s'],
    [360, '6m0s'],
    [3_605, '1h0m5s'],
  ])('says %i s as %s, as LLM APIs write a reset', (seconds, text) => {
    expect(durationText(seconds)).toBe(text);
  });
});
