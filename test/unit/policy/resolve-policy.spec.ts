import { parseWindow, resolvePolicy } from '../../../lib/policy/resolve-policy.js';
import { windowSeconds } from '../../../lib/headers/rate-limit-headers.js';

describe('parseWindow', () => {
  it.each([
    [60, 60],
    ['10s', 10],
    ['1m', 60],
    ['1h', 3600],
    ['1d', 86_400],
    ['500ms', 0.5],
    ['30', 30],
    [' 2m ', 120],
  ])('%p is %p seconds', (window, seconds) => {
    expect(parseWindow(window)).toBe(seconds);
  });

  it.each([0, -1, Infinity, NaN, '', 'm', '1w', '-1s', '1 h 2', '0s'])('refuses %p', (window) => {
    expect(parseWindow(window)).toBeUndefined();
  });
});

describe('resolvePolicy', () => {
  const resolve = (policy: object) => resolvePolicy(policy, 'CatsController.find', 'CatsController.find');

  it('fills in the defaults', () => {
    expect(resolve({ rps: 10, burst: 50 })).toEqual({
      name: 'CatsController.find',
      rule: { algorithm: 'token_bucket', rps: 10, burst: 50 },
      cost: 1,
      defaultCost: 1,
      key: undefined,
      scope: 'client',
      count: 'all',
      skipIf: undefined,
      adaptive: undefined,
      unit: 'requests',
    });
    expect(windowSeconds(resolve({ rps: 10, burst: 50 }).rule)).toBe(5);
    expect(resolve({ rps: 2.5 }).rule.burst).toBe(3);
    expect(resolve({ rps: 0.1 }).rule.burst).toBe(1);
    expect(resolve({ tokensPerSecond: 4, burst: 8 }).rule).toEqual({ algorithm: 'token_bucket', rps: 4, burst: 8 });
  });

  it.each([
    ['1h', 3_600_000],
    [90, 90_000],
    ['1.5s', 1_500],
    ['15m', 900_000],
    ['1ms', 1],
    ['365d', 365 * 86_400_000],
  ])('puts blockFor %p into the rule as %p ms, and nothing without it', (blockFor, blockMs) => {
    expect(resolve({ limit: 5, window: '15m', blockFor }).rule).toEqual({
      algorithm: 'token_bucket',
      rps: 5 / 900,
      burst: 5,
      blockMs,
    });
    expect('blockMs' in resolve({ limit: 5, window: '15m' }).rule).toBe(false);
  });

  it.each(['token_bucket', 'leaky_bucket', 'fixed_window', 'sliding_window_log', 'sliding_window_counter', 'gcra'])(
    'accepts %s, from rps 0.001 to 1e6 and windows up to a day',
    (algorithm) => {
      expect(resolve({ algorithm, rps: 0.001, burst: 1 }).rule).toEqual({ algorithm, rps: 0.001, burst: 1 });
      expect(resolve({ algorithm, rps: 1e6, burst: 1000 }).rule).toEqual({ algorithm, rps: 1e6, burst: 1000 });
      expect(windowSeconds(resolve({ algorithm, limit: 100_000, window: '1d' }).rule)).toBe(86_400);
    },
  );

  it('reads limit per window as rps = limit / window and burst = limit', () => {
    expect(resolve({ limit: 100, window: '1m', key: 'api-key' })).toMatchObject({
      rule: { rps: 100 / 60, burst: 100 },
      key: ['api-key'],
    });
    expect(windowSeconds(resolve({ limit: 100, window: '1m' }).rule)).toBe(60);
  });

  it("puts anchor 'first-request' into a fixed window's rule, a tier's too, and nothing for 'clock'", () => {
    expect(resolve({ algorithm: 'fixed_window', limit: 10, window: '1m', anchor: 'first-request' }).rule).toEqual({
      algorithm: 'fixed_window',
      rps: 10 / 60,
      burst: 10,
      anchor: 'first-request',
    });
    expect(resolve({ algorithm: 'fixed_window', limit: 10, window: '1m', anchor: 'clock' }).rule).toEqual({
      algorithm: 'fixed_window',
      rps: 10 / 60,
      burst: 10,
    });
    const tiered = resolve({
      tiers: { free: { algorithm: 'fixed_window', limit: 5, window: '1m', anchor: 'first-request' }, pro: { rps: 5 } },
      tier: 'user:plan',
      defaultTier: 'pro',
      blockFor: { duration: '1m', then: 'reset' },
    });
    expect(tiered.tiers!.rules.get('free')).toEqual({
      algorithm: 'fixed_window',
      rps: 5 / 60,
      burst: 5,
      blockMs: 60_000,
      blockResets: true,
      anchor: 'first-request',
    });
  });

  it("reads scope: 'client' by default, or 'route'", () => {
    expect(resolve({ rps: 1 }).scope).toBe('client');
    expect(resolve({ rps: 1, scope: 'client' }).scope).toBe('client');
    expect(resolve({ rps: 1, scope: 'route' }).scope).toBe('route');
  });

  it("resolves each tier to its rule, as a policy's own, and takes the default tier's as the policy's rule", () => {
    const planOf = () => 'pro';
    const resolved = resolve({
      name: 'api',
      key: 'api-key',
      tier: planOf,
      tiers: {
        free: { rps: 10, burst: 20 },
        pro: { algorithm: 'gcra', rps: 100 },
        enterprise: { algorithm: 'sliding_window_counter', limit: 100_000, window: '1h' },
      },
      defaultTier: 'free',
    });
    expect(resolved).toEqual({
      name: 'api',
      rule: { algorithm: 'token_bucket', rps: 10, burst: 20 },
      cost: 1,
      defaultCost: 1,
      key: ['api-key'],
      scope: 'client',
      tiers: {
        rules: new Map([
          ['free', { algorithm: 'token_bucket', rps: 10, burst: 20 }],
          ['pro', { algorithm: 'gcra', rps: 100, burst: 100 }],
          ['enterprise', { algorithm: 'sliding_window_counter', rps: 100_000 / 3600, burst: 100_000 }],
        ]),
        source: planOf,
        defaultTier: 'free',
      },
      count: 'all',
      skipIf: undefined,
      adaptive: undefined,
      unit: 'requests',
    });
    expect(resolve({ rps: 1 })).not.toHaveProperty('tiers');
  });

  it('gives a policy that settles a debt on every rule (its maxDebt, else each rule its burst), and a unit', () => {
    const settle = (result: { tokens: number }) => result.tokens;
    const resolved = resolve({ limit: 1_000, window: '1m', unit: 'Tokens', cost: 0, settle });
    expect(resolved.rule).toEqual({ algorithm: 'token_bucket', rps: 1_000 / 60, burst: 1_000, debt: 1_000 });
    expect(resolved.settles).toEqual({ result: settle, everyMs: undefined });
    expect(resolved.unit).toBe('tokens');
    expect(resolved.cost).toBe(0);
    const tiered = resolve({
      tier: 'user:plan',
      tiers: { free: { limit: 100, window: '1m' }, pro: { limit: 5_000, window: '1m' } },
      defaultTier: 'free',
      settleEvery: '10s',
    });
    expect([...tiered.tiers!.rules.values()].map((rule) => rule.debt)).toEqual([100, 5_000]);
    expect(tiered.settles).toEqual({ result: undefined, everyMs: 10_000 });
    expect(resolve({ limit: 100, window: '1m', maxDebt: 0 }).rule.debt).toBe(0);
    expect(resolve({ limit: 100, window: '1m' })).not.toHaveProperty('settles');
    expect(resolve({ limit: 100, window: '1m' }).rule).not.toHaveProperty('debt');
  });

  it.each([
    [{ duration: '15m' }, { blockMs: 900_000 }],
    [{ duration: 90, then: 'keep' }, { blockMs: 90_000 }],
    [
      { duration: '1h', then: 'reset' },
      { blockMs: 3_600_000, blockResets: true },
    ],
  ] as const)('puts blockFor %p into the rule as %p', (blockFor, block) => {
    expect(resolve({ limit: 5, window: '15m', blockFor }).rule).toEqual({
      algorithm: 'token_bucket',
      rps: 5 / 900,
      burst: 5,
      ...block,
    });
  });

  it("gives every tier of a tiered policy its blockFor's reset", () => {
    const resolved = resolve({
      tier: 'user:plan',
      tiers: { free: { rps: 1 }, pro: { algorithm: 'sliding_window_log', limit: 10, window: '1m' } },
      defaultTier: 'free',
      blockFor: { duration: '10m', then: 'reset' },
    });
    expect([...resolved.tiers!.rules.values()].map(({ blockMs, blockResets }) => [blockMs, blockResets])).toEqual([
      [600_000, true],
      [600_000, true],
    ]);
  });

  it('gives every tier of a tiered policy its blockFor', () => {
    const resolved = resolve({
      tier: 'user:plan',
      tiers: { free: { rps: 1 }, pro: { limit: 10, window: '1m' } },
      defaultTier: 'free',
      blockFor: '10m',
    });
    expect(resolved.rule).toEqual({ algorithm: 'token_bucket', rps: 1, burst: 1, blockMs: 600_000 });
    expect([...resolved.tiers!.rules.values()].map((rule) => rule.blockMs)).toEqual([600_000, 600_000]);
  });

  it('checks every tier against the cost, naming the tier', () => {
    const tiered = { tier: 'user:plan', defaultTier: 'free', cost: 'header:x-weight', defaultCost: 4 } as const;
    expect(resolve({ ...tiered, tiers: { free: { rps: 1, burst: 4 } } }).tiers?.rules.get('free')?.burst).toBe(4);
    expect(() => resolve({ ...tiered, tiers: { free: { rps: 1, burst: 4 }, tiny: { rps: 1, burst: 3 } } })).toThrow(
      'Invalid @RateLimit policy on CatsController.find: tier "tiny": "defaultCost" 4 is more than "burst" 3, so every request without a usable cost would be refused; lower "defaultCost" or raise "burst"',
    );
  });

  it('takes a limit of a quota or of concurrency up to 2^53 - 1, where a count still moves by one token', () => {
    const max = Number.MAX_SAFE_INTEGER;
    expect(resolve({ algorithm: 'quota', limit: max, period: 'month' }).rule.burst).toBe(max);
    expect(resolve({ algorithm: 'concurrency', limit: max, lease: '5m' }).rule.burst).toBe(max);
    expect(() => resolve({ algorithm: 'quota', limit: max + 1, period: 'month' })).toThrow(
      '"limit" must be at most 9007199254740991 (Number.MAX_SAFE_INTEGER)',
    );
  });

  it.each([
    [{ rps: 1, tokensPerSecond: 2 }, '"rps" and "tokensPerSecond" are the same setting; give one'],
    [{}, 'give "rps" (and "burst") or "limit" and "window"'],
    [{ limit: 5 }, `"limit" needs a "window" such as '1m'`],
    [{ limit: 5, window: '1m', burst: 5 }, '"burst" goes with "rps"; with "limit" and "window" the burst is the limit'],
    [
      { rps: 1, cost: 'body:weight' },
      `"cost" must be a positive number, 'header:<name>', 'query:<name>' or a function (0 too on a policy that settles), got "body:weight"`,
    ],
    [
      { rps: 1, cost: 0 },
      `"cost" must be a positive number, 'header:<name>', 'query:<name>' or a function (0 too on a policy that settles), got 0`,
    ],
    [{ rps: 1, defaultCost: -2 }, '"defaultCost" must be a positive number, got -2'],
    [
      { rps: 1, key: 'cookie' },
      `"key" must be 'ip', 'user', 'api-key', 'header:<name>', a function, or a non-empty list of those, got "cookie"`,
    ],
    [
      { rps: 1, key: [] },
      `"key" must be 'ip', 'user', 'api-key', 'header:<name>', a function, or a non-empty list of those, got []`,
    ],
    [
      { rps: 1, name: 'a{b}' },
      '"name" must be a string of 1 to 64 visible ASCII characters, without spaces or braces, got "a{b}"',
    ],
    [
      { rps: 1, name: '' },
      '"name" must be a string of 1 to 64 visible ASCII characters, without spaces or braces, got ""',
    ],
    [{ rps: Infinity }, '"rps" must be a positive number (tokens per second), got Infinity'],
    [
      { algorithm: 'fixed_window', rps: 1e6, burst: 1 },
      '"fixed_window" counts in windows of whole milliseconds, and burst / rps = 1 / 1000000 s is under 1 ms; lower "rps" or raise "burst"',
    ],
    [
      { algorithm: 'sliding_window_log', limit: 10, window: '0.5ms' },
      '"sliding_window_log" counts in windows of whole milliseconds, and burst / rps = 10 / 20000 s is under 1 ms; lower "rps" or raise "burst"',
    ],
  ])('refuses %p', (policy, problem) => {
    expect(() => resolve(policy)).toThrow(`Invalid @RateLimit policy on CatsController.find: ${problem}`);
  });
});
