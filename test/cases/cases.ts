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
 * The longest a key of `rule` may live: the time from empty to full. For the window
 * algorithms the window, except the sliding window counter, whose count still weighs on the
 * next window, so two windows. With a block, the block when it is longer.
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
  return windows === 'refill' ? Math.ceil((rule.burst * 1000) / rule.rps) : windows * windowMs(rule.rps, rule.burst);
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
