/**
 * A source of time for a store, integer milliseconds: `ManualClock` (nestjs-ratelimit/testing)
 * in tests, or any object with `now()`.
 */
export interface StoreClock {
  now(): number;
  /**
   * Only on a clock that moves when it is moved, and not otherwise (`ManualClock`): calls
   * `listener` after each move, until the function it returns is called. The module's
   * `leaky_bucket` waits on such a clock wake as it moves, with no timer; on any other clock they
   * are timed on real time and checked against the clock when the timer fires.
   */
  onChange?(listener: () => void): () => void;
}

/**
 * A store's `clock` option as a function returning ms: a `{ now() }` is read through its
 * method (so a clock object whose time the test moves is followed), a function (the older form,
 * still taken) is used as it is. `undefined` when it is neither.
 */
export function clockReader(clock: unknown): (() => number) | undefined {
  if (typeof clock === 'function') return clock as () => number;
  if (typeof (clock as Partial<StoreClock> | null | undefined)?.now === 'function')
    return () => (clock as StoreClock).now();
  return undefined;
}

/**
 * A store's `clock` option as the `StoreClock` it exposes (see `RateLimitStore.clock`): a
 * `{ now() }` as it is, a function as `{ now }`; `undefined` when it is neither.
 */
export function storeClock(clock: unknown): StoreClock | undefined {
  if (typeof clock === 'function') return { now: clock as () => number };
  return typeof (clock as Partial<StoreClock> | null | undefined)?.now === 'function'
    ? (clock as StoreClock)
    : undefined;
}
