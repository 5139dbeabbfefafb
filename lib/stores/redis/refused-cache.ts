import type { Outcome } from '../../algorithms/algorithm.types.js';
import type { RateLimitRequest } from '../rate-limit-store.interface.js';

/** One refused request as Redis answered it. */
interface Refusal {
  /** Local time the call was sent, ms: Redis decided no earlier. */
  sentAt: number;
  /** Local time until which a request like it is certainly refused, ms. */
  until: number;
  /** Every policy of the request, by bucket key: its rate, burst, cost and outcome. */
  policies: Map<string, { rps: number; burst: number; cost: number; outcome: Outcome }>;
}

/** Most refused keys remembered; the oldest go first. */
const MAX_KEYS = 10_000;
/**
 * A wait rounds a fractional time up to whole ms (`ceil(43.000000001)` is 44), while the
 * admission test compares the unrounded amounts: Redis may admit 1 ms before the reported wait.
 */
const ROUNDING_MS = 1;
/** How long a refusal that ran out still marks its key as contended, ms. */
const LINGER_MS = 1_000;
/** Longest a refusal is reused, ms, so the headers it answers with stay fresh. */
const MAX_AGE_MS = 5_000;

/**
 * Refusals Redis gave, so that a flood from a refused client costs no Redis call per request.
 *
 * Sound because quota only comes back with time: when Redis says a request of `cost` fits in
 * `retryMs`, a request of the same cost on the same buckets cannot fit before then (what other
 * instances charge meanwhile only takes more), less the 1 ms a wait's rounding up may add. The wait counts from when the call was sent,
 * which is no later than when Redis decided, so a refusal is never reused for longer than Redis
 * would refuse. Only a `reset` brings quota back early: the store forgets its own resets' keys;
 * another instance's reset is seen once the cached refusal has run out.
 *
 * A request is answered from here only when one of its keys is cached as refused and every
 * policy of the request, with the same limit and cost, was part of that refused request, so the
 * answer carries every policy's headers.
 */
export class RefusedCache {
  private readonly refusals = new Map<string, Refusal>();

  /** The outcomes for `requests` at local time `now` when Redis would certainly refuse them, else `undefined`. */
  lookup(requests: readonly RateLimitRequest[], now: number): Outcome[] | undefined {
    for (const request of requests) {
      const refusal = this.refusals.get(request.key);
      if (refusal === undefined) continue;
      if (now >= refusal.until) {
        if (now >= refusal.until + LINGER_MS) this.refusals.delete(request.key);
        continue;
      }
      const outcomes = this.replay(refusal, requests, now - refusal.sentAt);
      if (outcomes !== undefined) return outcomes;
    }
    return undefined;
  }

  /** Remembers each refusing policy of a request Redis refused, sent at local time `sentAt`. */
  remember(requests: readonly RateLimitRequest[], outcomes: readonly Outcome[], sentAt: number): void {
    if (outcomes.every((outcome) => outcome.allowed)) {
      // charged: a refusal of these keys is over (and its remaining stale); it lingers as a mark
      for (const { key } of requests) {
        const refusal = this.refusals.get(key);
        if (refusal !== undefined && refusal.until > sentAt) refusal.until = sentAt;
      }
      return;
    }
    let refusal: Refusal | undefined;
    outcomes.forEach((outcome, i) => {
      if (outcome.allowed) return;
      refusal ??= {
        sentAt,
        until: sentAt,
        policies: new Map(
          requests.map(({ key, limit, cost }, j) => [key, { rps: limit.rps, burst: limit.burst, cost, outcome: outcomes[j] }]),
        ),
      };
      const until = sentAt + (outcome.retryMs < 0 ? MAX_AGE_MS : Math.min(outcome.retryMs - ROUNDING_MS, MAX_AGE_MS));
      const key = requests[i].key;
      this.refusals.delete(key); // re-inserted last: the Map's order is the eviction order
      this.refusals.set(key, { ...refusal, until });
      if (this.refusals.size > MAX_KEYS) this.refusals.delete(this.refusals.keys().next().value as string);
    });
  }

  /**
   * A key of `requests` whose refusal ran out less than a second ago, at local time `now`: a
   * flood may still be on it, so its next Redis call is best made one at a time, each caller
   * waiting for the call before it and looking here again (see `RedisStore`).
   */
  contended(requests: readonly RateLimitRequest[], now: number): string | undefined {
    for (const { key } of requests) {
      const refusal = this.refusals.get(key);
      if (refusal !== undefined && now < refusal.until + LINGER_MS) return key;
    }
    return undefined;
  }

  /** Forgets refusals of these keys (their buckets were reset). */
  forget(keys: readonly string[]): void {
    for (const key of keys) this.refusals.delete(key);
  }

  clear(): void {
    this.refusals.clear();
  }

  /** The refusal's outcomes, `elapsed` ms on, when it covers exactly these requests. */
  private replay(refusal: Refusal, requests: readonly RateLimitRequest[], elapsed: number): Outcome[] | undefined {
    const outcomes: Outcome[] = [];
    for (const { key, limit, cost } of requests) {
      const policy = refusal.policies.get(key);
      if (policy === undefined || policy.rps !== limit.rps || policy.burst !== limit.burst || policy.cost !== cost) {
        return undefined;
      }
      outcomes.push(aged(policy.outcome, elapsed));
    }
    return outcomes;
  }
}

/**
 * An outcome `elapsed` ms later, as far as time alone changes it: the wait less the time passed
 * and the rounding, so never longer than Redis's own; remaining as it was.
 */
function aged(outcome: Outcome, elapsed: number): Outcome {
  const retryMs = outcome.retryMs <= 0 ? outcome.retryMs : Math.max(0, outcome.retryMs - ROUNDING_MS - elapsed);
  return {
    allowed: outcome.allowed || retryMs === 0,
    remaining: outcome.remaining,
    retryMs,
    resetMs: Math.max(0, outcome.resetMs - elapsed),
    nextMs: Math.max(0, outcome.nextMs - elapsed),
    delayMs: 0,
  };
}
