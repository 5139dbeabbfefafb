import type { Rule } from '../algorithms/algorithm.types.js';
import { expectedCount, expectedCountAtMost, expectedFactorAtLeast } from '../rate-limit.messages.js';
import type { Fail } from './invalid-policy.js';

/**
 * Highest rate, tokens per second. The algorithms keep full precision up to it next to a
 * 13-digit millisecond clock (see `gcra.ts`); no per-client limit needs more.
 */
export const MAX_RPS = 1_000_000;
/**
 * Longest a bucket may take to refill (a window to last), days. Every key lives at most this
 * long, and a limit slower than one token a year is a typo (a rate in the wrong unit). With
 * `MAX_RPS`, it keeps `burst` and `limit` below 2^53, where every token still counts.
 */
export const MAX_REFILL_DAYS = 365;
/** `MAX_REFILL_DAYS` in seconds. */
export const MAX_REFILL_SECONDS = MAX_REFILL_DAYS * 86_400;
/**
 * Largest `limit` or `burst`: up to 2^53 - 1 a double holds every whole number, so a count moves
 * by exactly the tokens taken (1e300 + 1 is 1e300). A rate's limits stay far below it (`MAX_RPS`
 * for `MAX_REFILL_DAYS`); a `concurrency` or `quota` limit has only this bound.
 */
export const MAX_COUNT = Number.MAX_SAFE_INTEGER;
/**
 * The least factor (`RateLimiterService.setScale`) any policy takes: below it even the fastest one
 * (`MAX_RPS`, a burst of 1) would take more than `MAX_REFILL_DAYS` to refill.
 */
export const LEAST_FACTOR = 1 / (MAX_RPS * MAX_REFILL_SECONDS);

/**
 * Whether `rule` with its rate times `factor` (0 < factor <= 1) would take more than
 * `MAX_REFILL_DAYS` to refill, `burst / (rps * factor)`: the bound a policy is held to at start,
 * which a factor that scales it (`RateLimiterService.setScale`, `adaptive.min`) must keep too. A
 * factor of 1 always keeps it (the policy passed at start).
 */
export function refillTooSlow({ rps, burst }: Pick<Rule, 'rps' | 'burst'>, factor: number): boolean {
  return factor < 1 && burst / (rps * factor) > MAX_REFILL_SECONDS;
}

/** The factor at which `rule` takes `MAX_REFILL_DAYS` to refill: the least it takes (see `refillTooSlow`). */
export function leastFactor({ rps, burst }: Pick<Rule, 'rps' | 'burst'>): number {
  return burst / (rps * MAX_REFILL_SECONDS);
}

/**
 * What a factor of `rps` (`adaptive.min`, a `setScale` factor) must be for `who` (the policy, a
 * tier, every policy) to refill within `MAX_REFILL_DAYS`, as a message says it: at least the least
 * factor of `rule` (`LEAST_FACTOR` for every policy), rounded up to 3 significant digits.
 */
export function factorAtLeast(rule: Pick<Rule, 'rps' | 'burst'> | number, who: string): string {
  const least = typeof rule === 'number' ? rule : leastFactor(rule);
  const step = 10 ** (Math.floor(Math.log10(least)) - 2);
  const shown = Number((Math.ceil(least / step) * step).toPrecision(3));
  return expectedFactorAtLeast(shown, who, MAX_REFILL_DAYS);
}

/** Whether `value` is a finite number above 0. */
export function isPositive(value: unknown): value is number {
  return typeof value === 'number' && Number.isFinite(value) && value > 0;
}

/**
 * `value` as a count of tokens (`limit`, `burst`): a whole number from 1 to `MAX_COUNT`.
 *
 * @throws InvalidPolicyError through `fail`, naming `field`
 */
export function resolveCount(field: string, value: unknown, fail: Fail): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1) fail(field, value, expectedCount());
  if (value > MAX_COUNT) fail(field, value, expectedCountAtMost(MAX_COUNT));
  return value;
}
