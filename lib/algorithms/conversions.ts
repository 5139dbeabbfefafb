/**
 * Milliseconds, rounded up, that `tokens` take to refill at `rps` tokens per second.
 * The Lua scripts compute the same expression in the same order (`math.ceil(n * 1000 / rps)`),
 * so both stores round alike.
 */
export function durationMs(tokens: number, rps: number): number {
  return Math.ceil((tokens * 1000) / rps);
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
