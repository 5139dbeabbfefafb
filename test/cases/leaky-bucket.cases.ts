import type { Rule } from '../../lib/algorithms/algorithm.types.js';
import { type Case, keepAndReset, monthlyBillionSteps, MONTHLY_BILLION_RPS, settlingBucketCases } from './cases.js';

const lb = (rps: number, burst: number): Rule => ({ algorithm: 'leaky_bucket', rps, burst });

/** 100000 tokens a day: one token leaves every 864 ms (86400 s / 100000). */
const PER_DAY = 100_000 / 86_400;

/**
 * The leaky bucket at fixed instants (see `index.ts`): a queue of `burst` tokens leaving at
 * rps. It admits what GCRA admits; an admitted request waits (`delay`, seconds, to the ms,
 * rounded up) until the tokens queued ahead of it have left: ceil(queue * 1000 / rps) ms.
 */
export const LEAKY_BUCKET_CASES: Case[] = [
  {
    name: 'a fresh queue takes burst requests, each waiting its turn, and then refuses',
    rule: lb(10, 5),
    steps: [
      // one request leaves every 100 ms
      { at: 0, expect: { allowed: true, remaining: 4, retryAfter: 0, resetAfter: 1, fullAfter: 1, delay: 0 } },
      { at: 0, expect: { allowed: true, remaining: 3, delay: 0.1 } },
      { at: 0, expect: { allowed: true, remaining: 2, delay: 0.2 } },
      { at: 0, expect: { allowed: true, remaining: 1, delay: 0.3 } },
      { at: 0, expect: { allowed: true, remaining: 0, resetAfter: 1, fullAfter: 1, delay: 0.4 } },
      { at: 0, expect: { allowed: false, remaining: 0, retryAfter: 1, delay: 0 } },
      // the first has left: the queue holds 4 again
      { at: 100, expect: { allowed: true, remaining: 0, delay: 0.4 } },
      // 900 ms later the queue of 5 has drained
      { at: 1_000, expect: { allowed: true, remaining: 4, delay: 0 } },
    ],
  },
  {
    name: 'a delay is rounded up to the millisecond',
    rule: lb(3, 3),
    steps: [
      { at: 0, expect: { allowed: true, remaining: 2, delay: 0 } },
      // 1000 / 3 = 333.3 ms, 2000 / 3 = 666.7 ms
      { at: 0, expect: { allowed: true, remaining: 1, delay: 0.334 } },
      { at: 0, expect: { allowed: true, remaining: 0, delay: 0.667 } },
      { at: 0, expect: { allowed: false, remaining: 0, retryAfter: 1, delay: 0 } },
      // queue 3 - 1.5 = 1.5 tokens: 500 ms ahead
      { at: 500, expect: { allowed: true, remaining: 0, delay: 0.5 } },
    ],
  },
  {
    name: 'the queue drains continuously at rps',
    rule: lb(2, 4),
    steps: [
      { at: 0, cost: 2, expect: { allowed: true, remaining: 2, delay: 0 } },
      { at: 0, cost: 2, expect: { allowed: true, remaining: 0, fullAfter: 2, delay: 1 } },
      { at: 0, expect: { allowed: false, remaining: 0, retryAfter: 1, delay: 0 } },
      // queue 3.5: half a token (250 ms) too long
      { at: 250, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
      { at: 500, expect: { allowed: true, remaining: 0, delay: 1.5 } },
      // the queue of 4 at 500 ms has drained by 2.5 s
      { at: 2_500, expect: { allowed: true, remaining: 3, delay: 0 } },
    ],
  },
  {
    name: 'a cost above what is left is refused, takes nothing and waits for nothing',
    rule: lb(1, 10),
    steps: [
      { at: 0, cost: 8, expect: { allowed: true, remaining: 2, fullAfter: 8, delay: 0 } },
      { at: 0, cost: 3, expect: { allowed: false, remaining: 2, retryAfter: 1, delay: 0 } },
      { at: 0, cost: 2, expect: { allowed: true, remaining: 0, delay: 8 } },
      { at: 0, cost: 3, expect: { allowed: false, remaining: 0, retryAfter: 3, delay: 0 } },
      // queue 7 after 3 s; the 3 join behind it
      { at: 3_000, cost: 3, expect: { allowed: true, remaining: 0, delay: 7 } },
    ],
  },
  {
    name: 'a cost above burst can never pass and takes nothing',
    rule: lb(5, 5),
    steps: [
      {
        at: 0,
        cost: 6,
        expect: { allowed: false, remaining: 5, retryAfter: Infinity, resetAfter: 0, fullAfter: 0, delay: 0 },
      },
      { at: 0, cost: 5, expect: { allowed: true, remaining: 0, delay: 0 } },
      { at: 0, cost: 6, expect: { allowed: false, remaining: 0, retryAfter: Infinity, delay: 0 } },
    ],
  },
  {
    name: 'a clock that goes backwards drains nothing',
    rule: lb(1, 3),
    steps: [
      { at: 10_000, cost: 2, expect: { allowed: true, remaining: 1, delay: 0 } },
      // nothing has left the queue of 2 going back
      { at: 5_000, expect: { allowed: true, remaining: 0, delay: 2 } },
      { at: 5_000, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
      // one second after 10 s, not six after 5 s: queue 3 - 1 = 2
      { at: 11_000, expect: { allowed: true, remaining: 0, delay: 2 } },
    ],
  },
  {
    name: 'fractional rps with a fractional cost',
    rule: lb(0.5, 2),
    steps: [
      // one token leaves every 2 s; queue 0.5 leaves 1.5 tokens, shown as 1
      { at: 0, cost: 0.5, expect: { allowed: true, remaining: 1, fullAfter: 1, delay: 0 } },
      { at: 0, cost: 0.5, expect: { allowed: true, remaining: 1, delay: 1 } },
      { at: 0, expect: { allowed: true, remaining: 0, fullAfter: 4, delay: 2 } },
      // queue 2 - 0.5 = 1.5: 3 s ahead
      { at: 1_000, cost: 0.5, expect: { allowed: true, remaining: 0, delay: 3 } },
      { at: 1_000, cost: 0.5, expect: { allowed: false, remaining: 0, retryAfter: 1, delay: 0 } },
    ],
  },
  {
    name: 'a drain that comes to a whole number of tokens is counted as that number',
    rule: lb(2, 6),
    steps: [
      { at: 0, cost: 3, expect: { allowed: true, remaining: 3, delay: 0 } },
      // queue 3 - 0.264 = 2.736: 1368 ms ahead
      { at: 132, cost: 3, expect: { allowed: true, remaining: 0, delay: 1.368 } },
      // queue 5.736 - 1.98 = 3.756: 1878 ms ahead
      { at: 1_122, expect: { allowed: true, remaining: 1, delay: 1.878 } },
      // queue 4.756 - 2.756 is 2 (in doubles, 2.0000000000000004): 1000 ms ahead, not 1001
      { at: 2_500, expect: { allowed: true, remaining: 3, delay: 1 } },
      // queue 3: a cost of 3 fits exactly
      { at: 2_500, cost: 3, expect: { allowed: true, remaining: 0, delay: 1.5 } },
    ],
  },
  {
    name: '100000 a day: a delay of up to a day',
    rule: lb(PER_DAY, 100_000),
    steps: [
      // (fractional costs keep every delay off a whole ms: 0.3 token is 259.2 ms)
      { at: 0, cost: 0.3, expect: { allowed: true, remaining: 99_999, delay: 0 } },
      { at: 0, expect: { allowed: true, remaining: 99_998, delay: 0.26 } },
      // queue 1.3: 1123.2 ms
      { at: 0, cost: 99_998, expect: { allowed: true, remaining: 0, delay: 1.124 } },
      // queue 99999.3: 0.3 token too long (259.2 ms); full in 86399395.2 ms
      { at: 0, expect: { allowed: false, remaining: 0, retryAfter: 1, fullAfter: 86_400, delay: 0 } },
      // half a day drains 50000: queue 49999.3, 43199395.2 ms ahead
      { at: 43_200_000, expect: { allowed: true, remaining: 49_999, delay: 43_199.396 } },
    ],
  },
  {
    name: 'a very high rps: a microsecond per token',
    rule: lb(1_000_000, 1_000),
    steps: [
      { at: 0, expect: { allowed: true, remaining: 999, delay: 0 } },
      // 1 µs ahead, rounded up to 1 ms
      { at: 0, cost: 998, expect: { allowed: true, remaining: 1, delay: 0.001 } },
      // 999 µs ahead
      { at: 0, expect: { allowed: true, remaining: 0, resetAfter: 1, fullAfter: 1, delay: 0.001 } },
      { at: 0, expect: { allowed: false, remaining: 0, retryAfter: 1, delay: 0 } },
      { at: 1, expect: { allowed: true, remaining: 999, delay: 0 } },
    ],
  },
  {
    name: '1e9 tokens a month, spent, then a request every 2 ms for 10 s: exactly what comes back (3,858) is admitted',
    rule: lb(MONTHLY_BILLION_RPS, 1e9),
    steps: monthlyBillionSteps(),
  },
  {
    name: 'a queue written under a larger burst is the smaller burst when the limit is lowered',
    rule: lb(10, 100),
    steps: [
      { at: 0, cost: 100, expect: { allowed: true, remaining: 0, fullAfter: 10 } },
      // a queue of 100 is 80 more than a queue of 20 holds: full, one leaves in 100 ms
      {
        at: 0,
        rule: lb(10, 20),
        expect: { allowed: false, remaining: 0, retryAfter: 1, resetAfter: 1, fullAfter: 2, delay: 0 },
      },
      // 19 ahead, 1.9 s
      { at: 100, rule: lb(10, 20), expect: { allowed: true, remaining: 0, fullAfter: 2, delay: 1.9 } },
    ],
  },
  {
    name: 'blockFor: a request refused by a full queue blocks the key for blockMs, however the queue drains',
    rule: { ...lb(1, 2), blockMs: 10_000 },
    steps: [
      { at: 0, expect: { allowed: true, remaining: 1, delay: 0 } },
      { at: 0, expect: { allowed: true, remaining: 0, delay: 1 } },
      { at: 0, expect: { allowed: false, remaining: 0, retryAfter: 10, fullAfter: 10, delay: 0 } },
      { at: 3_000, expect: { allowed: false, remaining: 0, retryAfter: 7, delay: 0 } },
      { at: 10_000, expect: { allowed: true, remaining: 1, delay: 0 } },
      { at: 10_000, cost: 3, expect: { allowed: false, remaining: 1, retryAfter: Infinity } },
      { at: 10_000, expect: { allowed: true, remaining: 0, delay: 1 } },
    ],
  },
  // a request drains every 10 s, a block of 2 s: the block ends long before the queue has drained
  ...keepAndReset('blockFor: what a block leaves when it ends', { ...lb(0.1, 2), blockMs: 2_000 }, [
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
  ...settlingBucketCases('leaky_bucket'),
];
