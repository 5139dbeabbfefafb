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
