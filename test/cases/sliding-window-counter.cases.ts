import type { Rule } from '../../lib/algorithms/algorithm.types.js';
import { type Case, keepAndReset } from './cases.js';

const swc = (rps: number, burst: number): Rule => ({ algorithm: 'sliding_window_counter', rps, burst });
/** 10 per 10 s under a factor (`RateLimiterService.setScale`): its limit scaled, its window the same. */
const scaled = (limit: number): Rule => ({ ...swc(1, 10), limit });

/** 100000 tokens a day (a window of 86400 s). */
const PER_DAY = 100_000 / 86_400;

/**
 * The sliding window counter at fixed instants (see `index.ts`). Windows are aligned to the
 * clock, and `at: 0` starts one. At `e` ms into a window of `W`, the estimate of the tokens
 * taken in the last `W` is `previous * (W - e) / W + count`; a request of `cost` passes when
 * the estimate plus `cost` stays within the limit. A wait is the first `e` (here or in the next
 * window, where this window's count becomes `previous`) at which that holds.
 */
export const SLIDING_WINDOW_COUNTER_CASES: Case[] = [
  {
    name: 'a fresh counter admits the limit, then one token per slid-out share',
    // 3 per 3 s window
    rule: swc(1, 3),
    steps: [
      // a third token free again only once this window's 1 has slid out of the next: at 6 s
      { at: 0, expect: { allowed: true, remaining: 2, retryAfter: 0, resetAfter: 6, fullAfter: 6, delay: 0 } },
      // next window, previous 2: 2 * (3000 - e) / 3000 + 2 <= 3 from e = 1500, i.e. 4.5 s
      { at: 1_000, expect: { allowed: true, remaining: 1, resetAfter: 4, fullAfter: 5 } },
      // next window, previous 3: 3 * (3000 - e) / 3000 + 1 <= 3 from e = 1000, i.e. 4 s
      { at: 2_000, expect: { allowed: true, remaining: 0, resetAfter: 2, fullAfter: 4 } },
      { at: 2_000, expect: { allowed: false, remaining: 0, retryAfter: 2 } },
      // new window: the estimate is still 3, down to 2 at e = 1000
      { at: 3_000, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
      // estimate 3 * 2/3 = 2, then 3
      { at: 4_000, expect: { allowed: true, remaining: 0 } },
      // estimate 3 * 1/3 + 1 = 2, then 3
      { at: 5_000, expect: { allowed: true, remaining: 0 } },
    ],
  },
  {
    name: "the previous window's count weighs less as the window slides",
    // 10 per 10 s window
    rule: swc(1, 10),
    steps: [
      // next window, previous 10: 10 * (10000 - e) / 10000 + 1 <= 10 from e = 1000, i.e. 11 s
      { at: 5_000, cost: 10, expect: { allowed: true, remaining: 0, resetAfter: 6, fullAfter: 15 } },
      // e = 0: estimate 10
      { at: 10_000, expect: { allowed: false, remaining: 0, retryAfter: 1, resetAfter: 1, fullAfter: 10 } },
      // e = 2500: estimate 7.5, then 9.5; one more at e = 3000; full once this window's 2
      // have slid out of the next, at 30 s
      { at: 12_500, cost: 2, expect: { allowed: true, remaining: 0, resetAfter: 1, fullAfter: 18 } },
      { at: 12_500, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
      // e = 5000: estimate 5 + 2 = 7, then 10
      { at: 15_000, cost: 3, expect: { allowed: true, remaining: 0 } },
      // e = 7500: estimate 2.5 + 5 = 7.5, then 8.5
      { at: 17_500, expect: { allowed: true, remaining: 1 } },
      // next window: previous 6, estimate 6, then 10
      { at: 20_000, cost: 4, expect: { allowed: true, remaining: 0 } },
    ],
  },
  {
    name: 'admits where the exact log would refuse: a burst at the end of the previous window',
    rule: swc(1, 10),
    steps: [
      { at: 9_000, cost: 10, expect: { allowed: true, remaining: 0 } },
      { at: 10_000, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
      // e = 5000: estimate 10 * 1/2 = 5. The log holds all 10 entries of 9 s until 19 s, so
      // it would refuse: here 15 tokens pass within 6 s
      { at: 15_000, cost: 5, expect: { allowed: true, remaining: 0 } },
      // estimate 10, down to 9 at e = 6000
      { at: 15_000, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
    ],
  },
  {
    name: 'refuses where the exact log would admit: a burst at the start of the previous window',
    rule: swc(1, 10),
    steps: [
      { at: 0, cost: 10, expect: { allowed: true, remaining: 0, fullAfter: 20 } },
      // the log's 10 entries of 0 s leave at exactly 10 s; the estimate is still 10
      { at: 10_000, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
      // estimate 5: 6 fit once it is 4, at e = 6000
      { at: 15_000, cost: 6, expect: { allowed: false, remaining: 5, retryAfter: 1 } },
      { at: 16_000, cost: 6, expect: { allowed: true, remaining: 0 } },
    ],
  },
  {
    name: 'a cost above what is left is refused and takes nothing',
    rule: swc(1, 10),
    steps: [
      // 3 more fit in the next window once 8 * (10000 - e) / 10000 <= 7: e = 1250, i.e. 11.25 s
      { at: 0, cost: 8, expect: { allowed: true, remaining: 2, resetAfter: 12, fullAfter: 20 } },
      { at: 0, cost: 3, expect: { allowed: false, remaining: 2, retryAfter: 12 } },
      { at: 0, cost: 2, expect: { allowed: true, remaining: 0 } },
      // previous 10: 3 fit once 10 * (10000 - e) / 10000 <= 7, at e = 3000
      { at: 10_000, cost: 3, expect: { allowed: false, remaining: 0, retryAfter: 3 } },
      { at: 13_000, cost: 3, expect: { allowed: true, remaining: 0 } },
    ],
  },
  {
    name: 'a cost above the limit can never pass and takes nothing',
    // 5 per 1 s window
    rule: swc(5, 5),
    steps: [
      { at: 0, cost: 6, expect: { allowed: false, remaining: 5, retryAfter: Infinity, resetAfter: 0, fullAfter: 0 } },
      { at: 0, cost: 5, expect: { allowed: true, remaining: 0, fullAfter: 2 } },
      // e = 500: estimate 2.5; a third token free once 5 * (1000 - e) / 1000 <= 2, at e = 600
      {
        at: 1_500,
        cost: 6,
        expect: { allowed: false, remaining: 2, retryAfter: Infinity, resetAfter: 1, fullAfter: 1 },
      },
    ],
  },
  {
    name: 'a clock that goes back into an earlier window stays in the stored one',
    // 2 per 2 s window
    rule: swc(1, 2),
    steps: [
      { at: 10_000, cost: 2, expect: { allowed: true, remaining: 0 } },
      // held at 10 s: 1 fits once 2 * (2000 - e) / 2000 <= 1 in the next window, at 13 s
      { at: 9_000, expect: { allowed: false, remaining: 0, retryAfter: 3 } },
      { at: 12_000, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
      // estimate 2 * 1/2 = 1, then 2
      { at: 13_000, expect: { allowed: true, remaining: 0 } },
      // held at 12 s, the start of the stored window: estimate 2 + 1 = 3, which falls to 2
      // only at 14 s
      { at: 11_000, expect: { allowed: false, remaining: 0, retryAfter: 2 } },
      // next window: previous 1, estimate 1, then 2
      { at: 14_000, expect: { allowed: true, remaining: 0 } },
    ],
  },
  {
    name: 'a request admitted on a clock gone back counts in the stored window',
    // 4 per 4 s window
    rule: swc(1, 4),
    steps: [
      // full once these 2 have slid out of [16 s, 20 s)
      { at: 12_000, cost: 2, expect: { allowed: true, remaining: 2, fullAfter: 8 } },
      // held at 12 s: estimate 2, then 3; 2 more fit in the next window once
      // 3 * (4000 - e) / 4000 <= 2: e = 1334 (1333.3 rounded up), i.e. 17.334 s
      { at: 9_000, expect: { allowed: true, remaining: 1, resetAfter: 6, fullAfter: 8 } },
      // e = 1000: previous 3, estimate 2.25, then 3.25
      { at: 17_000, expect: { allowed: true, remaining: 0 } },
    ],
  },
  {
    name: 'fractional rps with fractional costs',
    // 2 per 2 / 0.25 = 8 s window
    rule: swc(0.25, 2),
    steps: [
      { at: 0, cost: 0.5, expect: { allowed: true, remaining: 1, resetAfter: 16, fullAfter: 16 } },
      // count 1.5; one more whole token once 1.5 * (8000 - e) / 8000 <= 1 in the next window:
      // e = 2667 (2666.7 rounded up), i.e. 10.667 s
      { at: 0, cost: 1, expect: { allowed: true, remaining: 0, resetAfter: 11, fullAfter: 16 } },
      { at: 0, cost: 0.5, expect: { allowed: true, remaining: 0 } },
      // next window, previous 2: 0.5 fits once 2 * (8000 - e) / 8000 <= 1.5, at e = 2000 (10 s)
      { at: 4_000, cost: 0.5, expect: { allowed: false, remaining: 0, retryAfter: 6 } },
      // e = 2000: estimate 1.5, then 2
      { at: 10_000, cost: 0.5, expect: { allowed: true, remaining: 0 } },
      // e = 4000: estimate 1 + 0.5; 1 fits once 2 * (8000 - e) / 8000 <= 0.5, at e = 6000
      { at: 12_000, expect: { allowed: false, remaining: 0, retryAfter: 2 } },
    ],
  },
  {
    name: '100000 a day',
    rule: swc(PER_DAY, 100_000),
    steps: [
      // one more once 100000 * (W - e) / W <= 99999 the next day, at e = 864 ms; full after two days
      { at: 0, cost: 100_000, expect: { allowed: true, remaining: 0, resetAfter: 86_401, fullAfter: 172_800 } },
      // noon: 43200.864 s to go
      { at: 43_200_000, expect: { allowed: false, remaining: 0, retryAfter: 43_201 } },
      // the next day at noon: estimate 50000
      { at: 129_600_000, cost: 50_000, expect: { allowed: true, remaining: 0 } },
      // estimate 100000: one more token in 864 ms
      { at: 129_600_000, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
    ],
  },
  {
    name: 'a very high rps: windows of 1 ms',
    // 1000 / 1e6 s = 1 ms
    rule: swc(1_000_000, 1_000),
    steps: [
      { at: 0, cost: 1_000, expect: { allowed: true, remaining: 0, resetAfter: 1, fullAfter: 1 } },
      { at: 0, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
      // e = 0 of the next window: the estimate is still 1000
      { at: 1, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
      // two windows on, the count of 0 ms no longer weighs
      { at: 2, cost: 1_000, expect: { allowed: true, remaining: 0 } },
    ],
  },
  {
    name: 'counts written under a larger limit are the smaller limit when the limit is lowered',
    // 100 per 10 s, then 20 per 10 s: the same windows
    rule: swc(10, 100),
    steps: [
      { at: 0, cost: 100, expect: { allowed: true, remaining: 0, fullAfter: 20 } },
      // a count of 20 (not 100) leaves room for one more once 1/20 of it has slid out, 500 ms
      // into the next window: 5.5 s
      {
        at: 5_000,
        rule: swc(2, 20),
        expect: { allowed: false, remaining: 0, retryAfter: 6, resetAfter: 6, fullAfter: 15 },
      },
      // previous 20, 80 % of it inside: 16, so 4 left
      { at: 12_000, rule: swc(2, 20), expect: { allowed: true, remaining: 3 } },
    ],
  },
  {
    name: 'a factor scales the limit and keeps the windows and their counts, whatever factor each instance has',
    // 10 per 10 s, decided by instances at factors 1 and 0.5
    rule: swc(1, 10),
    steps: [
      { at: 0, cost: 6, expect: { allowed: true, limit: 10, remaining: 4 } },
      // at 0.5, 5 per window: 1 more fits in the next window once 6 * (10000 - e) / 10000 <= 4, at e = 3334
      { at: 0, rule: scaled(5), expect: { allowed: false, limit: 5, remaining: 0, retryAfter: 14 } },
      { at: 10_000, rule: scaled(5), expect: { allowed: false, limit: 5, remaining: 0, retryAfter: 4 } },
      // e = 5000: estimate 3, then 4 and 5
      { at: 15_000, rule: scaled(5), expect: { allowed: true, limit: 5, remaining: 1 } },
      { at: 15_000, rule: scaled(5), expect: { allowed: true, limit: 5, remaining: 0 } },
      // the instance at 1 sees the same estimate, 5: then 6 of 10
      { at: 15_000, expect: { allowed: true, limit: 10, remaining: 4 } },
      { at: 15_000, rule: scaled(5), expect: { allowed: false, remaining: 0 } },
    ],
  },
  {
    name: 'under a factor, a cost above the scaled limit gets in once nothing weighs any more',
    rule: swc(1, 10),
    steps: [
      // at 0.2: 2 per window; 8 at once only when the estimate is 0
      { at: 0, rule: scaled(2), cost: 8, expect: { allowed: true, limit: 2, remaining: 0, fullAfter: 20 } },
      // not "never": once this window's 8 has slid out of the next one, at 20 s
      { at: 5_000, rule: scaled(2), cost: 8, expect: { allowed: false, remaining: 0, retryAfter: 15 } },
      { at: 5_000, rule: scaled(2), cost: 11, expect: { allowed: false, retryAfter: Infinity } },
      { at: 20_000, rule: scaled(2), cost: 8, expect: { allowed: true, remaining: 0 } },
      // at 0.05: half a request per window, shown as 1
      { at: 40_000, rule: scaled(0.5), expect: { allowed: true, limit: 1, remaining: 0 } },
      { at: 45_000, rule: scaled(0.5), expect: { allowed: false, limit: 1, remaining: 0, retryAfter: 15 } },
    ],
  },
  {
    name: 'blockFor: a refusal blocks after its counts have slid out',
    // windows of 2 s, a block of 5 s
    rule: { ...swc(1, 2), blockMs: 5_000 },
    steps: [
      { at: 0, expect: { allowed: true, remaining: 1 } },
      { at: 0, expect: { allowed: true, remaining: 0 } },
      { at: 500, expect: { allowed: false, remaining: 0, retryAfter: 5, resetAfter: 5, fullAfter: 5 } },
      // two windows on, nothing weighs any more; the block holds
      { at: 4_000, expect: { allowed: false, remaining: 0, retryAfter: 2, fullAfter: 2 } },
      { at: 5_500, expect: { allowed: true, remaining: 1 } },
      { at: 5_500, cost: 3, expect: { allowed: false, remaining: 1, retryAfter: Infinity } },
      { at: 5_500, expect: { allowed: true, remaining: 0 } },
      { at: 5_500, expect: { allowed: false, remaining: 0, retryAfter: 5 } },
      { at: 10_500, expect: { allowed: true } },
    ],
  },
  // windows of 10 s, a block of 2 s: the block ends long before the counts weigh less
  ...keepAndReset('blockFor: what a block leaves when it ends', { ...swc(0.2, 2), blockMs: 2_000 }, [
    { at: 0, expect: { allowed: true, remaining: 1 } },
    { at: 0, expect: { allowed: true, remaining: 0 } },
    {
      at: 0,
      expect: { allowed: false, remaining: 0, retryAfter: 15, fullAfter: 20 },
      reset: { allowed: false, remaining: 0, retryAfter: 2, resetAfter: 2, fullAfter: 2 },
    },
    {
      // kept: the window's count is 2 still: refused, and that refusal blocks again
      at: 2_000,
      expect: { allowed: false, remaining: 0, retryAfter: 13 },
      // reset: counts of nothing, in the window the clock is in
      reset: { allowed: true, remaining: 1 },
    },
    {
      at: 2_000,
      expect: { allowed: false, remaining: 0, retryAfter: 13 },
      reset: { allowed: true, remaining: 0 },
    },
  ]),
  // settles: 10 per 10 s window, a debt of 10 unless a case says less
  {
    name: 'settle: takes what a request cost past its reservation in the window, or gives back what it did not use',
    rule: { ...swc(1, 10), debt: 10 },
    steps: [
      { at: 0, cost: 2, expect: { allowed: true, remaining: 8 } },
      { at: 1_000, settle: { step: 0, actual: 5, expect: { allowed: true, remaining: 5 } }, expect: { remaining: 4 } },
      { at: 2_000, settle: { step: 0, actual: 1, expect: { allowed: true, remaining: 8 } }, expect: { remaining: 7 } },
      { at: 2_000, release: 0, expect: { allowed: true, remaining: 7 } },
    ],
  },
  {
    name: 'settle: past the limit is debt, refused (a reservation of 0 too) until enough has slid out of the next window',
    rule: { ...swc(1, 10), debt: 10 },
    steps: [
      { at: 0, cost: 10, expect: { allowed: true, remaining: 0 } },
      // 15 weighs 10 or less once 1/3 of the next window has passed (6,667 ms), 9 or less at 4 s
      {
        at: 1_000,
        settle: { step: 0, actual: 15, expect: { allowed: false, remaining: 0, retryAfter: 13, debt: 5 } },
        expect: { allowed: false, remaining: 0, retryAfter: 13, debt: 5 },
      },
      // the 15 weigh in whole at the next window's start, 12 at 2 s into it
      { at: 10_000, expect: { allowed: false, remaining: 0, retryAfter: 4, debt: 5 } },
      { at: 12_000, cost: 0, expect: { allowed: false, remaining: 0, retryAfter: 2, debt: 2 } },
      { at: 14_000, expect: { allowed: true, remaining: 0 } },
    ],
  },
  {
    name: 'settle: takes the window no further past the limit than its debt',
    rule: { ...swc(1, 10), debt: 3 },
    steps: [
      { at: 0, cost: 5, expect: { allowed: true, remaining: 5 } },
      { at: 0, cost: 5, expect: { allowed: true, remaining: 0 } },
      {
        at: 0,
        settle: { step: 0, actual: 25, expect: { allowed: false, remaining: 0, debt: 3 } },
        expect: { allowed: false, debt: 3 },
      },
      { at: 0, release: 1, expect: { allowed: true, remaining: 1 } },
    ],
  },
  {
    name: 'settle: gives back to the window after, where the charge weighs still, and nothing two windows on',
    rule: { ...swc(1, 10), debt: 10 },
    steps: [
      { at: 0, cost: 8, expect: { allowed: true, remaining: 2 } },
      // previous 8, 4 given back
      { at: 10_000, settle: { step: 0, actual: 4, expect: { allowed: true, remaining: 6 } }, expect: { remaining: 5 } },
      // previous 1 (the last window's count)
      { at: 20_000, settle: { step: 0, actual: 1, expect: { allowed: true, remaining: 9 } }, expect: { remaining: 8 } },
    ],
  },
  {
    name: 'settle: after its window ended, takes from the window it is in, and a later give-back comes from there',
    rule: { ...swc(1, 10), debt: 10 },
    steps: [
      { at: 0, cost: 2, expect: { allowed: true, remaining: 8 } },
      // previous 2, count 4
      { at: 10_000, settle: { step: 0, actual: 6, expect: { allowed: true, remaining: 4 } }, expect: { remaining: 3 } },
      // count 5 - 3; 2 * 0.9 of the previous window
      { at: 11_000, settle: { step: 0, actual: 3, expect: { allowed: true, remaining: 6 } }, expect: { remaining: 5 } },
    ],
  },
];
