import { resolveOptions } from '../../lib/rate-limit-options.js';
import { MemoryStore } from '../../lib/stores/memory/memory.store.js';
import { RateLimitStoreError } from '../../lib/stores/rate-limit-store.error.js';
import { StandaloneLimiter } from '../support/standalone-limiter.js';

/**
 * What `RateLimiterService` makes of its arguments before anything reaches a store: a list of
 * policies with one bucket each, and a cost that is a number of tokens. Bad arguments reject the
 * call; nothing is thrown synchronously and nothing is charged.
 */
describe('RateLimiterService arguments (memory store, clock pinned)', () => {
  let now: number;
  let store: MemoryStore;
  let limiter: StandaloneLimiter;

  beforeEach(async () => {
    now = 1_767_225_600_000;
    store = new MemoryStore({ clock: () => now });
    limiter = new StandaloneLimiter(resolveOptions({}), store);
  });
  afterEach(async () => {
    await limiter.onApplicationShutdown();
    await store.close();
  });

  const COST = 'must be a finite number > 0 (the tokens the request takes)';

  it('refuses two unnamed policies (both "default") instead of letting them share one bucket', async () => {
    const policies = [
      { limit: 5, window: '1m' },
      { limit: 100, window: '1d' },
    ];
    const admitted: boolean[] = [];
    for (let i = 0; i < 30; i++) {
      const decisions = await limiter.consume('user:42', policies).catch(() => undefined);
      admitted.push(decisions?.every((decision) => decision.allowed) ?? false);
    }
    // one bucket under two rules admitted all 30; each policy with its own name admits 5
    expect(admitted.filter(Boolean)).toHaveLength(0);
    await expect(limiter.consume('user:42', policies)).rejects.toThrow(
      'Invalid @RateLimit policy on RateLimiterService: two policies are named "default"; give each policy its own "name"',
    );
    await expect(limiter.peek('user:42', policies)).rejects.toThrow('two policies are named "default"');
    await expect(limiter.reset('user:42', policies)).rejects.toThrow('two policies are named "default"');
    expect(store.size).toBe(0);
  });

  it('admits 5 of 30 when the two policies have their own names', async () => {
    const policies = [
      { name: 'per-minute', limit: 5, window: '1m' },
      { name: 'per-day', limit: 100, window: '1d' },
    ];
    let admitted = 0;
    for (let i = 0; i < 30; i++)
      if ((await limiter.consume('user:42', policies)).every((decision) => decision.allowed)) admitted++;
    expect(admitted).toBe(5);
  });

  it.each<[string, unknown, ErrorConstructor, string]>([
    ['null', null, TypeError, 'null'],
    ["''", '', TypeError, '""'],
    ["'abc'", 'abc', TypeError, '"abc"'],
    ["'2' (a string)", '2', TypeError, '"2"'],
    ['{}', {}, TypeError, '{}'],
    ['NaN', NaN, RangeError, 'NaN'],
    ['0', 0, RangeError, '0'],
    ['-1', -1, RangeError, '-1'],
    ['Infinity', Infinity, RangeError, 'Infinity'],
  ])('rejects a cost of %s before it reaches the store', async (_name, cost, type, shown) => {
    const policy = { name: 'p', rps: 1, burst: 5 };
    for (const [method, call] of [
      ['consume', () => limiter.consume('user:42', policy, cost as number)],
      ['peek', () => limiter.peek('user:42', policy, cost as number)],
    ] as const) {
      let promise!: Promise<unknown>;
      expect(() => (promise = call())).not.toThrow();
      const error = await promise.then(
        () => undefined,
        (reason: unknown) => reason,
      );
      expect(error).toBeInstanceOf(type);
      expect(error).not.toBeInstanceOf(RateLimitStoreError);
      expect((error as Error).message).toBe(
        `Invalid argument to RateLimiterService.${method}: "cost" ${COST}, got ${shown}`,
      );
    }
    expect(store.size).toBe(0);
    // the bucket is untouched: a good cost still finds it full
    expect((await limiter.consume('user:42', policy, 1))[0].remaining).toBe(4);
  });

  it("decides a tiered policy in the tier it is given, the default tier's for an unknown one or none, the same buckets as the guard's", async () => {
    const api = {
      name: 'api',
      tier: 'user:plan',
      tiers: { free: { limit: 2, window: '1m' }, pro: { limit: 5, window: '1m' } },
      defaultTier: 'free',
    } as const;
    const global = { name: 'global', limit: 100, window: '1m' };
    const admitted = async (tier: string | undefined, times: number) => {
      const decisions = [];
      for (let i = 0; i < times; i++) decisions.push(await limiter.consume('user:42', [api, global], 1, tier));
      return decisions.filter((pair) => pair.every((decision) => decision.allowed)).length;
    };
    expect(await admitted('pro', 7)).toBe(5);
    expect(await admitted('free', 3)).toBe(2);
    expect(await admitted('gold', 1)).toBe(0);
    expect(await admitted(undefined, 1)).toBe(0);
    const [pro, untiered] = await limiter.peek('user:42', [api, global], 1, 'pro');
    expect(pro).toMatchObject({ allowed: false, policy: 'api', tier: 'pro', limit: 5 });
    expect(untiered).not.toHaveProperty('tier');
    // reset forgets the bucket of the tier given, and only that one
    await limiter.reset('user:42', api, 'pro');
    expect(await admitted('pro', 1)).toBe(1);
    expect(await admitted('free', 1)).toBe(0);
  });

  it('takes a fractional cost', async () => {
    expect((await limiter.consume('user:42', { name: 'p', rps: 1, burst: 5 }, 0.5))[0]).toMatchObject({
      allowed: true,
      remaining: 4,
    });
  });

  it('rejects, never throws synchronously, for a bad policy or identity', async () => {
    const calls: Array<[string, () => Promise<unknown>, string]> = [
      [
        'consume',
        () => limiter.consume('user:42', { rps: 0 }),
        'Invalid @RateLimit policy on RateLimiterService: "rps" must be a positive number (tokens per second), got 0',
      ],
      [
        'peek',
        () => limiter.peek('user:42', null as never),
        'Invalid @RateLimit policy on RateLimiterService: a policy must be an object such as { rps: 10, burst: 20 }, got null',
      ],
      [
        'reset',
        () => limiter.reset('user:42', [{ rps: 1, brust: 5 } as never]),
        'Invalid @RateLimit policy on RateLimiterService: "brust" is not a policy field',
      ],
      [
        'consume',
        () => limiter.consume(42 as never, { rps: 1 }),
        `Invalid argument to RateLimiterService.consume: "identity" must be a string such as 'user:42', got 42`,
      ],
    ];
    for (const [, call, message] of calls) {
      let promise!: Promise<unknown>;
      expect(() => (promise = call())).not.toThrow();
      await expect(promise).rejects.toThrow(message);
    }
  });
});

