import fc from 'fast-check';
import {
  ALGORITHMS,
  RELEASED,
  type Algorithm,
  type Held,
  type Outcome,
  type Rule,
  WINDOW_ALGORITHMS,
} from '../../../../lib/algorithms/algorithm.types.js';
import { decideAll } from '../../../../lib/algorithms/decide.js';
import { waitForCost } from '../../../../lib/stores/redis/wait-for-cost.js';
import { CASE_EPOCH, MONTHLY_BILLION_RPS, ruleOf } from '../../../cases/index.js';

/** A request of `cost`, decided (and charged when admitted) at `at`, ms after `CASE_EPOCH`. */
interface Step {
  at: number;
  cost: number;
}

/** What `waitForCost` says after a charge of `cost`, and the first whole ms after it at which the model admits that request again. */
function judge(
  rule: Rule,
  cost: number,
  charged: Held,
  outcome: Outcome,
): { wait: number | undefined; admitsAfter: number } {
  const admits = (ms: number) => decideAll([{ state: charged, rule, cost }], charged.at + ms, false).allowed;
  // from a little before the model's own wait: floating-point rounding may admit up to 1 ms earlier
  let admitsAfter = Math.max(0, decideAll([{ state: charged, rule, cost }], charged.at, false).outcomes[0].retryMs - 2);
  while (!admits(admitsAfter)) admitsAfter++;
  return { wait: waitForCost(rule, cost, outcome), admitsAfter };
}

/** `judge` after `steps`, decided in turn; the last must be admitted. */
function after(rule: Rule, steps: readonly Step[]): { wait: number | undefined; admitsAfter: number } {
  let state: Held | undefined;
  for (const [i, { at, cost }] of steps.entries()) {
    const verdict = decideAll([{ state, rule, cost }], CASE_EPOCH + at, true);
    if (verdict.allowed) state = verdict.next[0];
    if (i === steps.length - 1) {
      if (!verdict.allowed) throw new Error('the last step must be admitted');
      return judge(rule, cost, verdict.next[0], verdict.outcomes[0]);
    }
  }
  throw new Error('no steps');
}

