import type { Algorithm, Limit } from '../../lib/algorithms/algorithm.types.js';
import { windowMs } from '../../lib/algorithms/conversions.js';
import type { RateLimitDecision } from '../../lib/stores/rate-limit-store.interface.js';

/** One request of a case: when it arrives (ms after `CASE_EPOCH`), its cost, what it gets. */
export interface Step {
  at: number;
  cost?: number;
  expect: Partial<Omit<RateLimitDecision, 'policy' | 'limit'>>;
}

/** A case: one bucket, a sequence of requests at fixed instants. */
export interface Case {
  name: string;
  limit: Limit;
  steps: Step[];
}

/**
 * The instant a case's `at: 0` stands for: a whole number of days (so every window that
 * divides a day starts on it) and decades ahead of the real clock. Redis expires keys on its
 * own clock at the absolute time the script sets (PXAT), so a pinned test clock must lie in
 * the future or its keys would vanish as soon as they are written.
 */
export const CASE_EPOCH = 46_300 * 86_400_000;

/** A limit of `algorithm`, as `rps` and `burst`. */
export function limitOf(algorithm: Algorithm, rps: number, burst: number): Limit {
  return { algorithm, rps, burst };
}

/**
 * The longest a key of `limit` may live: the time from empty to full. For the window
 * algorithms the window, except the sliding window counter, whose count still weighs on the
 * next window, so two windows.
 */
export function longestTtlMs(limit: Limit): number {
  const w = windowMs(limit.rps, limit.burst);
  switch (limit.algorithm) {
    case 'fixed_window':
    case 'sliding_window_log':
      return w;
    case 'sliding_window_counter':
      return 2 * w;
    default:
      return Math.ceil((limit.burst * 1000) / limit.rps);
  }
}
