import { jest } from '@jest/globals';
import { Logger } from '@nestjs/common';
import fc from 'fast-check';
import { ALGORITHMS, type AlgorithmModel, type Held } from '../../../lib/algorithms/algorithm.types.js';
import type { FixedWindowState } from '../../../lib/algorithms/fixed-window.js';
import type { SlidingWindowCounterState } from '../../../lib/algorithms/sliding-window-counter.js';
import type { SlidingWindowLogState } from '../../../lib/algorithms/sliding-window-log.js';
import { decideAll, MODELS, modelOf } from '../../../lib/algorithms/decide.js';
import type { RateLimitPolicy } from '../../../lib/policy/policy.types.js';
import { resolveOptions } from '../../../lib/rate-limit-options.js';
import { MemoryStore } from '../../../lib/stores/memory/memory.store.js';
import type { RateLimitDecision, RateLimitStore } from '../../../lib/stores/rate-limit-store.interface.js';
import { CASE_EPOCH, ruleOf } from '../../cases/index.js';
import { StandaloneLimiter } from '../../support/standalone-limiter.js';

/** What a state lets through: remaining and the wait for every whole need. */
function capacity(algorithm: (typeof ALGORITHMS)[number], state: Held, burst: number) {
  const model = MODELS[algorithm];
  const rule = ruleOf(algorithm, 2, burst);
  return {
    remaining: model.remaining(state, rule),
    waits: Array.from({ length: burst }, (_, i) => model.waitMs(state, rule, i + 1)),
  };
}

describe.each(ALGORITHMS.map((algorithm) => [algorithm]))('%s refund', (algorithm) => {
  const burst = 6;
  const rule = ruleOf(algorithm, 2, burst);
  const model = modelOf(rule);

  it('given back at once, a charge leaves the bucket as it was before, after any history', () => {
    const history = fc.array(
      fc.record({ after: fc.integer({ min: 0, max: 2_000 }), cost: fc.integer({ min: 1, max: 3 }) }),
      {
        maxLength: 12,
      },
    );
    fc.assert(
      fc.property(history, fc.integer({ min: 1, max: 3 }), (steps, cost) => {
        let state: Held | undefined;
        let now = CASE_EPOCH;
        for (const step of steps) {
          now += step.after;
          const verdict = decideAll([{ state, rule, cost: step.cost }], now, true);
          if (verdict.allowed) state = verdict.next[0];
        }
        const before = model.current(state, now, rule);
        const verdict = decideAll([{ state, rule, cost }], now, true);
        fc.pre(verdict.allowed);
        const charged = verdict.next[0];
        const refunded = model.refund(model.current(charged, now, rule), rule, cost, charged.at);
        // equal, up to the rounding of a fractional backlog or tokens (x + c - c): 1 ms at most
        const [got, want] = [capacity(algorithm, refunded, burst), capacity(algorithm, before, burst)];
        expect(got.remaining).toBe(want.remaining);
        got.waits.forEach((wait, i) => expect(Math.abs(wait - want.waits[i])).toBeLessThanOrEqual(1));
      }),
      { numRuns: 300 },
    );
  });

  it('never gives back more than the charge took, nor past a full bucket', () => {
    const charged = model.charge(model.current(undefined, CASE_EPOCH, rule), rule, 2);
    // a refund of more than was charged, and a second refund of the same charge
    const once = model.refund(charged, rule, 5, charged.at);
    const twice = model.refund(once, rule, 2, charged.at);
    expect(model.remaining(once, rule)).toBe(burst);
    expect(model.remaining(twice, rule)).toBe(burst);
  });
});

