/**
 * A source of time for a store, integer milliseconds: `ManualClock` (nestjs-ratelimit/testing)
 * in tests, or any object with `now()`.
 */
export interface StoreClock {
  now(): number;
}

/**
 * A store's `clock` option as a function returning ms: a `{ now() }` is read through its
 * method (so a clock object whose time the test moves is followed), a function (the older form,
 * still taken) is used as it is. `undefined` when it is neither.
 */
export function clockReader(clock: unknown): (() => number) | undefined {
  if (typeof clock === 'function') return clock as () => number;
  if (typeof (clock as Partial<StoreClock> | null | undefined)?.now === 'function') return () => (clock as StoreClock).now();
  return undefined;
}
