import type { Rule } from '../../lib/algorithms/algorithm.types.js';
import type { Case } from './cases.js';

/** At most `limit` requests in flight, a slot nobody gives back leaving after `leaseSeconds`. */
const cc = (limit: number, leaseSeconds: number): Rule => ({
  algorithm: 'concurrency',
  rps: limit / leaseSeconds,
  burst: limit,
});

/**
 * Concurrency at fixed instants (see `index.ts`): a request takes a slot while one is left; a
 * step's `release` gives an earlier request's slot back (its request ended). A slot comes back
 * when a request ends, which time does not tell: a refusal says retry in 1 s, and `resetAfter` is
 * 0 while a slot is left, else 1. A slot nobody gives back leaves when its lease ends.
 */
export const CONCURRENCY_CASES: Case[] = [
  {
    name: 'slots are taken up to the limit; a refusal says retry in 1 s',
    // 2 in flight, a lease of 10 s
    rule: cc(2, 10),
    steps: [
      { at: 0, expect: { allowed: true, limit: 2, remaining: 1, retryAfter: 0, resetAfter: 0, delay: 0 } },
      { at: 1_000, expect: { allowed: true, remaining: 0, resetAfter: 1 } },
      { at: 1_000, expect: { allowed: false, remaining: 0, retryAfter: 1, resetAfter: 1 } },
      // still 1 s, however long the leases have left
      { at: 2_000, expect: { allowed: false, remaining: 0, retryAfter: 1, resetAfter: 1 } },
      // the first request ends: its slot is free at once
      { at: 3_000, release: 0, expect: { allowed: true, remaining: 0, resetAfter: 1 } },
      { at: 3_000, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
      { at: 4_000, release: 1, expect: { allowed: true, remaining: 0 } },
    ],
  },
  {
    name: 'a release frees exactly one slot, even of two taken at the same ms',
    rule: cc(3, 60),
    steps: [
      { at: 0, expect: { allowed: true, remaining: 2, resetAfter: 0 } },
      { at: 0, expect: { allowed: true, remaining: 1, resetAfter: 0 } },
      { at: 500, expect: { allowed: true, remaining: 0, resetAfter: 1 } },
      { at: 500, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
      // one of the two slots of 0 ms comes back, the other stays taken
      { at: 1_000, release: 0, expect: { allowed: true, remaining: 0 } },
      { at: 1_000, expect: { allowed: false, remaining: 0, retryAfter: 1, resetAfter: 1 } },
      { at: 2_000, release: 1, expect: { allowed: true, remaining: 0 } },
      { at: 2_000, expect: { allowed: false, remaining: 0 } },
    ],
  },
  {
    name: 'a slot not given back comes back when its lease ends',
    // 2 in flight, a lease of 10 s: the requests of 0 s and 4 s never end
    rule: cc(2, 10),
    steps: [
      { at: 0, expect: { allowed: true, remaining: 1 } },
      { at: 4_000, expect: { allowed: true, remaining: 0 } },
      // 1 ms before the first lease ends: retry in 1 s, not the 1 ms left
      { at: 9_999, expect: { allowed: false, remaining: 0, retryAfter: 1, resetAfter: 1 } },
      { at: 10_000, expect: { allowed: true, remaining: 0 } },
      { at: 10_000, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
      // both leases of 0 s and 4 s have ended: only the slot of 10 s is held
      { at: 14_000, expect: { allowed: true, remaining: 0 } },
      { at: 24_000, expect: { allowed: true, remaining: 1, resetAfter: 0 } },
    ],
  },
  {
    name: 'a cost above 1 takes that many slots, and its release gives them all back',
    rule: cc(5, 60),
    steps: [
      { at: 0, cost: 3, expect: { allowed: true, remaining: 2, resetAfter: 0 } },
      // 3 do not fit in 2: refused, and a slot is still left
      { at: 1_000, cost: 3, expect: { allowed: false, remaining: 2, retryAfter: 1, resetAfter: 0 } },
      { at: 1_000, cost: 2, expect: { allowed: true, remaining: 0, resetAfter: 1 } },
      { at: 2_000, release: 0, cost: 3, expect: { allowed: true, remaining: 0 } },
      { at: 2_000, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
    ],
  },
  {
    name: 'a cost above the limit can never pass and takes nothing',
    rule: cc(2, 10),
    steps: [
      { at: 0, cost: 3, expect: { allowed: false, remaining: 2, retryAfter: Infinity, resetAfter: 0 } },
      { at: 0, cost: 2, expect: { allowed: true, remaining: 0, resetAfter: 1 } },
      { at: 500, cost: 3, expect: { allowed: false, remaining: 0, retryAfter: Infinity } },
    ],
  },
];
