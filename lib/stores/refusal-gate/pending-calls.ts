import type { RateLimitRequest } from '../rate-limit-store.interface.js';

/** The charging calls on one key that are on their way to the server. */
interface Pending {
  calls: number;
  /** What one of them failed with, if one did. */
  failure?: unknown;
  drained?: Promise<unknown>;
  drain?: (failure: unknown) => void;
}

/**
 * Charging calls on their way to the server, by key, while the gate is on: how many,
 * and, once a caller waits for them, a promise that settles when the last has landed (its
 * answer remembered). A flood's requests wait for the calls already on their buckets rather
 * than send calls of their own (see `RefusalGate`).
 */
export class PendingCalls {
  private readonly byKey = new Map<string, Pending>();

  /** Counts a charging call on these keys as on its way. */
  depart(requests: readonly RateLimitRequest[]): void {
    for (const { key } of requests) {
      const pending = this.byKey.get(key);
      if (pending === undefined) this.byKey.set(key, { calls: 1 });
      else pending.calls++;
    }
  }

  /**
   * Counts a charging call on these keys as landed, answered or failed (`failure`); the last one
   * to land lets those waiting go on.
   */
  land(requests: readonly RateLimitRequest[], failure?: unknown): void {
    for (const { key } of requests) {
      const pending = this.byKey.get(key)!;
      if (failure !== undefined) pending.failure ??= failure;
      if (--pending.calls > 0) continue;
      this.byKey.delete(key);
      pending.drain?.(pending.failure);
    }
  }

  /**
   * When the calls on their way on the first of these keys that has any have all landed: with
   * what one of them failed with, if one did. `undefined`: there are none.
   */
  drained(requests: readonly RateLimitRequest[]): Promise<unknown> | undefined {
    for (const { key } of requests) {
      const pending = this.byKey.get(key);
      if (pending !== undefined)
        return (pending.drained ??= new Promise<unknown>((resolve) => (pending.drain = resolve)));
    }
    return undefined;
  }

  /** Charging calls on `key` still on their way behind the one landing now. */
  readonly behind = (key: string): number => (this.byKey.get(key)?.calls ?? 1) - 1;
}
