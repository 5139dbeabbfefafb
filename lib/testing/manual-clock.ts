import { parseWindow } from '../policy/resolve-policy.js';
import { invalidArgument } from '../rate-limit.messages.js';
import type { StoreClock } from '../stores/store-clock.js';

/**
 * A clock that moves only when the test moves it, integer milliseconds: give it to a store
 * (`new MemoryStore({ clock })`, `new RedisStore({ client, clock })`) and advance it instead of
 * sleeping. The module follows the store's clock: `leaky_bucket` waits end when it is moved past
 * their turn, and `X-RateLimit-Reset` counts from its time. `RateLimitTestingModule` makes one for you.
 *
 * It starts at `startMs` (Unix time, ms), by default the time it is made; any start works, 0
 * too: a `RedisStore` gives each key its time to full on this clock as a TTL on Redis's (see
 * `RedisStoreOptions.clock`). Redis counts a TTL on its own clock, so a key of a bucket that
 * refills within milliseconds may expire while this clock stands still. Pass a fixed start for
 * headers that never change between runs (`X-RateLimit-Reset`) or fixed windows aligned the
 * same way every run.
 *
 * @example
 * const clock = new ManualClock(Date.UTC(2026, 0, 1));
 * clock.advance('1s'); // or clock.advance(1_000)
 */
export class ManualClock implements StoreClock {
  private ms: number;
  private readonly listeners = new Set<() => void>();

  /** @param startMs where the clock starts, whole ms (default: now) */
  constructor(startMs: number = Date.now()) {
    this.ms = wholeMs('new ManualClock', 'startMs', startMs);
  }

  /** The clock's time, ms. */
  now(): number {
    return this.ms;
  }

  /**
   * Moves the clock forward and returns its new time. `by`: milliseconds (a whole number >= 0),
   * or a duration as a policy's `window` reads it (`'1s'`, `'250ms'`, `'15m'`, `'1h'`, `'1d'`; a
   * bare number in a string is seconds) that comes to whole milliseconds.
   */
  advance(by: number | string): number {
    if (typeof by === 'string') {
      const ms = (parseWindow(by) ?? NaN) * 1000;
      if (!(Math.abs(ms - Math.round(ms)) < 1e-6)) {
        throw new RangeError(
          invalidArgument(
            'ManualClock.advance',
            'by',
            by,
            "must be a duration of whole milliseconds such as '1s', '250ms', '15m'",
          ),
        );
      }
      return this.set(this.ms + Math.round(ms));
    }
    return this.set(this.ms + wholeMs('ManualClock.advance', 'by', by));
  }

  /** Sets the clock's time, whole ms, and returns it. Back is allowed: a bucket gains no quota from a clock gone back. */
  set(ms: number): number {
    this.ms = wholeMs('ManualClock.set', 'ms', ms);
    for (const listener of [...this.listeners]) listener();
    return this.ms;
  }

  /**
   * Calls `listener` after every move (`advance`, `set`) until the function it returns is
   * called. The module listens while `leaky_bucket` requests wait on this clock, so a move wakes
   * those whose turn has come, at once and with no timer.
   *
   * @example const stop = clock.onChange(() => console.log(clock.now()));
   */
  onChange(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => void this.listeners.delete(listener);
  }
}

/** `value` when it is a whole number of milliseconds >= 0. */
function wholeMs(where: string, argument: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
    throw new RangeError(invalidArgument(where, argument, value, 'must be a whole number of milliseconds >= 0'));
  }
  return value;
}
