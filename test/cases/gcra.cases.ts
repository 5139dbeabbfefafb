import type { Rule } from '../../lib/algorithms/algorithm.types.js';
import {
  type Case,
  keepAndReset,
  monthlyBillionSteps,
  MONTHLY_BILLION_RPS,
  type Step,
  settlingBucketCases,
} from './cases.js';

const gc = (rps: number, burst: number): Rule => ({ algorithm: 'gcra', rps, burst });

/** 100000 tokens a day: one token every 864 ms (86400 s / 100000). */
const PER_DAY = 100_000 / 86_400;

/**
 * GCRA at fixed instants (see `index.ts`). It admits exactly what the token bucket admits, so
 * every value follows from tokens = burst - backlog, the backlog draining at rps, and it never
 * delays.
 */
export const GCRA_CASES: Case[] = [
  {
    name: 'a fresh key admits burst at once and then refuses',
    rule: gc(1, 3),
    steps: [
      { at: 0, expect: { allowed: true, remaining: 2, retryAfter: 0, resetAfter: 1, fullAfter: 1, delay: 0 } },
      { at: 0, expect: { allowed: true, remaining: 1, resetAfter: 1, fullAfter: 2, delay: 0 } },
      { at: 0, expect: { allowed: true, remaining: 0, resetAfter: 1, fullAfter: 3, delay: 0 } },
      { at: 0, expect: { allowed: false, remaining: 0, retryAfter: 1, resetAfter: 1, fullAfter: 3, delay: 0 } },
    ],
  },
  {
    name: 'the backlog drains continuously at rps',
    rule: gc(2, 4),
    steps: [
      // backlog 4: one token back in 500 ms, all four in 2 s
      { at: 0, cost: 4, expect: { allowed: true, remaining: 0, resetAfter: 1, fullAfter: 2 } },
      // backlog 3.5: half a token short, 250 ms
      { at: 250, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
      { at: 500, expect: { allowed: true, remaining: 0 } },
      // backlog 4 - 2 = 2, then 3: full in 1.5 s; a cost of 2 is one token (500 ms) short
      { at: 1_500, expect: { allowed: true, remaining: 1, resetAfter: 1, fullAfter: 2 } },
      { at: 1_500, cost: 2, expect: { allowed: false, remaining: 1, retryAfter: 1 } },
      { at: 2_000, cost: 2, expect: { allowed: true, remaining: 0 } },
    ],
  },
  {
    name: 'a cost above what is left is refused and takes nothing',
    rule: gc(1, 10),
    steps: [
      { at: 0, cost: 8, expect: { allowed: true, remaining: 2, fullAfter: 8 } },
      { at: 0, cost: 3, expect: { allowed: false, remaining: 2, retryAfter: 1 } },
      { at: 0, cost: 2, expect: { allowed: true, remaining: 0 } },
      { at: 0, cost: 3, expect: { allowed: false, remaining: 0, retryAfter: 3 } },
      // backlog 7.5: 10.5 with the cost, half a token (500 ms) too many
      { at: 2_500, cost: 3, expect: { allowed: false, remaining: 2, retryAfter: 1 } },
      { at: 3_000, cost: 3, expect: { allowed: true, remaining: 0 } },
    ],
  },
  {
    name: 'a cost above burst can never pass and takes nothing',
    rule: gc(5, 5),
    steps: [
      { at: 0, cost: 6, expect: { allowed: false, remaining: 5, retryAfter: Infinity, resetAfter: 0, fullAfter: 0 } },
      { at: 0, cost: 5, expect: { allowed: true, remaining: 0, fullAfter: 1 } },
      // backlog 2.5: 2 whole tokens free, the third in 100 ms
      { at: 500, cost: 6, expect: { allowed: false, remaining: 2, retryAfter: Infinity, resetAfter: 1 } },
      { at: 500, cost: 2, expect: { allowed: true, remaining: 0 } },
    ],
  },
  {
    name: 'a clock that goes backwards drains nothing and never moves the last update back',
    rule: gc(1, 3),
    steps: [
      { at: 10_000, cost: 2, expect: { allowed: true, remaining: 1 } },
      // no drain going back, but the one token left is still there
      { at: 5_000, expect: { allowed: true, remaining: 0, resetAfter: 1, fullAfter: 3 } },
      { at: 5_000, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
      // one second after 10 s, not six after 5 s: backlog 3 - 1 = 2, then 3 again
      { at: 11_000, expect: { allowed: true, remaining: 0 } },
      { at: 11_500, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
    ],
  },
  {
    name: 'fractional rps with a fractional cost',
    rule: gc(0.25, 2),
    steps: [
      // one token every 4 s
      { at: 0, cost: 2, expect: { allowed: true, remaining: 0, resetAfter: 4, fullAfter: 8 } },
      // backlog 2 - 0.75 = 1.25: a quarter token (1 s) short, full in 5 s
      { at: 3_000, expect: { allowed: false, remaining: 0, retryAfter: 1, resetAfter: 1, fullAfter: 5 } },
      { at: 4_000, expect: { allowed: true, remaining: 0 } },
      // backlog 2: half a token is 2 s away
      { at: 4_000, cost: 0.5, expect: { allowed: false, remaining: 0, retryAfter: 2 } },
      { at: 6_000, cost: 0.5, expect: { allowed: true, remaining: 0, fullAfter: 8 } },
      { at: 8_000, cost: 0.5, expect: { allowed: true, remaining: 0, resetAfter: 4 } },
      // backlog 1.5: half a whole token is missing
      { at: 10_000, expect: { allowed: false, remaining: 0, retryAfter: 2, resetAfter: 2 } },
    ],
  },
  {
    name: 'a fractional cost takes a fraction of a token; remaining counts whole tokens',
    rule: gc(1, 2),
    steps: [
      // backlog 0.5: 1.5 tokens free, shown as 1
      { at: 0, cost: 0.5, expect: { allowed: true, remaining: 1, resetAfter: 1, fullAfter: 1 } },
      { at: 0, cost: 1, expect: { allowed: true, remaining: 0, resetAfter: 1, fullAfter: 2 } },
      { at: 0, cost: 0.5, expect: { allowed: true, remaining: 0 } },
      { at: 0, cost: 0.25, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
      { at: 250, cost: 0.25, expect: { allowed: true, remaining: 0 } },
    ],
  },
  {
    name: 'a drain that comes to a whole number of tokens is counted as that number',
    rule: gc(2, 6),
    steps: [
      { at: 0, cost: 3, expect: { allowed: true, remaining: 3 } },
      // backlog 3 - 0.264 + 3 = 5.736
      { at: 132, cost: 3, expect: { allowed: true, remaining: 0 } },
      // 5.736 - 1.98 + 1 = 4.756
      { at: 1_122, expect: { allowed: true, remaining: 1 } },
      // 4.756 - 2.756 is 2 (in doubles, 2.0000000000000004), + 1 = 3: three tokens left...
      { at: 2_500, expect: { allowed: true, remaining: 3 } },
      // ...so a cost of 3 fits exactly
      { at: 2_500, cost: 3, expect: { allowed: true, remaining: 0 } },
    ],
  },
  {
    name: '100000 a day',
    rule: gc(PER_DAY, 100_000),
    steps: [
      { at: 0, cost: 100_000, expect: { allowed: true, remaining: 0, resetAfter: 1, fullAfter: 86_400 } },
      { at: 0, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
      // 49999.5 tokens back after 43199.568 s (just under half a day): half a token short
      { at: 43_199_568, cost: 50_000, expect: { allowed: false, remaining: 49_999, retryAfter: 1 } },
      // 864 ms (one token) later: backlog 49999.5, then 99999.5; full in 99999.5 * 864 ms
      { at: 43_200_432, cost: 50_000, expect: { allowed: true, remaining: 0, resetAfter: 1, fullAfter: 86_400 } },
    ],
  },
  {
    name: 'a very high rps: a microsecond per token',
    rule: gc(1_000_000, 1_000),
    steps: [
      // the whole backlog drains in 1 ms
      { at: 0, cost: 1_000, expect: { allowed: true, remaining: 0, resetAfter: 1, fullAfter: 1 } },
      { at: 0, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
      { at: 1, expect: { allowed: true, remaining: 999, resetAfter: 1, fullAfter: 1 } },
      { at: 1, cost: 999, expect: { allowed: true, remaining: 0 } },
      { at: 1, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
      { at: 2, cost: 1_000, expect: { allowed: true, remaining: 0 } },
    ],
  },
  {
    name: "the seeds' worked example: rps 10, burst 50, as the token bucket",
    rule: gc(10, 50),
    steps: [
      ...Array.from({ length: 50 }, (_, i): Step => ({
        at: 0,
        expect: { allowed: true, remaining: 49 - i, delay: 0 },
      })),
      { at: 0, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
      // backlog 50 - 10 = 40, then 41
      { at: 1_000, expect: { allowed: true, remaining: 9 } },
    ],
  },
  {
    name: '1e9 tokens a month, spent, then a request every 2 ms for 10 s: exactly what comes back (3,858) is admitted',
    rule: gc(MONTHLY_BILLION_RPS, 1e9),
    steps: monthlyBillionSteps(),
  },
  {
    name: 'a backlog written under a larger burst is the smaller burst when the limit is lowered',
    // 300 per 30 s, then 30 per 30 s
    rule: gc(10, 300),
    steps: [
      // backlog 300: the key lives 30 s
      { at: 0, cost: 300, expect: { allowed: true, remaining: 0, fullAfter: 30 } },
      // a backlog of 300 is 270 more than 30 per 30 s can hold: 30, a token back in 1 s, not 271
      { at: 0, rule: gc(1, 30), expect: { allowed: false, remaining: 0, retryAfter: 1, resetAfter: 1, fullAfter: 30 } },
      { at: 1_000, rule: gc(1, 30), expect: { allowed: true, remaining: 0, fullAfter: 30 } },
      { at: 1_000, rule: gc(1, 30), expect: { allowed: false, remaining: 0, retryAfter: 1 } },
    ],
  },
  {
    name: 'blockFor: a refusal blocks for blockMs, however the backlog drains',
    rule: { ...gc(1, 2), blockMs: 10_000 },
    steps: [
      { at: 0, expect: { allowed: true, remaining: 1 } },
      { at: 0, expect: { allowed: true, remaining: 0, fullAfter: 2 } },
      { at: 0, expect: { allowed: false, remaining: 0, retryAfter: 10, resetAfter: 10, fullAfter: 10 } },
      { at: 5_000, expect: { allowed: false, remaining: 0, retryAfter: 5, fullAfter: 5 } },
      { at: 10_000, cost: 3, expect: { allowed: false, remaining: 2, retryAfter: Infinity } },
      { at: 10_000, cost: 2, expect: { allowed: true, remaining: 0 } },
      { at: 10_500, expect: { allowed: false, remaining: 0, retryAfter: 10 } },
      { at: 20_499, expect: { allowed: false, retryAfter: 1 } },
      { at: 20_500, expect: { allowed: true, remaining: 1 } },
    ],
  },
  // a request every 10 s, a block of 2 s: the block ends long before the backlog has drained
  ...keepAndReset('blockFor: what a block leaves when it ends', { ...gc(0.1, 2), blockMs: 2_000 }, [
    { at: 0, expect: { allowed: true, remaining: 1 } },
    { at: 0, expect: { allowed: true, remaining: 0 } },
    {
      at: 0,
      expect: { allowed: false, remaining: 0, retryAfter: 10, fullAfter: 20 },
      reset: { allowed: false, remaining: 0, retryAfter: 2, resetAfter: 2, fullAfter: 2 },
    },
    {
      // kept: the backlog has drained by 0.2 only: refused, and that refusal blocks again
      at: 2_000,
      expect: { allowed: false, remaining: 0, retryAfter: 8 },
      // reset: an empty backlog, as if the key were new
      reset: { allowed: true, remaining: 1 },
    },
    {
      at: 2_000,
      expect: { allowed: false, remaining: 0, retryAfter: 8 },
      reset: { allowed: true, remaining: 0 },
    },
  ]),
  ...settlingBucketCases('gcra'),
];
