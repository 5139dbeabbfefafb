import type { Rule } from '../../lib/algorithms/algorithm.types.js';
import { type Case, keepAndReset } from './cases.js';

const fw = (rps: number, burst: number): Rule => ({ algorithm: 'fixed_window', rps, burst });
/** 10 per 10 s under a factor (`RateLimiterService.setScale`): its limit scaled, its window the same. */
const scaled = (limit: number): Rule => ({ ...fw(1, 10), limit });
/** A fixed window anchored at a key's first request (`anchor: 'first-request'`). */
const anchored = (rps: number, burst: number): Rule => ({ ...fw(rps, burst), anchor: 'first-request' });

/** 100000 tokens a day (a window of 86400 s). */
const PER_DAY = 100_000 / 86_400;

/**
 * The fixed window at fixed instants (see `index.ts`). Windows are aligned to the clock, and
 * `at: 0` starts one; a refused request waits until its window ends, and so does one more
 * token (`resetAfter`) and a full window (`fullAfter`).
 */
export const FIXED_WINDOW_CASES: Case[] = [
  {
    name: 'a fresh window admits the limit and then refuses until it ends',
    // 3 per 3 s window
    rule: fw(1, 3),
    steps: [
      { at: 0, expect: { allowed: true, remaining: 2, retryAfter: 0, resetAfter: 3, fullAfter: 3, delay: 0 } },
      { at: 1_000, expect: { allowed: true, remaining: 1, resetAfter: 2, fullAfter: 2 } },
      { at: 2_000, expect: { allowed: true, remaining: 0, resetAfter: 1, fullAfter: 1 } },
      { at: 2_000, expect: { allowed: false, remaining: 0, retryAfter: 1, resetAfter: 1, fullAfter: 1 } },
      // 1 ms before the window ends
      { at: 2_999, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
      { at: 3_000, expect: { allowed: true, remaining: 2, resetAfter: 3, fullAfter: 3 } },
    ],
  },
  {
    name: 'windows are aligned to the clock, not to the first request',
    // 10 per 10 s window
    rule: fw(1, 10),
    steps: [
      // the window [0 s, 10 s) ends 2.5 s later
      { at: 7_500, expect: { allowed: true, remaining: 9, resetAfter: 3, fullAfter: 3 } },
      { at: 9_999, cost: 9, expect: { allowed: true, remaining: 0, resetAfter: 1, fullAfter: 1 } },
      { at: 9_999, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
      { at: 10_000, expect: { allowed: true, remaining: 9, resetAfter: 10, fullAfter: 10 } },
      // 2.501 s left of [10 s, 20 s)
      { at: 17_499, expect: { allowed: true, remaining: 8, resetAfter: 3 } },
    ],
  },
  {
    name: 'twice the limit passes across a window boundary',
    // 10 per 5 s window
    rule: fw(2, 10),
    steps: [
      { at: 4_999, cost: 10, expect: { allowed: true, remaining: 0, fullAfter: 1 } },
      { at: 4_999, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
      // 1 ms later a new window: 20 tokens within 2 ms
      { at: 5_000, cost: 10, expect: { allowed: true, remaining: 0, fullAfter: 5 } },
      // 4.999 s to the end of [5 s, 10 s)
      { at: 5_001, expect: { allowed: false, remaining: 0, retryAfter: 5 } },
    ],
  },
  {
    name: 'a cost above what is left is refused and takes nothing',
    rule: fw(1, 10),
    steps: [
      { at: 0, cost: 8, expect: { allowed: true, remaining: 2, fullAfter: 10 } },
      { at: 1_000, cost: 3, expect: { allowed: false, remaining: 2, retryAfter: 9 } },
      { at: 1_000, cost: 2, expect: { allowed: true, remaining: 0 } },
      { at: 9_500, cost: 3, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
      { at: 10_000, cost: 3, expect: { allowed: true, remaining: 7 } },
    ],
  },
  {
    name: 'a cost above the limit can never pass and takes nothing',
    // 5 per 1 s window
    rule: fw(5, 5),
    steps: [
      { at: 0, cost: 6, expect: { allowed: false, remaining: 5, retryAfter: Infinity, resetAfter: 0, fullAfter: 0 } },
      { at: 0, cost: 5, expect: { allowed: true, remaining: 0, fullAfter: 1 } },
      { at: 500, cost: 6, expect: { allowed: false, remaining: 0, retryAfter: Infinity, resetAfter: 1 } },
    ],
  },
  {
    name: 'a clock that goes back into an earlier window stays in the stored one',
    // 2 per 2 s window
    rule: fw(1, 2),
    steps: [
      { at: 10_000, cost: 2, expect: { allowed: true, remaining: 0, fullAfter: 2 } },
      // held at the start of [10 s, 12 s): its end is 2 s away
      { at: 9_000, expect: { allowed: false, remaining: 0, retryAfter: 2 } },
      { at: 1_000, expect: { allowed: false, remaining: 0 } },
      { at: 11_999, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
      { at: 12_000, expect: { allowed: true, remaining: 1 } },
      // back into [10 s, 12 s), which was full: counted in [12 s, 14 s) instead
      { at: 11_000, expect: { allowed: true, remaining: 0 } },
      { at: 12_500, expect: { allowed: false, remaining: 0, retryAfter: 2 } },
      // [12 s, 14 s) holds 2 until it ends, whenever the clock was when they were taken
      { at: 13_500, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
    ],
  },
  {
    name: 'fractional rps with fractional costs',
    // 3 per 3 / 0.3 = 10 s window
    rule: fw(0.3, 3),
    steps: [
      { at: 0, cost: 1.5, expect: { allowed: true, remaining: 1, resetAfter: 10, fullAfter: 10 } },
      // 2.5 taken: half a token left, shown as 0
      { at: 0, cost: 1, expect: { allowed: true, remaining: 0 } },
      { at: 0, cost: 1, expect: { allowed: false, remaining: 0, retryAfter: 10 } },
      { at: 0, cost: 0.5, expect: { allowed: true, remaining: 0 } },
      { at: 9_000, cost: 0.5, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
      { at: 10_000, cost: 0.5, expect: { allowed: true, remaining: 2 } },
    ],
  },
  {
    name: '100000 a day',
    rule: fw(PER_DAY, 100_000),
    steps: [
      { at: 0, cost: 99_999, expect: { allowed: true, remaining: 1, resetAfter: 86_400, fullAfter: 86_400 } },
      // noon
      { at: 43_200_000, expect: { allowed: true, remaining: 0, resetAfter: 43_200, fullAfter: 43_200 } },
      { at: 43_200_000, expect: { allowed: false, remaining: 0, retryAfter: 43_200 } },
      { at: 86_399_999, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
      // the next day
      { at: 86_400_000, cost: 100_000, expect: { allowed: true, remaining: 0, fullAfter: 86_400 } },
    ],
  },
  {
    name: 'a very high rps: windows of 1 ms',
    // 1000 / 1e6 s = 1 ms
    rule: fw(1_000_000, 1_000),
    steps: [
      { at: 0, cost: 1_000, expect: { allowed: true, remaining: 0, resetAfter: 1, fullAfter: 1 } },
      { at: 0, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
      { at: 1, cost: 1_000, expect: { allowed: true, remaining: 0 } },
      { at: 1, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
      { at: 2, expect: { allowed: true, remaining: 999 } },
    ],
  },
  {
    name: 'a count written under a larger limit is the smaller limit when the limit is lowered',
    // 100 per 10 s, then 20 per 10 s: the same windows
    rule: fw(10, 100),
    steps: [
      { at: 0, cost: 100, expect: { allowed: true, remaining: 0, fullAfter: 10 } },
      // 100 taken is the whole of 20, not 80 more than it
      {
        at: 5_000,
        rule: fw(2, 20),
        expect: { allowed: false, remaining: 0, retryAfter: 5, resetAfter: 5, fullAfter: 5 },
      },
      { at: 10_000, rule: fw(2, 20), expect: { allowed: true, remaining: 19, fullAfter: 10 } },
    ],
  },
  {
    name: 'a factor scales the limit and keeps the window and its count, whatever factor each instance has',
    // 10 per 10 s, decided by instances at factors 1, 0.5 and 0.75
    rule: fw(1, 10),
    steps: [
      { at: 0, expect: { allowed: true, limit: 10, remaining: 9, fullAfter: 10 } },
      // at 0.5: 5 per window, of which 1 is taken; the window still ends at 10 s
      { at: 1_000, rule: scaled(5), expect: { allowed: true, limit: 5, remaining: 3, resetAfter: 9, fullAfter: 9 } },
      { at: 2_000, rule: scaled(5), cost: 3, expect: { allowed: true, limit: 5, remaining: 0 } },
      { at: 2_000, rule: scaled(5), expect: { allowed: false, limit: 5, remaining: 0, retryAfter: 8 } },
      // the instance at 1 sees the same count: 5 of 10
      { at: 2_000, expect: { allowed: true, limit: 10, remaining: 4 } },
      // at 0.75: 7.5 per window, shown as 7; 6 taken, then 7, then 7.5
      { at: 3_000, rule: scaled(7.5), expect: { allowed: true, limit: 7, remaining: 0 } },
      { at: 3_000, rule: scaled(7.5), cost: 0.5, expect: { allowed: true, limit: 7, remaining: 0 } },
      { at: 3_000, rule: scaled(7.5), cost: 0.5, expect: { allowed: false, remaining: 0, retryAfter: 7 } },
      { at: 10_000, rule: scaled(5), expect: { allowed: true, limit: 5, remaining: 4, resetAfter: 10, fullAfter: 10 } },
    ],
  },
  {
    name: 'under a factor, a cost above the scaled limit gets into a window that holds nothing',
    rule: fw(1, 10),
    steps: [
      // at 0.2: 2 per window; 8 at once only into an empty one
      { at: 0, rule: scaled(2), cost: 8, expect: { allowed: true, limit: 2, remaining: 0, fullAfter: 10 } },
      { at: 1_000, rule: scaled(2), expect: { allowed: false, remaining: 0, retryAfter: 9 } },
      // not "never": the next window would take it
      { at: 1_000, rule: scaled(2), cost: 8, expect: { allowed: false, remaining: 0, retryAfter: 9 } },
      { at: 1_000, rule: scaled(2), cost: 11, expect: { allowed: false, retryAfter: Infinity } },
      { at: 10_000, rule: scaled(2), expect: { allowed: true, limit: 2, remaining: 1 } },
      { at: 10_000, rule: scaled(2), cost: 8, expect: { allowed: false, remaining: 1, retryAfter: 10 } },
      // at 0.05: half a request per window, shown as 1, and one request gets into an empty window
      { at: 20_000, rule: scaled(0.5), expect: { allowed: true, limit: 1, remaining: 0, fullAfter: 10 } },
      { at: 21_000, rule: scaled(0.5), expect: { allowed: false, limit: 1, remaining: 0, retryAfter: 9 } },
      { at: 30_000, rule: scaled(0.5), cost: 0.25, expect: { allowed: true, remaining: 0 } },
      { at: 30_000, rule: scaled(0.5), cost: 0.25, expect: { allowed: true, remaining: 0 } },
      { at: 30_000, rule: scaled(0.5), cost: 0.25, expect: { allowed: false, retryAfter: 10 } },
    ],
  },
  {
    name: 'blockFor: a refusal blocks past the window it was refused in',
    // windows of 2 s, a block of 5 s
    rule: { ...fw(1, 2), blockMs: 5_000 },
    steps: [
      { at: 0, expect: { allowed: true, remaining: 1 } },
      { at: 0, expect: { allowed: true, remaining: 0, resetAfter: 2, fullAfter: 2 } },
      // the window ends in 1.5 s, the block in 5
      { at: 500, expect: { allowed: false, remaining: 0, retryAfter: 5, resetAfter: 5, fullAfter: 5 } },
      // a fresh window, still blocked
      { at: 2_000, expect: { allowed: false, remaining: 0, retryAfter: 4, fullAfter: 4 } },
      { at: 5_499, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
      // over, in the window [4 s, 6 s)
      { at: 5_500, expect: { allowed: true, remaining: 1, fullAfter: 1 } },
      { at: 5_500, cost: 3, expect: { allowed: false, remaining: 1, retryAfter: Infinity } },
      { at: 5_500, expect: { allowed: true, remaining: 0 } },
      { at: 5_600, expect: { allowed: false, remaining: 0, retryAfter: 5 } },
    ],
  },
  // windows of 10 s, a block of 2 s: the block ends long before the window does
  ...keepAndReset('blockFor: what a block leaves when it ends', { ...fw(0.2, 2), blockMs: 2_000 }, [
    { at: 0, expect: { allowed: true, remaining: 1 } },
    { at: 0, expect: { allowed: true, remaining: 0 } },
    {
      at: 0,
      expect: { allowed: false, remaining: 0, retryAfter: 10, fullAfter: 10 },
      reset: { allowed: false, remaining: 0, retryAfter: 2, resetAfter: 2, fullAfter: 2 },
    },
    {
      // kept: the window's count is 2 still: refused, and that refusal blocks again
      at: 2_000,
      expect: { allowed: false, remaining: 0, retryAfter: 8 },
      // reset: a count of nothing, in the window the clock is in
      reset: { allowed: true, remaining: 1, fullAfter: 8 },
    },
    {
      at: 2_000,
      expect: { allowed: false, remaining: 0, retryAfter: 8 },
      reset: { allowed: true, remaining: 0 },
    },
  ]),
  {
    name: "anchor 'first-request': a window starts at the first request and lasts the window",
    // 3 per 3 s, the first request at 1.5 s: [1.5 s, 4.5 s), where the clock's would end at 3 s
    rule: anchored(1, 3),
    steps: [
      { at: 1_500, expect: { allowed: true, remaining: 2, retryAfter: 0, resetAfter: 3, fullAfter: 3, delay: 0 } },
      { at: 3_000, expect: { allowed: true, remaining: 1, resetAfter: 2, fullAfter: 2 } },
      { at: 4_000, expect: { allowed: true, remaining: 0, resetAfter: 1, fullAfter: 1 } },
      { at: 4_000, expect: { allowed: false, remaining: 0, retryAfter: 1, resetAfter: 1, fullAfter: 1 } },
      // 1 ms before the window ends
      { at: 4_499, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
      // the first request after it starts the next, [4.5 s, 7.5 s)
      { at: 4_500, expect: { allowed: true, remaining: 2, resetAfter: 3, fullAfter: 3 } },
    ],
  },
  {
    name: "anchor 'first-request': the first request after a window ends starts the next, however late",
    // 10 per 10 s
    rule: anchored(1, 10),
    steps: [
      // the clock's window [0 s, 10 s) would end 2.5 s later; this one, [7.5 s, 17.5 s), in 10 s
      { at: 7_500, expect: { allowed: true, remaining: 9, resetAfter: 10, fullAfter: 10 } },
      { at: 17_499, cost: 9, expect: { allowed: true, remaining: 0, resetAfter: 1, fullAfter: 1 } },
      { at: 17_499, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
      { at: 17_500, expect: { allowed: true, remaining: 9, resetAfter: 10, fullAfter: 10 } },
      // idle past [17.5 s, 27.5 s): no window is live until this request starts [40 s, 50 s)
      { at: 40_000, expect: { allowed: true, remaining: 9, resetAfter: 10, fullAfter: 10 } },
      { at: 49_999, expect: { allowed: true, remaining: 8, resetAfter: 1 } },
      { at: 50_000, expect: { allowed: true, remaining: 9, resetAfter: 10 } },
    ],
  },
  {
    name: "anchor 'first-request': a clock that goes back stays in the stored window",
    // 2 per 2 s
    rule: anchored(1, 2),
    steps: [
      { at: 10_500, cost: 2, expect: { allowed: true, remaining: 0, fullAfter: 2 } },
      // held at the start of [10.5 s, 12.5 s): its end is 2 s away
      { at: 9_000, expect: { allowed: false, remaining: 0, retryAfter: 2 } },
      { at: 12_499, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
      { at: 12_500, expect: { allowed: true, remaining: 1, fullAfter: 2 } },
      // back before [12.5 s, 14.5 s): counted in it, held at its start, 2 s from its end
      { at: 11_000, expect: { allowed: true, remaining: 0, fullAfter: 2 } },
      { at: 13_500, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
      { at: 14_500, expect: { allowed: true, remaining: 1 } },
    ],
  },
  {
    name: "anchor 'first-request' under a factor: the scaled limit per window, the window where the first request put it",
    rule: anchored(1, 10),
    steps: [
      // 5 of 10 per window: [2 s, 12 s)
      { at: 2_000, rule: { ...anchored(1, 10), limit: 5 }, expect: { allowed: true, remaining: 4, resetAfter: 10 } },
      { at: 3_000, cost: 4, rule: { ...anchored(1, 10), limit: 5 }, expect: { allowed: true, remaining: 0 } },
      { at: 4_000, rule: { ...anchored(1, 10), limit: 5 }, expect: { allowed: false, remaining: 0, retryAfter: 8 } },
      // an instance without the factor counts in the same window
      { at: 4_000, expect: { allowed: true, remaining: 4, resetAfter: 8, fullAfter: 8 } },
      { at: 12_000, rule: { ...anchored(1, 10), limit: 5 }, expect: { allowed: true, remaining: 4, resetAfter: 10 } },
    ],
  },
  // windows of 10 s from the first request, a block of 2 s
  ...keepAndReset("anchor 'first-request' and blockFor", { ...anchored(0.2, 2), blockMs: 2_000 }, [
    { at: 1_000, expect: { allowed: true, remaining: 1, fullAfter: 10 } },
    { at: 1_000, expect: { allowed: true, remaining: 0 } },
    {
      at: 1_000,
      expect: { allowed: false, remaining: 0, retryAfter: 10, fullAfter: 10 },
      reset: { allowed: false, remaining: 0, retryAfter: 2, resetAfter: 2, fullAfter: 2 },
    },
    {
      // kept: [1 s, 11 s) holds 2 still: refused, and that refusal blocks again
      at: 3_000,
      expect: { allowed: false, remaining: 0, retryAfter: 8 },
      // reset: a window of nothing that this request starts, [3 s, 13 s) (as @nestjs/throttler counts)
      reset: { allowed: true, remaining: 1, fullAfter: 10 },
    },
    {
      at: 3_000,
      expect: { allowed: false, remaining: 0, retryAfter: 8 },
      reset: { allowed: true, remaining: 0 },
    },
  ]),
  // settles: 10 per 10 s window, a debt of 10 unless a case says less
  {
    name: 'settle: takes what a request cost past its reservation in the window, or gives back what it did not use',
    rule: { ...fw(1, 10), debt: 10 },
    steps: [
      { at: 0, cost: 2, expect: { allowed: true, remaining: 8 } },
      { at: 1_000, settle: { step: 0, actual: 5, expect: { allowed: true, remaining: 5 } }, expect: { remaining: 4 } },
      { at: 2_000, settle: { step: 0, actual: 1, expect: { allowed: true, remaining: 8 } }, expect: { remaining: 7 } },
      // a refund gives back what the decision holds since: 1
      { at: 2_000, release: 0, expect: { allowed: true, remaining: 7 } },
    ],
  },
  {
    name: 'settle: past the limit is debt, refused (a reservation of 0 too) until the window ends',
    rule: { ...fw(1, 10), debt: 10 },
    steps: [
      { at: 0, cost: 10, expect: { allowed: true, remaining: 0 } },
      {
        at: 1_000,
        settle: {
          step: 0,
          actual: 15,
          expect: { allowed: false, remaining: 0, retryAfter: 9, fullAfter: 9, debt: 5 },
        },
        expect: { allowed: false, remaining: 0, retryAfter: 9, debt: 5 },
      },
      { at: 2_000, cost: 0, expect: { allowed: false, remaining: 0, retryAfter: 8, debt: 5 } },
      // a new window: the debt was this window's
      { at: 10_000, cost: 0, expect: { allowed: true, remaining: 10 } },
      { at: 10_000, expect: { allowed: true, remaining: 9 } },
    ],
  },
  {
    name: 'settle: takes the window no further past the limit than its debt',
    rule: { ...fw(1, 10), debt: 3 },
    steps: [
      { at: 0, cost: 5, expect: { allowed: true, remaining: 5 } },
      { at: 0, cost: 5, expect: { allowed: true, remaining: 0 } },
      // 20 more asked, 3 taken: 13
      {
        at: 0,
        settle: { step: 0, actual: 25, expect: { allowed: false, remaining: 0, retryAfter: 10, debt: 3 } },
        expect: { allowed: false, debt: 3 },
      },
      // 5 given back: 8
      { at: 0, release: 1, expect: { allowed: true, remaining: 1 } },
    ],
  },
  {
    name: 'settle: gives nothing back to a window that has ended',
    rule: { ...fw(1, 10), debt: 10 },
    steps: [
      { at: 0, cost: 8, expect: { allowed: true, remaining: 2 } },
      {
        at: 10_000,
        settle: { step: 0, actual: 1, expect: { allowed: true, remaining: 10 } },
        expect: { remaining: 9 },
      },
    ],
  },
  {
    name: 'settle: after its window ended, takes from the window it is in, and a later give-back comes from there',
    rule: { ...fw(1, 10), debt: 10 },
    steps: [
      { at: 0, cost: 2, expect: { allowed: true, remaining: 8 } },
      { at: 10_000, settle: { step: 0, actual: 6, expect: { allowed: true, remaining: 6 } }, expect: { remaining: 5 } },
      { at: 11_000, settle: { step: 0, actual: 3, expect: { allowed: true, remaining: 8 } }, expect: { remaining: 7 } },
    ],
  },
];