describe('waitForCost (pure, after a charge)', () => {
  const buckets: Algorithm[] = ['token_bucket', 'gcra', 'leaky_bucket'];

  it.each(buckets)('%s: times a cost of several tokens by the refill of all of them, not of one', (algorithm) => {
    // 100 tokens at 20/s: 5 s, where one token takes 50 ms
    expect(after(ruleOf(algorithm, 20, 100), [{ at: 0, cost: 100 }])).toEqual({ wait: 5_000, admitsAfter: 5_000 });
    // 2.5 tokens at 2/s: 1.25 s; the half token left after the second is no use
    expect(
      after(ruleOf(algorithm, 2, 5), [
        { at: 0, cost: 2.5 },
        { at: 0, cost: 2.5 },
      ]),
    ).toEqual({ wait: 1_250, admitsAfter: 1_250 });
    // 1.75 left after 1.5 s of refill at 0.5/s: 1.25 tokens more take 2.5 s
    expect(
      after(ruleOf(algorithm, 0.5, 5), [
        { at: 0, cost: 1 },
        { at: 1_500, cost: 3 },
      ]),
    ).toEqual({ wait: 2_500, admitsAfter: 2_500 });
  });

  it.each(buckets)('%s: times a cost in the fraction of a token past what is left', (algorithm) => {
    // 2.75 left: 2.25 fits at once
    expect(after(ruleOf(algorithm, 2, 5), [{ at: 0, cost: 2.25 }])).toEqual({ wait: 0, admitsAfter: 0 });
    // 2 left: 2.75 fits once 0.75 more is there, at 2/s in 375 ms (the next whole token comes in 500)
    expect(
      after(ruleOf(algorithm, 2, 5), [
        { at: 0, cost: 0.25 },
        { at: 0, cost: 2.75 },
      ]),
    ).toEqual({ wait: 375, admitsAfter: 375 });
  });

  it.each(buckets)('%s: never 2 ms past the admission where floating-point rounding would put it', (algorithm) => {
    // 42 tokens at 1000/3 per s are 126.00000000000001 ms, the token before them 3.0000000000000004 ms
    const third = after(ruleOf(algorithm, 1000 / 3, 573), [
      { at: 0, cost: 385 },
      { at: 898, cost: 265 },
    ]);
    // a cost 2^-52 over a token, after a backlog that drains to 2^-52 over a whole one
    const epsilon = after(ruleOf(algorithm, 0.001, 26), [
      { at: 0, cost: 25 },
      { at: 728, cost: 1 + 2 ** -52 },
    ]);
    for (const { wait = NaN, admitsAfter } of [third, epsilon]) {
      expect({ admitsAfter, wait, over: wait - admitsAfter }).toEqual({
        admitsAfter,
        wait,
        over: wait > admitsAfter ? 1 : 0,
      });
    }
  });

  it('times a fixed window by its end, and a sliding window log by the entries that must leave', () => {
    expect(
      after(ruleOf('fixed_window', 0.5, 5), [
        { at: 1_500, cost: 1 },
        { at: 1_500, cost: 3 },
      ]),
    ).toEqual({ wait: 8_500, admitsAfter: 8_500 });
    // the entry logged 1.5 s before leaves at 8.5 s, but a cost of 3 needs 2 of the 3 just logged to leave too
    expect(
      after(ruleOf('sliding_window_log', 0.5, 5), [
        { at: 0, cost: 1 },
        { at: 1_500, cost: 3 },
      ]),
    ).toEqual({ wait: 10_000, admitsAfter: 10_000 });
    // a cost of 2.5 takes 3 entries, of which 2 are left
    expect(after(ruleOf('sliding_window_log', 2, 5), [{ at: 0, cost: 2.5 }])).toEqual({
      wait: 2_500,
      admitsAfter: 2_500,
    });
    // a sliding window counter's whole burst waits until the window has slid past all of it
    expect(after(ruleOf('sliding_window_counter', 20, 100), [{ at: 0, cost: 100 }])).toEqual({
      wait: 10_000,
      admitsAfter: 10_000,
    });
  });

  it('does not time what the outcome cannot tell: a sliding window counter short of its burst, a fraction in a window', () => {
    expect(
      after(ruleOf('sliding_window_counter', 0.5, 5), [
        { at: 0, cost: 1 },
        { at: 1_500, cost: 3 },
      ]).wait,
    ).toBeUndefined();
    // 2.5 of 5 taken, `remaining` 2: 2.5 more fit at once, 2.6 not before the window's end
    expect(after(ruleOf('fixed_window', 2, 5), [{ at: 0, cost: 2.5 }]).wait).toBeUndefined();
  });

  it('tells of a slot (concurrency) only that it fits now: a slot comes back when a request gives it back', () => {
    const rule = ruleOf('concurrency', 2 / 60, 2);
    expect(after(rule, [{ at: 0, cost: 1 }]).wait).toBe(0);
    expect(
      after(rule, [
        { at: 0, cost: 1 },
        { at: 5, cost: 1 },
      ]).wait,
    ).toBeUndefined();
  });

  // a slot's wait is not a time (see the row above)
  it.each(ALGORITHMS.filter((algorithm) => !RELEASED.has(algorithm)).map((algorithm) => [algorithm]))(
    '%s: within 1 ms of the first instant the model admits the request again, on any history',
    (algorithm) => {
      const step = fc.record({
        after: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 3_000 })),
        cost: fc.oneof(
          fc.constantFrom(1, 2, 2.5, 0.1, 1 / 3, 10 / 3, 1 + 2 ** -52, 1 - 2 ** -53, 0.010000000000000002),
          fc.double({ min: 0.01, max: 300, noNaN: true }),
          fc.integer({ min: 1, max: 300 }),
        ),
      });
      const rate = fc.constantFrom(0.001, 0.3, 0.5, 2, 3, 7, 13.3, 20, 1000 / 3, 1e6 / 7, 1e6, MONTHLY_BILLION_RPS);
      const window = WINDOW_ALGORITHMS.has(algorithm);
      let timed = 0;
      fc.assert(
        fc.property(
          rate,
          fc.integer({ min: 1, max: 300 }),
          fc.array(step, { minLength: 1, maxLength: 20 }),
          (rps, burst, history) => {
            // windows of days make the search for the admission long, and find nothing new
            fc.pre(!window || burst / rps <= 10_000);
            const rule = ruleOf(algorithm, rps, burst);
            let state: Held | undefined;
            let now = CASE_EPOCH;
            for (const [n, { after, cost: asked }] of history.entries()) {
              now += after;
              const cost = Math.min(asked, burst);
              const verdict = decideAll([{ state, rule, cost }], now, true);
              if (!verdict.allowed) continue;
              state = verdict.next[0];
              const { wait, admitsAfter } = judge(rule, cost, state, verdict.outcomes[0]);
              // only a window's outcome may leave the wait untold
              expect({ n, told: wait !== undefined || window }).toEqual({ n, told: true });
              if (wait === undefined) continue;
              if (wait > 0) timed++;
              // a window exactly; a bucket 1 ms over at the most (`ROUNDING_MS` takes it off), under only by float rounding
              const over = window ? wait === admitsAfter : wait >= admitsAfter - 1 && wait <= admitsAfter + 1;
              expect({ n, admitsAfter, wait, over }).toEqual({ n, admitsAfter, wait, over: true });
            }
          },
        ),
        { numRuns: 300 },
      );
      // not vacuous: requests were timed to wait
      expect(timed).toBeGreaterThan(100);
    },
  );
});
