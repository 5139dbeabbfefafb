import type { Rule } from '../../lib/algorithms/algorithm.types.js';
import {
  type Case,
  keepAndReset,
  monthlyBillionSteps,
  MONTHLY_BILLION_RPS,
  type Step,
  settlingBucketCases,
} from './cases.js';

const tb = (rps: number, burst: number): Rule => ({ algorithm: 'token_bucket', rps, burst });

/** The token bucket at fixed instants (see `index.ts`). */
export const TOKEN_BUCKET_CASES: Case[] = [
  {
    name: 'a fresh bucket holds burst tokens and then refuses',
    rule: tb(1, 3),
    steps: [
      { at: 0, expect: { allowed: true, remaining: 2, retryAfter: 0, resetAfter: 1, fullAfter: 1 } },
      { at: 0, expect: { allowed: true, remaining: 1, fullAfter: 2 } },
      { at: 0, expect: { allowed: true, remaining: 0, resetAfter: 1, fullAfter: 3 } },
      { at: 0, expect: { allowed: false, remaining: 0, retryAfter: 1, resetAfter: 1, fullAfter: 3 } },
    ],
  },
  {
    name: 'refills continuously at rps',
    rule: tb(2, 4),
    steps: [
      { at: 0, cost: 4, expect: { allowed: true, remaining: 0, fullAfter: 2 } },
      { at: 250, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
      { at: 500, expect: { allowed: true, remaining: 0 } },
      { at: 1500, expect: { allowed: true, remaining: 1 } },
      { at: 1500, cost: 2, expect: { allowed: false, remaining: 1, retryAfter: 1 } },
    ],
  },
  {
    name: 'a refill that comes to a whole number of tokens is counted as that number',
    rule: tb(2, 6),
    steps: [
      { at: 0, cost: 3, expect: { allowed: true, remaining: 3 } },
      // 3 + 1.46 - 1 = 3.46
      { at: 730, expect: { allowed: true, remaining: 3 } },
      // 3.46 + 0.07 - 3 = 0.53
      { at: 765, cost: 3, expect: { allowed: true, remaining: 0 } },
      // 0.53 + 2.252 - 1 = 1.782
      { at: 1_891, expect: { allowed: true, remaining: 1 } },
      // 1.782 + 0.218 is 2 (in doubles, 1.9999999999999996): a cost of 2 fits exactly
      { at: 2_000, cost: 2, expect: { allowed: true, remaining: 0 } },
    ],
  },
  {
    name: 'a refill never goes above burst',
    rule: tb(10, 5),
    steps: [
      { at: 0, cost: 5, expect: { allowed: true, remaining: 0 } },
      { at: 100_000, expect: { allowed: true, remaining: 4, resetAfter: 1, fullAfter: 1 } },
    ],
  },
  {
    name: 'a cost above the tokens is refused and takes nothing',
    rule: tb(1, 10),
    steps: [
      { at: 0, cost: 8, expect: { allowed: true, remaining: 2, fullAfter: 8 } },
      { at: 0, cost: 3, expect: { allowed: false, remaining: 2, retryAfter: 1 } },
      { at: 0, cost: 2, expect: { allowed: true, remaining: 0 } },
      { at: 0, cost: 3, expect: { allowed: false, remaining: 0, retryAfter: 3 } },
      { at: 3000, cost: 3, expect: { allowed: true, remaining: 0 } },
    ],
  },
  {
    name: 'a cost above burst can never pass and takes nothing',
    rule: tb(5, 5),
    steps: [
      { at: 0, cost: 6, expect: { allowed: false, remaining: 5, retryAfter: Infinity, resetAfter: 0, fullAfter: 0 } },
      { at: 0, cost: 5, expect: { allowed: true, remaining: 0 } },
      { at: 60_000, cost: 6, expect: { allowed: false, remaining: 5, retryAfter: Infinity } },
    ],
  },
  {
    name: 'a clock that goes backwards adds no quota',
    rule: tb(1, 2),
    steps: [
      { at: 10_000, cost: 2, expect: { allowed: true, remaining: 0 } },
      { at: 5_000, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
      { at: 10_500, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
      { at: 11_000, expect: { allowed: true, remaining: 0 } },
      { at: 9_000, expect: { allowed: false, remaining: 0 } },
      { at: 12_000, expect: { allowed: true, remaining: 0 } },
    ],
  },
  {
    name: 'fractional rps refills a fraction of a token per second',
    rule: tb(0.1, 2),
    steps: [
      { at: 0, cost: 2, expect: { allowed: true, remaining: 0, resetAfter: 10, fullAfter: 20 } },
      { at: 5_000, expect: { allowed: false, remaining: 0, retryAfter: 5, resetAfter: 5, fullAfter: 15 } },
      { at: 10_000, expect: { allowed: true, remaining: 0, resetAfter: 10 } },
      { at: 29_999, expect: { allowed: true, remaining: 0 } },
    ],
  },
  {
    name: 'fractional rps below one token per second, with a fractional cost',
    rule: tb(0.5, 1),
    steps: [
      { at: 0, cost: 0.5, expect: { allowed: true, remaining: 0, fullAfter: 1 } },
      { at: 0, cost: 0.5, expect: { allowed: true, remaining: 0, fullAfter: 2 } },
      { at: 1_000, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
      { at: 2_000, expect: { allowed: true, remaining: 0 } },
    ],
  },
  {
    name: "the seeds' worked example: rps 10, burst 50",
    rule: tb(10, 50),
    steps: [
      ...Array.from({ length: 50 }, (_, i): Step => ({ at: 0, expect: { allowed: true, remaining: 49 - i } })),
      { at: 0, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
      { at: 1_000, expect: { allowed: true, remaining: 9 } },
    ],
  },
  {
    name: '1e9 tokens a month, spent, then a request every 2 ms for 10 s: exactly what comes back (3,858) is admitted',
    rule: tb(MONTHLY_BILLION_RPS, 1e9),
    steps: monthlyBillionSteps(),
  },
  {
    name: 'a bucket filled under a larger burst holds the smaller one when the limit is lowered',
    rule: tb(10, 100),
    steps: [
      { at: 0, cost: 10, expect: { allowed: true, remaining: 90 } },
      // 90 tokens, 20 at most under 20 at 0.5 a second
      { at: 0, rule: tb(0.5, 20), expect: { allowed: true, remaining: 19, resetAfter: 2, fullAfter: 2 } },
      { at: 0, rule: tb(0.5, 20), cost: 19, expect: { allowed: true, remaining: 0, fullAfter: 40 } },
      { at: 0, rule: tb(0.5, 20), expect: { allowed: false, remaining: 0, retryAfter: 2, fullAfter: 40 } },
    ],
  },
  {
    name: 'blockFor: a refusal blocks for blockMs, however the bucket refills, and only a refusal starts a block',
    rule: { ...tb(1, 2), blockMs: 10_000 },
    steps: [
      { at: 0, expect: { allowed: true, remaining: 1, fullAfter: 1 } },
      { at: 0, expect: { allowed: true, remaining: 0, resetAfter: 1, fullAfter: 2 } },
      // refused: the block starts; every time is the block's (the bucket's own are shorter)
      { at: 0, expect: { allowed: false, remaining: 0, retryAfter: 10, resetAfter: 10, fullAfter: 10 } },
      // the bucket is full again, but the block holds; retrying does not lengthen it
      { at: 5_000, expect: { allowed: false, remaining: 0, retryAfter: 5, resetAfter: 5, fullAfter: 5 } },
      { at: 9_999, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
      // over: the refusal took nothing, so the bucket is full
      { at: 10_000, expect: { allowed: true, remaining: 1, retryAfter: 0 } },
      // a cost above burst is never admittable: refused without charge and without a block
      { at: 10_000, cost: 3, expect: { allowed: false, remaining: 1, retryAfter: Infinity } },
      { at: 10_000, expect: { allowed: true, remaining: 0 } },
      // the next refusal starts the next block
      { at: 10_000, expect: { allowed: false, remaining: 0, retryAfter: 10 } },
      { at: 19_999, expect: { allowed: false, retryAfter: 1 } },
      { at: 20_000, expect: { allowed: true, remaining: 1 } },
    ],
  },
  {
    name: 'blockFor: Retry-After is the longer of the block and the wait, and a clock gone back does not shorten the block',
    rule: { ...tb(0.1, 1), blockMs: 2_000 },
    steps: [
      { at: 10_000, expect: { allowed: true, remaining: 0, fullAfter: 10 } },
      // the block (2 s) ends before a token is back (10 s)
      { at: 10_000, expect: { allowed: false, remaining: 0, retryAfter: 10, fullAfter: 10 } },
      { at: 5_000, expect: { allowed: false, remaining: 0, retryAfter: 10 } },
      // after the block, still too early: the bucket refuses, and that refusal blocks again (until 15 s)
      { at: 13_000, expect: { allowed: false, remaining: 0, retryAfter: 7 } },
      { at: 13_000, cost: 0.5, expect: { allowed: false, remaining: 0, retryAfter: 2 } },
      { at: 15_000, cost: 0.5, expect: { allowed: true, remaining: 0 } },
    ],
  },
  // a token every 10 s, a block of 2 s: the block ends long before the refusal's tokens are back
  ...keepAndReset('blockFor: what a block leaves when it ends', { ...tb(0.1, 2), blockMs: 2_000 }, [
    { at: 0, expect: { allowed: true, remaining: 1 } },
    { at: 0, expect: { allowed: true, remaining: 0 } },
    {
      at: 0,
      expect: { allowed: false, remaining: 0, retryAfter: 10, resetAfter: 10, fullAfter: 20 },
      // the bucket is full the moment the block ends: every time is the block's
      reset: { allowed: false, remaining: 0, retryAfter: 2, resetAfter: 2, fullAfter: 2 },
    },
    {
      at: 1_999,
      expect: { allowed: false, remaining: 0, retryAfter: 9 },
      reset: { allowed: false, remaining: 0, retryAfter: 1, fullAfter: 1 },
    },
    {
      // kept: 0.2 tokens, refused, and that refusal blocks again (until 4 s)
      at: 2_000,
      expect: { allowed: false, remaining: 0, retryAfter: 8 },
      // reset: a full bucket, as if the key were new
      reset: { allowed: true, remaining: 1, fullAfter: 10 },
    },
    {
      at: 2_000,
      expect: { allowed: false, remaining: 0, retryAfter: 8 },
      reset: { allowed: true, remaining: 0, fullAfter: 20 },
    },
  ]),
  ...settlingBucketCases('token_bucket'),
];
