import type { RateLimitDecision } from '../../stores/rate-limit-store.interface.js';
import type { BucketShare } from './bucket-share.js';

/** What the last share the store granted said of its bucket, for the next one's size. */
export interface GrantedTake {
  /** The take's charge time, ms on the store's clock. */
  at: number;
  /** Whole tokens the bucket had left after it. */
  remaining: number;
  /** The share's size. */
  size: number;
  /** When its window ends, ms on the store's clock; `Infinity` for a bucket. */
  windowEnd: number;
}

/**
 * What this instance knows of one bucket key it is asked about (see `Shares`): how often it is
 * asked, the share it decides from, the take on its way, and what the store said to the last ones.
 * Counted per local second: no timer.
 */
export class HotKey {
  /** The local second the counts below are of. */
  private second = -1;
  private decisions = 0;
  private cost = 0;
  /** The same, for the second before (0 when that second saw none). */
  private lastDecisions = 0;
  private lastCost = 0;
  /** Local ms of the last request asked about. */
  seenAt = 0;
  /** The share requests are admitted from, if any (a retired one is replaced by the next take). */
  share: BucketShare | undefined;
  /** The take on its way, if any: the key's requests wait for it rather than send their own. */
  taking: Promise<void> | undefined;
  /** After a take the store refused: local ms before which the bucket cannot give one, and that refusal. */
  waitUntil = 0;
  refused: RateLimitDecision | undefined;
  /** After a take that failed (the store out of reach): local ms before which none is tried. */
  restUntil = 0;
  /** After a window's take was refused: what the window had left, the most the next take asks for. */
  room: number | undefined;
  /**
   * This instance's part of what is taken from the bucket, 0 to 1, from what the store's figures
   * say the other takers took between two of its takes (see `Shares.sizeOf`); a half to begin with.
   */
  part = 0.5;
  /** The last take the store granted. */
  granted: GrantedTake | undefined;

  /** Counts a request of `cost` asked about at `now` (local ms). */
  asked(cost: number, now: number): void {
    const second = Math.floor(now / 1000);
    if (second !== this.second) {
      const next = second === this.second + 1;
      this.lastDecisions = next ? this.decisions : 0;
      this.lastCost = next ? this.cost : 0;
      this.decisions = 0;
      this.cost = 0;
      this.second = second;
    }
    this.decisions++;
    this.cost += cost;
    this.seenAt = now;
  }

  /** Whether it was asked about at least `after` times in the last whole second or in this one so far. */
  hot(after: number): boolean {
    return this.decisions >= after || this.lastDecisions >= after;
  }

  /** Cost units a second asked for lately: the last whole second's, or this one's when it is busier already. */
  rate(): number {
    return Math.max(this.cost, this.lastCost);
  }
}
