import type { Rule } from '../../lib/algorithms/algorithm.types.js';
import { type Case, keepAndReset } from './cases.js';

const swl = (rps: number, burst: number): Rule => ({ algorithm: 'sliding_window_log', rps, burst });

/** 100000 tokens a day (a window of 86400 s). */
const PER_DAY = 100_000 / 86_400;

/**
 * The sliding window log at fixed instants (see `index.ts`): one entry per token (a fractional
 * cost rounded up), an entry of time e leaving the window at e + W. A request that needs k
 * entries more than the limit allows waits until the k-th oldest leaves; one more token
 * (`resetAfter`) waits for the oldest, a full window (`fullAfter`) for the newest.
 */
export const SLIDING_WINDOW_LOG_CASES: Case[] = [
  {
    name: 'a fresh log admits the limit and then refuses until the oldest entry leaves',
    // 3 per 3 s window
    rule: swl(1, 3),
    steps: [
      { at: 0, expect: { allowed: true, remaining: 2, retryAfter: 0, resetAfter: 3, fullAfter: 3, delay: 0 } },
      // the oldest (0 s) leaves at 3 s, the newest (1 s) at 4 s
      { at: 1_000, expect: { allowed: true, remaining: 1, resetAfter: 2, fullAfter: 3 } },
      { at: 2_000, expect: { allowed: true, remaining: 0, resetAfter: 1, fullAfter: 3 } },
      { at: 2_000, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
      // the entry of 0 s leaves at exactly 3 s; the next to leave is 1 s's, at 4 s
      { at: 3_000, expect: { allowed: true, remaining: 0, resetAfter: 1, fullAfter: 3 } },
      { at: 3_999, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
      { at: 4_000, expect: { allowed: true, remaining: 0 } },
    ],
  },
  {
    name: 'a refused request waits for the k-th oldest entry and adds none',
    // 10 per 10 s window
    rule: swl(1, 10),
    steps: [
      { at: 0, cost: 4, expect: { allowed: true, remaining: 6 } },
      // 4 entries of 0 s leave at 10 s, 6 of 3 s at 13 s
      { at: 3_000, cost: 6, expect: { allowed: true, remaining: 0, resetAfter: 7, fullAfter: 10 } },
      { at: 5_000, expect: { allowed: false, remaining: 0, retryAfter: 5 } },
      // the 5th oldest is of 3 s: it leaves at 13 s
      { at: 5_000, cost: 5, expect: { allowed: false, remaining: 0, retryAfter: 8 } },
      // the 4th oldest (0 s) leaves in 1 ms
      { at: 9_999, cost: 4, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
      // only the 4 entries of 0 s have left: none from the refusals at 5 s and 9.999 s
      { at: 10_000, cost: 4, expect: { allowed: true, remaining: 0, resetAfter: 3, fullAfter: 10 } },
      { at: 13_000, expect: { allowed: true, remaining: 5 } },
    ],
  },
  {
    name: 'a cost above what is left is refused and takes nothing',
    rule: swl(1, 5),
    steps: [
      { at: 0, cost: 3, expect: { allowed: true, remaining: 2, resetAfter: 5, fullAfter: 5 } },
      // one entry too many: the oldest (0 s) leaves at 5 s
      { at: 1_000, cost: 3, expect: { allowed: false, remaining: 2, retryAfter: 4 } },
      { at: 1_000, cost: 2, expect: { allowed: true, remaining: 0 } },
      // the 3 entries of 0 s have left; the 2 of 1 s have not
      { at: 5_000, cost: 3, expect: { allowed: true, remaining: 0 } },
      { at: 5_000, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
    ],
  },
  {
    name: 'a cost above the limit can never pass and takes nothing',
    // 5 per 1 s window
    rule: swl(5, 5),
    steps: [
      { at: 0, cost: 6, expect: { allowed: false, remaining: 5, retryAfter: Infinity, resetAfter: 0, fullAfter: 0 } },
      { at: 0, cost: 5, expect: { allowed: true, remaining: 0, fullAfter: 1 } },
      { at: 999, cost: 6, expect: { allowed: false, remaining: 0, retryAfter: Infinity, resetAfter: 1 } },
      { at: 1_000, cost: 5, expect: { allowed: true, remaining: 0 } },
    ],
  },
  {
    name: 'a clock that goes back before the newest entry logs at that entry',
    rule: swl(1, 3),
    steps: [
      { at: 10_000, expect: { allowed: true, remaining: 2 } },
      // logged at 10 s, not 5 s: it leaves at 13 s
      { at: 5_000, expect: { allowed: true, remaining: 1, resetAfter: 3, fullAfter: 3 } },
      // an entry of 5 s would have left by now
      { at: 12_999, expect: { allowed: true, remaining: 0 } },
      // held at 12.999 s: the oldest leaves in 1 ms
      { at: 1_000, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
      { at: 13_000, expect: { allowed: true, remaining: 1 } },
    ],
  },
  {
    name: 'a refused request leaves the log as it was, even for a clock that then goes back',
    // 2 per 2 s window
    rule: swl(1, 2),
    steps: [
      { at: 10_000, expect: { allowed: true, remaining: 1 } },
      { at: 11_000, expect: { allowed: true, remaining: 0 } },
      // the entry of 10 s has left; the one of 11 s leaves at 13 s
      { at: 12_000, cost: 2, expect: { allowed: false, remaining: 1, retryAfter: 1 } },
      // after the newest entry, so not held: both entries are within the window (9.5 s, 11.5 s]
      { at: 11_500, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
    ],
  },
  {
    name: 'fractional rps with fractional costs: each takes a whole entry',
    // 2 per 2 / 0.25 = 8 s window
    rule: swl(0.25, 2),
    steps: [
      { at: 0, cost: 0.5, expect: { allowed: true, remaining: 1, resetAfter: 8, fullAfter: 8 } },
      // two half tokens use the whole limit
      { at: 0, cost: 0.5, expect: { allowed: true, remaining: 0 } },
      { at: 4_000, cost: 0.5, expect: { allowed: false, remaining: 0, retryAfter: 4 } },
      // 1.5 takes two entries
      { at: 8_000, cost: 1.5, expect: { allowed: true, remaining: 0 } },
      { at: 8_000, cost: 0.25, expect: { allowed: false, remaining: 0, retryAfter: 8 } },
    ],
  },
  {
    name: '100000 a day',
    rule: swl(PER_DAY, 100_000),
    steps: [
      { at: 0, cost: 60_000, expect: { allowed: true, remaining: 40_000, resetAfter: 86_400, fullAfter: 86_400 } },
      // noon: the entries of midnight leave in half a day, these a day from now
      { at: 43_200_000, cost: 40_000, expect: { allowed: true, remaining: 0, resetAfter: 43_200, fullAfter: 86_400 } },
      { at: 43_200_000, expect: { allowed: false, remaining: 0, retryAfter: 43_200 } },
      // a day later, the 60000 of midnight have left, the 40000 of noon have not
      { at: 86_400_000, cost: 60_000, expect: { allowed: true, remaining: 0, resetAfter: 43_200 } },
      { at: 86_400_000, expect: { allowed: false, remaining: 0, retryAfter: 43_200 } },
    ],
  },
  {
    name: 'a very high rps: a window of 1 ms',
    // 1000 / 1e6 s = 1 ms
    rule: swl(1_000_000, 1_000),
    steps: [
      { at: 0, cost: 1_000, expect: { allowed: true, remaining: 0, resetAfter: 1, fullAfter: 1 } },
      { at: 0, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
      { at: 1, expect: { allowed: true, remaining: 999 } },
      { at: 1, cost: 999, expect: { allowed: true, remaining: 0 } },
      { at: 1, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
    ],
  },
  {
    name: 'no burst of twice the limit across a window boundary (unlike the fixed window)',
    // 10 per 5 s window
    rule: swl(2, 10),
    steps: [
      { at: 4_999, cost: 10, expect: { allowed: true, remaining: 0 } },
      // where a fixed window would start afresh, the 10 entries of 4.999 s stay until 9.999 s
      { at: 5_000, cost: 10, expect: { allowed: false, remaining: 0, retryAfter: 5 } },
      { at: 9_999, cost: 10, expect: { allowed: true, remaining: 0 } },
    ],
  },
  {
    name: 'a log written under a larger limit keeps its newest entries up to the smaller limit when the limit is lowered',
    // 100 per 10 s, then 20 per 10 s
    rule: swl(10, 100),
    steps: [
      { at: 0, cost: 50, expect: { allowed: true, remaining: 50 } },
      { at: 4_000, cost: 50, expect: { allowed: true, remaining: 0 } },
      // the 20 newest entries, all of 4 s, count: each leaves at 14 s
      {
        at: 5_000,
        rule: swl(2, 20),
        expect: { allowed: false, remaining: 0, retryAfter: 9, resetAfter: 9, fullAfter: 9 },
      },
      {
        at: 10_000,
        rule: swl(2, 20),
        expect: { allowed: false, remaining: 0, retryAfter: 4, resetAfter: 4, fullAfter: 4 },
      },
      { at: 14_000, rule: swl(2, 20), expect: { allowed: true, remaining: 19, fullAfter: 10 } },
    ],
  },
  {
    name: 'blockFor: a refusal blocks after its entries have left the window',
    // windows of 2 s, a block of 5 s
    rule: { ...swl(1, 2), blockMs: 5_000 },
    steps: [
      { at: 0, expect: { allowed: true, remaining: 1 } },
      { at: 0, expect: { allowed: true, remaining: 0, fullAfter: 2 } },
      { at: 500, expect: { allowed: false, remaining: 0, retryAfter: 5, resetAfter: 5, fullAfter: 5 } },
      // both entries have left the window; the block holds
      { at: 3_000, expect: { allowed: false, remaining: 0, retryAfter: 3, fullAfter: 3 } },
      { at: 5_500, expect: { allowed: true, remaining: 1, fullAfter: 2 } },
      { at: 5_500, cost: 3, expect: { allowed: false, remaining: 1, retryAfter: Infinity } },
      { at: 5_500, expect: { allowed: true, remaining: 0 } },
      { at: 5_500, expect: { allowed: false, remaining: 0, retryAfter: 5 } },
      { at: 10_499, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
      { at: 10_500, expect: { allowed: true, remaining: 1 } },
    ],
  },
  // windows of 10 s, a block of 2 s: the block ends long before the entries leave the window
  ...keepAndReset('blockFor: what a block leaves when it ends', { ...swl(0.2, 2), blockMs: 2_000 }, [
    { at: 0, expect: { allowed: true, remaining: 1 } },
    { at: 100, expect: { allowed: true, remaining: 0 } },
    {
      at: 200,
      expect: { allowed: false, remaining: 0, retryAfter: 10, fullAfter: 10 },
      reset: { allowed: false, remaining: 0, retryAfter: 2, resetAfter: 2, fullAfter: 2 },
    },
    {
      // kept: both entries are in the window: refused, and that refusal blocks again (until 4.2 s)
      at: 2_200,
      expect: { allowed: false, remaining: 0, retryAfter: 8 },
      // reset: the log is deleted, as if the key were new
      reset: { allowed: true, remaining: 1, fullAfter: 10 },
    },
    {
      at: 2_300,
      expect: { allowed: false, remaining: 0, retryAfter: 8 },
      reset: { allowed: true, remaining: 0, fullAfter: 10 },
    },
    {
      // kept: the first entry has left the window, the block of 2.2 s has ended
      at: 10_000,
      expect: { allowed: true, remaining: 0 },
      // reset: the entries of 2.2 s and 2.3 s are the log's only ones
      reset: { allowed: false, remaining: 0, retryAfter: 2 },
    },
  ]),
  {
    // @nestjs/throttler's count (RateLimitThrottlerStorage): limit 3 per ttl of 10 s, blockDuration
    // 5 s. The 4th hit within ttl is refused and blocks; during the block every hit is refused and
    // nothing is counted; the first hit after it is admitted and counts as the 1st
    name: "blockFor then 'reset': @nestjs/throttler's blockDuration",
    rule: { ...swl(0.3, 3), blockMs: 5_000, blockResets: true },
    steps: [
      { at: 0, expect: { allowed: true, remaining: 2 } },
      { at: 100, expect: { allowed: true, remaining: 1 } },
      { at: 200, expect: { allowed: true, remaining: 0, fullAfter: 10 } },
      { at: 300, expect: { allowed: false, remaining: 0, retryAfter: 5, resetAfter: 5, fullAfter: 5 } },
      { at: 2_000, expect: { allowed: false, remaining: 0, retryAfter: 4, fullAfter: 4 } },
      { at: 5_299, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
      { at: 5_300, expect: { allowed: true, remaining: 2, fullAfter: 10 } },
      { at: 5_400, expect: { allowed: true, remaining: 1 } },
      { at: 5_500, expect: { allowed: true, remaining: 0 } },
      { at: 5_600, expect: { allowed: false, remaining: 0, retryAfter: 5 } },
      { at: 10_599, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
      { at: 10_600, expect: { allowed: true, remaining: 2 } },
    ],
  },
  // settles: 10 per 10 s window, a debt of 10 unless a case says less
  {
    name: 'settle: logs what a request cost past its reservation, or drops what it did not use',
    rule: { ...swl(1, 10), debt: 10 },
    steps: [
      { at: 0, cost: 2, expect: { allowed: true, remaining: 8 } },
      // 3 entries at 1 s
      { at: 1_000, settle: { step: 0, actual: 5, expect: { allowed: true, remaining: 5 } }, expect: { remaining: 4 } },
      // 4 dropped from 1 s, where the settle last logged (entries at one ms are alike)
      { at: 2_000, settle: { step: 0, actual: 1, expect: { allowed: true, remaining: 8 } }, expect: { remaining: 7 } },
    ],
  },
  {
    name: 'settle: more entries than the limit are debt, refused (a reservation of 0 too) until they leave',
    rule: { ...swl(1, 10), debt: 10 },
    steps: [
      { at: 0, cost: 10, expect: { allowed: true, remaining: 0 } },
      {
        at: 1_000,
        settle: {
          step: 0,
          actual: 15,
          expect: { allowed: false, remaining: 0, retryAfter: 9, fullAfter: 10, debt: 5 },
        },
        expect: { allowed: false, remaining: 0, retryAfter: 9, debt: 5 },
      },
      { at: 5_000, cost: 0, expect: { allowed: false, remaining: 0, retryAfter: 5, debt: 5 } },
      // the 10 entries of 0 s have left; the 5 of 1 s leave at 11 s
      { at: 10_000, expect: { allowed: true, remaining: 4 } },
    ],
  },
  {
    name: 'settle: logs no more past the limit than its debt',
    rule: { ...swl(1, 10), debt: 3 },
    steps: [
      { at: 0, cost: 5, expect: { allowed: true, remaining: 5 } },
      { at: 0, cost: 5, expect: { allowed: true, remaining: 0 } },
      {
        at: 0,
        settle: { step: 0, actual: 25, expect: { allowed: false, remaining: 0, retryAfter: 10, debt: 3 } },
        expect: { allowed: false, debt: 3 },
      },
      { at: 0, release: 1, expect: { allowed: true, remaining: 1 } },
    ],
  },
  {
    name: 'settle: drops nothing once its entries have left the window',
    rule: { ...swl(1, 10), debt: 10 },
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
    name: 'settle: after its entries left, logs at its own time, and a later give-back drops from there',
    rule: { ...swl(1, 10), debt: 10 },
    steps: [
      { at: 0, cost: 2, expect: { allowed: true, remaining: 8 } },
      { at: 10_000, settle: { step: 0, actual: 6, expect: { allowed: true, remaining: 6 } }, expect: { remaining: 5 } },
      { at: 11_000, settle: { step: 0, actual: 3, expect: { allowed: true, remaining: 8 } }, expect: { remaining: 7 } },
    ],
  },
];
