import type { Algorithm, Rule } from '../../lib/algorithms/algorithm.types.js';
import { windowMs } from '../../lib/algorithms/conversions.js';
import type { RateLimitDecision } from '../../lib/stores/rate-limit-store.interface.js';

/** One request of a case: when it arrives (ms after `CASE_EPOCH`), its cost, what it gets. */
export interface Step {
  at: number;
  cost?: number;
  /**
   * The rule this request is decided under, when not the case's (the policy changed between
   * deploys and the bucket outlived the change, or the instance deciding it has the policy under
   * a factor: `Rule.limit`). The same algorithm, so the same key.
   */
  rule?: Rule;
  /**
   * The index of an earlier, admitted step whose decision is given back (`store.refund`) at this
   * step's `at`, before this step's request: a `concurrency` slot released when its request ends.
   */
  release?: number;
  /**
   * A settle (`store.settle`) at this step's `at`, before this step's request (after a `release`):
   * the decision of the earlier, admitted step `step` made up to `actual` tokens in all (more taken
   * past empty, as far as the rule's `debt`, or the difference given back). `expect`: what the
   * settle answers, the bucket after it as a peek of cost 0 sees it.
   */
  settle?: { step: number; actual: number; expect?: Partial<Omit<RateLimitDecision, 'policy'>> };
  /**
   * What the request's decision holds (and a settle's, what its answer holds): the fields given.
   * `debt` is held to exactly, given or not: a decision that gives none expects none.
   */
  expect: Partial<Omit<RateLimitDecision, 'policy'>>;
}

/** A case: one bucket, a sequence of requests at fixed instants. */
export interface Case {
  name: string;
  rule: Rule;
  steps: Step[];
}

/**
 * The instant a case's `at: 0` stands for: a whole number of days (so every window that
 * divides a day starts on it) and decades ahead of the real clock. Redis expires keys on its
 * own clock at the absolute time the script sets (PEXPIREAT), so a pinned test clock must lie in
 * the future or its keys would vanish as soon as they are written.
 */
export const CASE_EPOCH = 46_300 * 86_400_000;

/** A rule of `algorithm`, as `rps` and `burst`. */
export function ruleOf(algorithm: Algorithm, rps: number, burst: number): Rule {
  return { algorithm, rps, burst };
}

/**
 * The longest a key of `rule` may live: the time from empty to full (from its debt's end past
 * empty, for a rule that settles). For the window algorithms the window, except the sliding
 * window counter, whose count still weighs on the next window, so two windows. With a block, the
 * block when it is longer.
 */
export function longestTtlMs(rule: Rule): number {
  return Math.max(rule.blockMs ?? 0, fullTtlMs(rule));
}

/** Windows a key of each algorithm may live, or `'refill'`: the time `burst` takes to refill at `rps`. */
const FULL_TTL: Record<Algorithm, number | 'refill'> = {
  token_bucket: 'refill',
  leaky_bucket: 'refill',
  fixed_window: 1,
  sliding_window_log: 1,
  sliding_window_counter: 2,
  gcra: 'refill',
  // the lease: a slot nobody gave back leaves the log when it ends
  concurrency: 1,
  // the period the rule carries (its window): a count of an earlier period is none
  quota: 1,
};

function fullTtlMs(rule: Rule): number {
  const windows = FULL_TTL[rule.algorithm];
  return windows === 'refill'
    ? Math.ceil(((rule.burst + (rule.debt ?? 0)) * 1000) / rule.rps)
    : windows * windowMs(rule.rps, rule.burst);
}

/** A budget of 1e9 tokens per 30 days: `limit: 1e9, window: '30d'`, 125/324 token per ms. */
export const MONTHLY_BILLION_RPS = 1e9 / (30 * 86_400);

/**
 * The 1e9-token monthly budget spent at once, then one request every 2 ms for 10 s: each step
 * expects exactly what fits. A token comes back every 324/125 = 2.592 ms, so the request at t ms
 * is admitted when floor(t * 125 / 324) whole tokens have come back since the budget was spent
 * and fewer were taken (integers, worked out exactly): 3,858 of the 5,000, where a tolerance that
 * grows with burst (a billionth of 1e9 is a whole token) once rounded every refill up to one.
 */
export function monthlyBillionSteps(): Step[] {
  const steps: Step[] = [{ at: 0, cost: 1e9, expect: { allowed: true, remaining: 0 } }];
  let admitted = 0;
  for (let at = 2; at <= 10_000; at += 2) {
    const allowed = Math.floor((at * 125) / 324) > admitted;
    if (allowed) admitted++;
    steps.push({ at, expect: { allowed, remaining: 0 } });
  }
  return steps;
}

/** A step of `keepAndReset`: `expect` under a block that keeps the bucket, `reset` (where it differs) under one that resets it. */
export type KeepOrResetStep = Step & { reset?: Step['expect'] };

