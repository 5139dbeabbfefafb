import { expectedDaysAtMost } from '../rate-limit.messages.js';
import type { Fail } from './invalid-policy.js';
import { isPositive, MAX_REFILL_DAYS, MAX_REFILL_SECONDS } from './policy-bounds.js';

const WINDOW_UNITS: Record<string, number> = { ms: 0.001, s: 1, m: 60, h: 3600, d: 86_400 };
const WINDOW_PATTERN = /^(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?$/;

/**
 * Parses a window: seconds as a number, or a string such as `'10s'`, `'1m'`, `'1h'`, `'1d'`
 * (a bare number string is seconds). Returns seconds, or `undefined` when it cannot (anything
 * else, such as `null`, is none).
 *
 * @example parseWindow('15m') // 900
 */
export function parseWindow(window: unknown): number | undefined {
  if (typeof window === 'number') return isPositive(window) ? window : undefined;
  if (typeof window !== 'string') return undefined;
  const match = WINDOW_PATTERN.exec(window.trim());
  if (!match) return undefined;
  const seconds = Number(match[1]) * WINDOW_UNITS[match[2] ?? 's'];
  return isPositive(seconds) ? seconds : undefined;
}

/**
 * A policy's duration field (`window`, `lease`, `blockFor`) in seconds: parsed as a window is,
 * at least `leastMs` milliseconds (else `expected` says what it must be), and at most
 * `MAX_REFILL_DAYS`, the longest a key is kept.
 *
 * @throws InvalidPolicyError through `fail`, naming `field`
 */
export function resolveDuration(field: string, value: unknown, leastMs: number, expected: string, fail: Fail): number {
  const seconds = parseWindow(value);
  if (seconds === undefined || seconds * 1000 < leastMs) fail(field, value, expected);
  if (seconds > MAX_REFILL_SECONDS) fail(field, value, expectedDaysAtMost(MAX_REFILL_DAYS));
  return seconds;
}
