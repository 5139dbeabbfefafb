/** Options of `CircuitBreaker`. */
export interface CircuitBreakerOptions {
  /** Failures in a row that open the breaker. */
  threshold: number;
  /** How long an open breaker refuses calls before it lets one through as a probe, ms. */
  probeAfterMs: number;
  /** The clock, ms; tests pin it. Default `performance.now`. */
  now?: () => number;
}

/**
 * Stops calls to a store that keeps failing, so that while Redis is down or frozen a request
 * gets its `failMode` outcome at once instead of after `timeout`. After `threshold` failures in
 * a row it opens; while open, one call every `probeAfterMs` goes through as a probe, and its
 * success closes the breaker. No timers: time is read when a call asks.
 *
 * @example
 * if (!breaker.allow()) return fallback();
 * try { const result = await call(); breaker.succeeded(); return result; }
 * catch { breaker.failed(); return fallback(); }
 */
export class CircuitBreaker {
  private failures = 0;
  /** When the breaker (re)opened, ms; `undefined` while closed. */
  private openedAt: number | undefined;
  private probing = false;
  private readonly now: () => number;

  constructor(private readonly options: CircuitBreakerOptions) {
    this.now = options.now ?? (() => performance.now());
  }

  /** Whether calls are being stopped. */
  get isOpen(): boolean {
    return this.openedAt !== undefined;
  }

  /** Whether `allow()` would let a call through now, taking nothing (no probe). */
  wouldAllow(): boolean {
    return this.openedAt === undefined || (!this.probing && this.now() - this.openedAt >= this.options.probeAfterMs);
  }

  /** Whether a call may go to the store now: always while closed, one probe at a time while open. */
  allow(): boolean {
    if (this.openedAt === undefined) return true;
    if (!this.wouldAllow()) return false;
    this.probing = true;
    return true;
  }

  /** A call answered: the store works. Returns true when this closed the breaker. */
  succeeded(): boolean {
    const wasOpen = this.openedAt !== undefined;
    this.failures = 0;
    this.openedAt = undefined;
    this.probing = false;
    return wasOpen;
  }

  /** A call failed or timed out. Returns true when this opened the breaker. */
  failed(): boolean {
    const wasOpen = this.openedAt !== undefined;
    this.failures++;
    this.probing = false;
    if (wasOpen || this.failures >= this.options.threshold) this.openedAt = this.now();
    return !wasOpen && this.openedAt !== undefined;
  }
}
