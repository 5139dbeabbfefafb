/**
 * Milliseconds, rounded up, that `tokens` take to refill at `rps` tokens per second.
 * The Lua scripts compute the same expression in the same order (`math.ceil(n * 1000 / rps)`),
 * so both stores round alike.
 */
export function durationMs(tokens: number, rps: number): number {
  return Math.ceil((tokens * 1000) / rps);
}

/**
 * `tokens`, or the whole number it lies within a billionth of `burst` of. A drain or refill by
 * `elapsed * rps / 1000` leaves a few units of rounding in the last place (4.756 drained by
 * 2.756 gives 2.0000000000000004), and a backlog that far above a whole number would cost a
 * whole token in `remaining` and in every "does it fit" test. A billionth of the burst is far
 * above that rounding, and as time a billionth of the bucket's fill time: under 1 ms for any
 * bucket that fills in less than 11 days. Lua: `whole_if_near`, the same expression.
 */
export function wholeIfNear(tokens: number, burst: number): number {
  const whole = Math.floor(tokens + 0.5);
  return Math.abs(tokens - whole) <= burst * 1e-9 ? whole : tokens;
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