/**
 * The same requests under `rule` (which has a block) twice: as its block's end keeps the bucket
 * (`then: 'keep'`, the plain `blockFor`) and as it resets it (`Rule.blockResets`). Each step
 * expects `expect` under keep and `reset` under reset (the same where none is given), so a table
 * shows side by side what a block's end leaves under each.
 */
export function keepAndReset(name: string, rule: Rule, steps: readonly KeepOrResetStep[]): Case[] {
  return [
    { name: `${name}: then 'keep'`, rule, steps: steps.map(({ reset: _, ...step }) => step) },
    {
      name: `${name}: then 'reset'`,
      rule: { ...rule, blockResets: true },
      steps: steps.map(({ reset, ...step }) => (reset === undefined ? step : { ...step, expect: reset })),
    },
  ];
}

/**
 * The settle cases of an algorithm whose quota comes back at `rps` (`token_bucket`, `gcra`,
 * `leaky_bucket`: GCRA's backlog is `burst` less the bucket's tokens, so they read alike): 10 tokens,
 * one a second, with a debt of 10 unless a case says less. A settle takes what a request cost past
 * its reservation (past empty: debt, paid back by time) or gives back what it did not use.
 */
export function settlingBucketCases(algorithm: 'token_bucket' | 'gcra' | 'leaky_bucket'): Case[] {
  const rule = (debt: number): Rule => ({ algorithm, rps: 1, burst: 10, debt });
  return [
    {
      name: 'settle: takes what a request cost past its reservation, or gives back what it did not use',
      rule: rule(10),
      steps: [
        { at: 0, cost: 2, expect: { allowed: true, remaining: 8 } },
        { at: 0, settle: { step: 0, actual: 5, expect: { allowed: true, remaining: 5 } }, expect: { remaining: 4 } },
        { at: 0, settle: { step: 0, actual: 1, expect: { allowed: true, remaining: 8 } }, expect: { remaining: 7 } },
        // a refund gives back what the decision holds since: 1
        { at: 0, release: 0, expect: { allowed: true, remaining: 7 } },
      ],
    },
    {
      name: 'settle: past empty is debt, refused (a reservation of 0 too) until time pays it back and the next fits',
      rule: rule(10),
      steps: [
        { at: 0, cost: 10, expect: { allowed: true, remaining: 0 } },
        {
          at: 0,
          settle: {
            step: 0,
            actual: 15,
            expect: { allowed: false, remaining: 0, retryAfter: 5, fullAfter: 15, debt: 5 },
          },
          // 5 s to pay the debt back, 1 s for the token
          expect: { allowed: false, remaining: 0, retryAfter: 6, fullAfter: 15, debt: 5 },
        },
        { at: 1_000, cost: 0, expect: { allowed: false, remaining: 0, retryAfter: 4, debt: 4 } },
        // paid back: a reservation of 0 is admitted, and takes nothing
        { at: 5_000, cost: 0, expect: { allowed: true, remaining: 0 } },
        { at: 5_000, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
        { at: 6_000, expect: { allowed: true, remaining: 0 } },
        // the reservation of 0, settled to what its request cost
        {
          at: 6_000,
          settle: { step: 3, actual: 3, expect: { allowed: false, remaining: 0, retryAfter: 3, debt: 3 } },
          expect: { allowed: false, retryAfter: 4, debt: 3 },
        },
      ],
    },
    {
      name: 'settle: takes the bucket no further past empty than its debt',
      rule: rule(4),
      steps: [
        { at: 0, cost: 5, expect: { allowed: true, remaining: 5 } },
        { at: 0, cost: 5, expect: { allowed: true, remaining: 0 } },
        // 20 more asked, 4 taken
        {
          at: 0,
          settle: { step: 0, actual: 25, expect: { allowed: false, remaining: 0, retryAfter: 4, debt: 4 } },
          expect: { allowed: false, retryAfter: 5, debt: 4 },
        },
        // at the debt's end already: nothing more is taken
        {
          at: 0,
          settle: { step: 0, actual: 40, expect: { allowed: false, retryAfter: 4, debt: 4 } },
          expect: { allowed: false, retryAfter: 5, debt: 4 },
        },
        // 5 given back to a bucket 4 past empty
        { at: 0, release: 1, expect: { allowed: true, remaining: 0 } },
      ],
    },
    {
      name: 'settle: after time has passed, takes from the bucket as it is then',
      rule: rule(10),
      steps: [
        { at: 0, cost: 4, expect: { allowed: true, remaining: 6 } },
        // 6 + 2 refilled, 5 more taken
        { at: 2_000, settle: { step: 0, actual: 9, expect: { remaining: 3 } }, expect: { remaining: 2 } },
        { at: 2_000, settle: { step: 0, actual: 2, expect: { remaining: 9 } }, expect: { remaining: 8 } },
      ],
    },
  ];
}
