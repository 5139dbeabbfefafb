import fc from 'fast-check';
import { decideAll } from '../../../lib/algorithms/decide.js';
import { slidingWindowLog, type SlidingWindowLogState } from '../../../lib/algorithms/sliding-window-log.js';
import { CASE_EPOCH, ruleOf } from '../../cases/index.js';

/** 50,000 an hour: one entry leaves the window every 72 ms, and one request comes every 72 ms. */
const HOURLY = ruleOf('sliding_window_log', 50_000 / 3_600, 50_000);

describe('sliding window log: work per request', () => {
  it('copies each entry about once, not the whole log per request: 150,000 requests at 50,000 an hour on one key', () => {
    const requests = 150_000;
    // Entries written into a fresh array, over the whole run. Copying the log on every charge or
    // expiry comes to about 50,000 per request; the bound is one per request.
    const bound = requests;
    let state: SlidingWindowLogState | undefined;
    let copied = 0;
    let admitted = 0;
    for (let i = 0; i < requests && copied <= bound; i++) {
      const verdict = decideAll([{ state, rule: HOURLY, cost: 1 }], CASE_EPOCH + i * 72, true);
      const next = verdict.next[0] as SlidingWindowLogState;
      if (next.times !== state?.times) copied += next.times.length;
      if (verdict.allowed) admitted++;
      state = next;
    }
    expect(copied).toBeLessThanOrEqual(bound);
    // the log is full from the 50,000th request on, and each request finds the oldest entry gone
    expect(admitted).toBe(requests);
    expect(slidingWindowLog.remaining(state!, HOURLY)).toBe(0);
  });

  it('still reads every state it ever made as it was made, whichever states later requests started from', () => {
    const rule = ruleOf('sliding_window_log', 2, 6); // 6 per 3 s
    /** What a state lets through, from the outside: remaining and the wait for every whole need. */
    const capacity = (state: SlidingWindowLogState) => ({
      remaining: slidingWindowLog.remaining(state, rule),
      waits: Array.from({ length: rule.burst }, (_, i) => slidingWindowLog.waitMs(state, rule, i + 1)),
    });
    const op = fc.record({
      from: fc.nat(),
      after: fc.integer({ min: 0, max: 1_500 }),
      cost: fc.integer({ min: 1, max: 3 }),
      refund: fc.boolean(),
    });
    fc.assert(
      fc.property(fc.array(op, { minLength: 1, maxLength: 40 }), (ops) => {
        const first = slidingWindowLog.current(undefined, CASE_EPOCH, rule);
        const made = [{ state: first, seen: capacity(first) }];
        for (const { from, after, cost, refund } of ops) {
          // any earlier state, not only the latest: a branch must not see another's entries
          const base = made[from % made.length].state;
          const now = base.at + after;
          const current = slidingWindowLog.current(base, now, rule);
          let next = current;
          if (refund) next = slidingWindowLog.refund(current, rule, cost, now);
          else if (slidingWindowLog.waitMs(current, rule, cost) === 0)
            next = slidingWindowLog.charge(current, rule, cost);
          for (const state of [current, next]) made.push({ state, seen: capacity(state) });
        }
        for (const [i, { state, seen }] of made.entries()) expect({ i, ...capacity(state) }).toEqual({ i, ...seen });
      }),
      { numRuns: 500 },
    );
  });
});
