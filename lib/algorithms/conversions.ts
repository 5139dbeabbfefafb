import type { ModelRule } from './model.types.js';

/**
 * Milliseconds, rounded up, that `tokens` take to refill at `rps` tokens per second.
 * The Lua scripts compute the same expression in the same order (`math.ceil(n * 1000 / rps)`),
 * so both stores round alike.
 */
export function durationMs(tokens: number, rps: number): number {
  return Math.ceil((tokens * 1000) / rps);
}

/**
 * How far from a whole number a refilled or drained count may lie and still be that number, as a
 * share of `burst`: 256 times a double's relative precision (`Number.EPSILON`, 2^-52), so 2^-44,
 * about 5.7e-14. A drain or refill by `elapsed * rps / 1000` rounds by up to a unit in the last
 * place of the largest number involved, which is at most `burst` (4.756 drained by 2.756 gives
 * 2.0000000000000004), and a state carries that rounding from every step since it was last
 * whole: a 1e9 GCRA backlog drained by 2 ms of a monthly budget between requests is 11 times
 * `burst * Number.EPSILON` off a whole number it reaches 125 requests later. The tolerance stays
 * at that scale, never near a real fraction of a token: a billionth of `burst`, the tolerance
 * before, is a whole token of a 1e9 budget. As time it is 5.7e-14 of the bucket's fill time,
 * under a microsecond for any bucket that fills in less than 200 days.
 */
export const WHOLE_TOLERANCE = 256 * Number.EPSILON;

/**
 * `tokens`, or the whole number it lies within floating-point rounding (`WHOLE_TOLERANCE` of
 * `burst`) of: a backlog or a bucket that far above or below a whole number would otherwise cost
 * a whole token in `remaining` and in every "does it fit" test. Lua: `whole_if_near`, the same
 * expression (Lua numbers are doubles too, and 2^-52 times a power of two is exact in both).
 */
export function wholeIfNear(tokens: number, burst: number): number {
  const whole = Math.floor(tokens + 0.5);
  return Math.abs(tokens - whole) <= burst * WHOLE_TOLERANCE ? whole : tokens;
}

/** Whole seconds, rounded up, of a millisecond duration. */
export function ceilSeconds(ms: number): number {
  return Math.ceil(ms / 1000);
}

/**
 * A window algorithm's window in whole milliseconds: `burst / rps` seconds (for
 * `limit`/`window` policies, the window as written), rounded to the nearest ms. Policies whose
 * window would be under 1 ms are refused at start. Lua: `window_ms`, the same expression.
 */
export function windowMs(rps: number, burst: number): number {
  return Math.max(1, Math.floor((burst * 1000) / rps + 0.5));
}

/** The end of the clock-aligned window of `w` ms that holds `at` (windows start at multiples of `w`), ms. */
export function windowEnd(at: number, w: number): number {
  return Math.floor(at / w) * w + w;
}

/**
 * What a window admits a request of `need` tokens under: what the window may hold, the rule's
 * scaled `limit` (`burst` when unscaled), or `need` when that is more. So a request whose cost is
 * above the scaled limit (but within `burst`, else it never passes) still gets into a window that
 * holds nothing yet: a lower factor slows it to one per window, never shuts it out, and no window
 * ever holds more than `burst`. Lua: `window_limit`, the same expression.
 */
export function windowLimit(rule: ModelRule, need: number): number {
  return Math.max(rule.limit ?? rule.burst, need);
}
