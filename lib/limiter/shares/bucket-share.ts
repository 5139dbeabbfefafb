import { limitOf } from '../../stores/decision.js';
import type { Rule } from '../../algorithms/algorithm.types.js';
import type { RateLimitDecision, RateLimitRequest } from '../../stores/rate-limit-store.interface.js';

/**
 * A share of one bucket, taken from the store by this instance (see `Shares`): `size` tokens the
 * store charged like any decision (`taken`, its decision), which requests of the bucket's key are
 * then admitted from in this process, until they are spent or `until` passes. What the share has
 * admitted (less what was given back, plus what settles took more) is `used`; the store's charge is
 * made up to it (`synced`) when the share is retired, so what is left goes back.
 */
export class BucketShare {
  /** Tokens admitted from the share so far, refunds taken off and settles added. */
  used = 0;
  /** What the store's charge of `taken` holds: `size` until a settle makes it `used`. */
  synced: number;
  /** Whether it admits no more: spent, its hold over, or replaced by a newer share. */
  retired = false;
  /** The settle of its charge on its way to the store, if any (one at a time). */
  syncing: Promise<void> | undefined;
  /** Whether `used` moved while a settle was on its way, or that settle failed: it is settled again. */
  stale = false;
  /** The bucket's capacity as decisions give it (`limit`). */
  readonly limit: number;

  /**
   * @param request the take's store request (its key, rule and policy; `cost` the share's size)
   * @param taken the store's decision for the take, which holds its charge
   * @param base the store's figure when the share was taken: what it had left before the share
   * @param until local ms after which the share admits nothing (its hold, or its window, ends)
   * @param windowEnd local ms when the window the share was taken in ends; `Infinity` for a bucket
   */
  constructor(
    readonly request: RateLimitRequest,
    readonly taken: RateLimitDecision,
    readonly base: number,
    readonly until: number,
    readonly windowEnd: number,
  ) {
    this.synced = request.cost;
    this.limit = limitOf(request.rule);
  }

  /** The share's size, tokens. */
  get size(): number {
    return this.request.cost;
  }

  /**
   * Whether `request` is admitted from it at `now` (local ms): its cost fits in what is left, and
   * its rule is the one the share was taken under (a factor or a quota's new period makes another).
   */
  fits(request: RateLimitRequest, now: number): boolean {
    return !this.retired && !this.over(request, now) && this.used + request.cost <= this.size;
  }

  /** Whether it can admit nothing more of `request`'s: its hold (or window) has ended, or the request's rule is another. */
  over(request: RateLimitRequest, now: number): boolean {
    return now >= this.until || !sameRule(request.rule, this.request.rule);
  }

  /**
   * A decision as the store would give it with the share's tokens still in the bucket: `remaining`
   * the store's figure when the share was taken, less what the share has used since; a window's
   * reset counted to its end.
   */
  decision(policy: string, tier: string | undefined, allowed: boolean, now: number): RateLimitDecision {
    const { taken } = this;
    const windowLeft = this.windowEnd === Infinity ? undefined : Math.max(0, Math.ceil((this.windowEnd - now) / 1000));
    const decision: RateLimitDecision = {
      allowed,
      policy,
      limit: this.limit,
      remaining: Math.max(0, Math.floor(this.base - this.used)),
      resetAfter: windowLeft ?? taken.resetAfter,
      fullAfter: windowLeft ?? taken.fullAfter,
      retryAfter: 0,
      delay: 0,
    };
    if (tier !== undefined) decision.tier = tier;
    return decision;
  }
}

/** Whether two rules decide a bucket alike (a quota's rule is made per request: equal, not the same object). */
function sameRule(a: Rule, b: Rule): boolean {
  return (
    a === b ||
    (a.algorithm === b.algorithm &&
      a.rps === b.rps &&
      a.burst === b.burst &&
      a.limit === b.limit &&
      a.origin === b.origin &&
      a.debt === b.debt)
  );
}
