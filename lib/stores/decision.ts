import type { Outcome } from '../algorithms/algorithm.types.js';
import { ceilSeconds } from '../algorithms/conversions.js';
import type { RateLimitDecision, RateLimitRequest } from './rate-limit-store.interface.js';

/** Turns an algorithm's millisecond outcome into the public decision, the same for every store. */
export function toDecision(request: RateLimitRequest, outcome: Outcome): RateLimitDecision {
  return {
    allowed: outcome.allowed,
    policy: request.policy,
    limit: request.limit.burst,
    remaining: outcome.remaining,
    resetAfter: ceilSeconds(outcome.nextMs),
    fullAfter: ceilSeconds(outcome.resetMs),
    retryAfter: outcome.allowed ? 0 : outcome.retryMs < 0 ? Infinity : Math.max(1, ceilSeconds(outcome.retryMs)),
    delay: outcome.delayMs / 1000,
  };
}
