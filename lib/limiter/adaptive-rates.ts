import type { RoutePolicy } from '../routes/route-policy.js';

/** How often the one shared timer steers every adaptive policy, ms. */
export const ADAPTIVE_TICK_MS = 500;
/** The latencies of the last this many ms make a policy's p99. */
export const ADAPTIVE_WINDOW_MS = 2_000;
/** Latencies kept per policy, the newest: a p99 of this many is sorted twice a second at most. */
const SAMPLES = 1_024;
/** Factor a rate is multiplied by per tick while its p99 is above target (about halved in 1.5 s). */
const STEP_DOWN = 0.75;
/** Added to a factor per tick while its p99 is below target (from 0.1 back to 1 in 4.5 s). */
const STEP_UP = 0.1;

/** One adaptive policy's recent latencies (a ring) and its factor. */
class Steered {
  readonly at = new Float64Array(SAMPLES);
  readonly latency = new Float64Array(SAMPLES);
  count = 0;
  factor = 1;

  constructor(readonly target: Required<NonNullable<RoutePolicy['adaptive']>>) {}

  add(now: number, latencyMs: number): void {
    const slot = this.count++ % SAMPLES;
    this.at[slot] = now;
    this.latency[slot] = latencyMs;
  }

  /**
   * The p99 of the latencies recorded since `since`: the latency that at most 1 % of them exceed,
   * and at least one when there are two or more. Under 100 a plain p99 is the slowest, and one
   * request held by a stall of the app (a collection pause, a heavy request beside it) would
   * scale the policy down for the whole window: one stall is not a trend. `undefined`: none.
   */
  p99(since: number): number | undefined {
    const recent: number[] = [];
    for (let i = Math.max(0, this.count - SAMPLES); i < this.count; i++) {
      const slot = i % SAMPLES;
      if (this.at[slot] >= since) recent.push(this.latency[slot]);
    }
    if (recent.length === 0) return undefined;
    recent.sort((a, b) => a - b);
    return recent[Math.max(0, Math.min(Math.ceil(recent.length * 0.99) - 1, recent.length - 2))];
  }
}

/**
 * Steers each `adaptive` policy's factor (see `RateLimiterService.setScale`) from the latency of
 * the requests it admits: every 500 ms, down by a quarter (not below `min`) while the p99 of the
 * last 2 s is above `latency`, up by 0.1 (to 1 at most) while it is below or nothing was measured
 * (no sign of load). One `unref()`'d timer serves every policy; it runs only while a policy has
 * latencies to read or a factor below 1, and stops at shutdown.
 *
 * @param scale sets a policy's factor (`RateLimiterService.setScale`)
 * @param now the clock latencies are timed by, ms (tests pin it and call `tick`)
 */
export class AdaptiveRates {
  private readonly policies = new Map<string, Steered>();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly scale: (name: string, factor: number) => void,
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** One request the policy admitted took `latencyMs` from admission to its answer. */
  record(policy: RoutePolicy, latencyMs: number): void {
    let steered = this.policies.get(policy.name);
    if (steered === undefined) this.policies.set(policy.name, (steered = new Steered(policy.adaptive!)));
    steered.add(this.now(), latencyMs);
    this.timer ??= setInterval(() => this.tick(), ADAPTIVE_TICK_MS).unref();
  }

  /** The factor the module steers a policy to now (1 for one it has not scaled). */
  factor(name: string): number {
    return this.policies.get(name)?.factor ?? 1;
  }

  /** Moves every policy's factor one step; stops the timer once all are back at 1 and idle. */
  tick(): void {
    const since = this.now() - ADAPTIVE_WINDOW_MS;
    let busy = false;
    for (const [name, steered] of this.policies) {
      const p99 = steered.p99(since);
      const { latency, min } = steered.target;
      const factor =
        p99 !== undefined && p99 > latency
          ? Math.max(min, steered.factor * STEP_DOWN)
          : Math.min(1, steered.factor + STEP_UP);
      if (factor !== steered.factor) this.steer(name, steered, factor);
      if (p99 !== undefined || factor < 1) busy = true;
      else this.policies.delete(name);
    }
    if (!busy) this.close();
  }

  /**
   * Sets a policy's factor. `adaptive.min` keeps the policy's own refill within the start-time
   * bound, but another policy of the same name (a handler's in place of the module's) may not
   * take it, and `setScale` refuses it then: that policy's factor stays where it is.
   */
  private steer(name: string, steered: Steered, factor: number): void {
    try {
      this.scale(name, factor);
      steered.factor = factor;
    } catch (error) {
      if (!(error instanceof RangeError)) throw error;
    }
  }

  /** Stops the timer (a later `record` starts it again). */
  close(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }

  onApplicationShutdown(): void {
    this.close();
  }
}