/**
 * Every store goes through its interface: a subclass of `MemoryStore` that overrides `consume`
 * and `peek` (to count, to log, to decide differently) is the one that decides.
 */
describe('RateLimiterService with a subclass of MemoryStore', () => {
  class CountingStore extends MemoryStore {
    readonly calls: string[] = [];
    override consume(requests: Parameters<MemoryStore['consume']>[0]) {
      this.calls.push('consume');
      return super.consume(requests);
    }
    override peek(requests: Parameters<MemoryStore['peek']>[0]) {
      this.calls.push('peek');
      return super.peek(requests);
    }
    override refund(decisions: Parameters<MemoryStore['refund']>[0]) {
      this.calls.push('refund');
      return super.refund(decisions);
    }
  }

  it("calls the subclass's consume, peek and refund", async () => {
    const store = new CountingStore({ clock: () => 1_767_225_600_000 });
    const limiter = new StandaloneLimiter(resolveOptions({}), store);
    try {
      const leaky = { name: 'queue', algorithm: 'leaky_bucket' as const, rps: 1, burst: 5 };
      await limiter.consume('user:1', leaky);
      const [queued] = await limiter.consume('user:1', leaky);
      await limiter.peek('user:1', leaky);
      // the second request waits its turn; its client goes away, and the turn is given back
      await expect(limiter.wait([queued], AbortSignal.abort())).rejects.toBeDefined();
      expect(store.calls).toEqual(['consume', 'consume', 'peek', 'refund']);
    } finally {
      await limiter.onApplicationShutdown();
      await store.close();
    }
  });
});