describe('refund of a charge whose window has ended', () => {
  it('fixed_window gives nothing back in the next window', () => {
    const rule = ruleOf('fixed_window', 2, 4); // window 2 s
    const model = MODELS.fixed_window as AlgorithmModel<FixedWindowState>;
    const charged = model.charge(model.current(undefined, CASE_EPOCH, rule), rule, 3);
    const later = model.current(
      model.charge(model.current(charged, CASE_EPOCH + 2_000, rule), rule, 1),
      CASE_EPOCH + 2_000,
      rule,
    );
    expect(model.remaining(model.refund(later, rule, 3, charged.at), rule)).toBe(3);
  });

  it('an anchored fixed_window gives nothing back to a window that started after the charge', () => {
    const rule = { ...ruleOf('fixed_window', 2, 4), anchor: 'first-request' as const }; // windows of 2 s
    const model = MODELS.fixed_window as AlgorithmModel<FixedWindowState>;
    // [epoch + 1.9 s, epoch + 3.9 s), off the clock's 2 s grid: the charge comes back while it lasts
    const charged = model.charge(model.current(undefined, CASE_EPOCH + 1_900, rule), rule, 3);
    expect(model.remaining(model.refund(charged, rule, 3, charged.at), rule)).toBe(4);
    const next = model.charge(model.current(charged, CASE_EPOCH + 3_900, rule), rule, 1);
    expect(next.start).toBe(CASE_EPOCH + 3_900);
    expect(model.remaining(model.refund(next, rule, 3, charged.at), rule)).toBe(3);
  });

  it('sliding_window_counter gives it back from the previous window, then not at all', () => {
    const rule = ruleOf('sliding_window_counter', 2, 4); // window 2 s
    const model = MODELS.sliding_window_counter as AlgorithmModel<SlidingWindowCounterState>;
    const charged = model.charge(model.current(undefined, CASE_EPOCH, rule), rule, 3);
    const next = model.current(charged, CASE_EPOCH + 2_000, rule);
    expect(next.previous).toBe(3);
    expect(model.refund(next, rule, 3, charged.at)).toMatchObject({ previous: 0, count: 0 });
    const gone = model.current(charged, CASE_EPOCH + 4_000, rule);
    expect(model.refund(gone, rule, 3, charged.at)).toEqual(gone);
  });

  it('sliding_window_log drops only entries taken at the charge time', () => {
    const rule = ruleOf('sliding_window_log', 2, 4);
    const model = MODELS.sliding_window_log as AlgorithmModel<SlidingWindowLogState>;
    const first = model.charge(model.current(undefined, CASE_EPOCH, rule), rule, 1);
    const second = model.charge(model.current(first, CASE_EPOCH + 10, rule), rule, 2);
    expect(model.refund(second, rule, 2, CASE_EPOCH + 10)).toMatchObject({ times: [CASE_EPOCH] });
  });
});

describe('RateLimiterService.refund: a decision is given back at most once', () => {
  const down = async (): Promise<RateLimitDecision[]> => {
    throw new Error('connection refused');
  };
  /** A store that cannot decide: with failMode 'local', the in-process limiter decides instead. */
  const failing: RateLimitStore = {
    consume: down,
    peek: down,
    reset: async () => undefined,
    refund: async () => undefined,
  };
  const stores: Array<[string, () => RateLimitStore, 'open' | 'local']> = [
    ['the memory store', () => new MemoryStore({ clock: () => CASE_EPOCH }), 'open'],
    ["failMode 'local' (the in-process limiter)", () => failing, 'local'],
  ];

  describe.each(stores)('on %s', (_name, makeStore, failMode) => {
    let limiter: StandaloneLimiter;
    beforeEach(() => {
      jest.spyOn(Logger.prototype, 'error').mockImplementation(() => undefined);
      limiter = new StandaloneLimiter(resolveOptions({ failMode }), makeStore());
    });
    afterEach(async () => {
      await limiter.onApplicationShutdown();
      jest.restoreAllMocks();
    });

    it.each(['token_bucket', 'fixed_window', 'sliding_window_log'] as const)(
      '%s: one decision refunded 5 times gives back one request',
      async (algorithm) => {
        const policy: RateLimitPolicy = { name: 'exports', algorithm, rps: 0.001, burst: 5 };
        const first = await limiter.consume('user:1', policy);
        for (let i = 0; i < 4; i++) await limiter.consume('user:1', policy);
        for (let i = 0; i < 5; i++) await limiter.refund(first);
        const admitted = [];
        for (let i = 0; i < 3; i++) admitted.push((await limiter.consume('user:1', policy))[0].allowed);
        expect(admitted).toEqual([true, false, false]);
      },
    );

    it('a leaky_bucket turn given back when its wait ends early is not given back again by a refund', async () => {
      const queue: RateLimitPolicy = { name: 'queue', algorithm: 'leaky_bucket', rps: 0.001, burst: 3 };
      await limiter.consume('user:1', queue);
      const queued = await limiter.consume('user:1', queue);
      await limiter.consume('user:1', queue);
      await expect(limiter.wait(queued, AbortSignal.abort())).rejects.toBeDefined();
      await limiter.refund(queued);
      expect((await limiter.peek('user:1', queue))[0].remaining).toBe(1);
    });
  });
});
