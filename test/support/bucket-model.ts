import type { Held, Outcome } from '../../lib/algorithms/algorithm.types.js';
import { decideAll, expiresAt, isFull, modelOf, settleState } from '../../lib/algorithms/decide.js';
import { type Charge, chargedCost, settledCharge, toDecision } from '../../lib/stores/decision.js';
import type { RateLimitDecision, RateLimitRequest } from '../../lib/stores/rate-limit-store.interface.js';

/**
 * The pure model (`decideAll`) as a store: its states in a map by key, charged only when every policy
 * admits, given back and settled as the stores do. What the differential specs hold the stores to.
 */
export class BucketModel {
  /** Each key's state, and when the memory store drops it (full again; only used to pick times). */
  private readonly buckets = new Map<string, { state: Held; fullAt: number }>();
  /** The `at` of each state the last `consume` decided: when it charged, if it was admitted. */
  private chargedAt: number[] = [];

  /**
   * @param drops whether a state is gone once its bucket is full again under the rule that wrote it,
   * as the memory store drops it (and Redis expires it on a clock that is its own); false: kept, as
   * Redis keeps every key on a pinned clock that lies ahead of its own (`CASE_EPOCH`). The two read
   * alike while time moves forward under one rule (a kept full state is full); not when a slower
   * rate (a factor on a token bucket) reads a state kept past the time a faster one filled it in.
   */
  constructor(private readonly drops = true) {}

  get keys(): string[] {
    return [...this.buckets.keys()];
  }

  consume(requests: readonly RateLimitRequest[], now: number): RateLimitDecision[] {
    const verdict = decideAll(this.entries(requests, now), now, true);
    this.chargedAt = verdict.next.map((state) => state.at);
    // all charged states, or only those whose block a refusal starts
    if (verdict.allowed || verdict.blocks !== undefined) {
      requests.forEach(({ key, rule }, i) => {
        if (!verdict.allowed && !verdict.blocks![i]) return;
        const state = verdict.next[i];
        // full (a reservation of 0 that found nothing taken): the stores drop the key
        if (verdict.outcomes[i].fullMs === 0) this.buckets.delete(key);
        else this.buckets.set(key, { state, fullAt: expiresAt(modelOf(rule), state, rule) });
      });
    }
    return verdict.outcomes.map((outcome, i) => toDecision(requests[i], outcome));
  }

  peek(request: RateLimitRequest, now: number): Outcome {
    return decideAll(this.entries([request], now), now, false).outcomes[0];
  }

  fullAt(key: string): number | undefined {
    return this.buckets.get(key)?.fullAt;
  }

  /**
   * Each request's state: none once it is full (the memory store has dropped it). Kept past that,
   * a state is the same as none while time moves forward, but for one a refund emptied, whose
   * window start or block end (an anchored window, a quota's period) would still count.
   */
  private entries(requests: readonly RateLimitRequest[], now: number) {
    return requests.map(({ key, rule, cost }) => {
      const bucket = this.buckets.get(key);
      return { state: this.held(bucket, now), rule, cost };
    });
  }

  /**
   * Gives back what `consume` took for an admitted request (its `charges`, one per policy, as
   * settles left them), as the stores do: the charge's rule, on the state as of `now`; nothing
   * given back leaves it.
   */
  refund(charges: readonly Charge[], now: number): void {
    charges.forEach((charge) => {
      const { key, rule } = charge.request;
      const state = this.held(this.buckets.get(key), now);
      // the memory store has dropped a bucket that is full, and a charge of nothing (a reservation
      // of 0) has nothing to give back
      if (state === undefined || chargedCost(charge) === 0) return;
      const model = modelOf(rule);
      const current = model.current(state, now, rule);
      const refunded = model.refund(current, rule, chargedCost(charge), charge.at);
      if (refunded === current) return;
      // full again once given back: the stores drop the key, so the next request finds none (an
      // anchored window or a quota's period then starts afresh, as if the charge never came)
      if (isFull(model, refunded, rule)) this.buckets.delete(key);
      else this.buckets.set(key, { state: refunded, fullAt: expiresAt(model, refunded, rule) });
    });
  }

  /**
   * Settles a charge to `actual` tokens as the stores do (`settleState` on the state as of `now`,
   * none once it is full): what the settle answers, and the charge it leaves.
   */
  settle(charge: Charge, actual: number, now: number): { charge: Charge; decision: RateLimitDecision } {
    const { key, rule } = charge.request;
    const state = this.held(this.buckets.get(key), now);
    const { next, changed, outcome } = settleState(state, now, rule, chargedCost(charge), actual, charge.at);
    if (changed) {
      // full again: the stores drop the key (see `refund`)
      if (outcome.fullMs === 0) this.buckets.delete(key);
      else this.buckets.set(key, { state: next, fullAt: expiresAt(modelOf(rule), next, rule) });
    }
    return settledCharge(charge, actual, outcome);
  }

  /** A bucket's state as of `now`: none once it is gone (see `drops`). */
  private held(bucket: { state: Held; fullAt: number } | undefined, now: number): Held | undefined {
    return bucket !== undefined && (!this.drops || bucket.fullAt > now) ? bucket.state : undefined;
  }

  /** What the request `consume` just admitted charged: each policy's request, and its charged state's `at`. */
  charges(requests: readonly RateLimitRequest[]): Charge[] {
    return requests.map((request, i) => ({ request, at: this.chargedAt[i] }));
  }
}
