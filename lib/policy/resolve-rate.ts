import {
  burstWithWindow,
  expectedRate,
  expectedRateAtMost,
  expectedWindow,
  limitWithoutWindow,
  rateAndWindowGiven,
  rateGivenTwice,
  rateMissing,
  refillTooLong,
  windowRateTooHigh,
  windowWithoutLimit,
} from '../rate-limit.messages.js';
import { resolveDuration } from './durations.js';
import type { Conflict, Fail } from './invalid-policy.js';
import { isPositive, MAX_REFILL_DAYS, MAX_REFILL_SECONDS, MAX_RPS, resolveCount } from './policy-bounds.js';
import type { TierLimits } from './policy.types.js';

/**
 * The limits of a rate, as a rule's rate and capacity: `rps` (or `tokensPerSecond`) with
 * `burst`, or `limit` per `window` (`rps = limit / window`, `burst = limit`). `capacity` names
 * the field that gave the capacity, for messages.
 *
 * @throws InvalidPolicyError through `fail` or `conflict`
 */
export function resolveRate(
  limits: TierLimits,
  fail: Fail,
  conflict: Conflict,
): { rps: number; burst: number; capacity: 'burst' | 'limit' } {
  if (limits.rps !== undefined && limits.tokensPerSecond !== undefined && limits.rps !== limits.tokensPerSecond)
    conflict(rateGivenTwice());
  const rateField = limits.rps !== undefined ? 'rps' : 'tokensPerSecond';
  const rate = limits[rateField];
  if (rate !== undefined && (limits.limit !== undefined || limits.window !== undefined))
    conflict(rateAndWindowGiven(rateField, limits.limit !== undefined ? 'limit' : 'window'));

  if (rate !== undefined) {
    if (!isPositive(rate)) fail(rateField, rate, expectedRate());
    if (rate > MAX_RPS) fail(rateField, rate, expectedRateAtMost(MAX_RPS));
    const burst = resolveCount('burst', limits.burst === undefined ? Math.max(1, Math.ceil(rate)) : limits.burst, fail);
    if (burst / rate > MAX_REFILL_SECONDS) conflict(refillTooLong(burst, rate, rateField, MAX_REFILL_DAYS));
    return { rps: rate, burst, capacity: 'burst' };
  }

  if (limits.limit === undefined && limits.window === undefined) conflict(rateMissing());
  if (limits.burst !== undefined) conflict(burstWithWindow());
  if (limits.limit === undefined) conflict(windowWithoutLimit());
  const limit = resolveCount('limit', limits.limit, fail);
  if (limits.window === undefined) conflict(limitWithoutWindow());
  const seconds = resolveDuration('window', limits.window, 0, expectedWindow(), fail);
  if (limit / seconds > MAX_RPS) conflict(windowRateTooHigh(limit, seconds, MAX_RPS));
  return { rps: limit / seconds, burst: limit, capacity: 'limit' };
}
