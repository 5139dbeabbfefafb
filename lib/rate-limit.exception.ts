import { HttpException, HttpStatus } from '@nestjs/common';
import { costExceedsBurst, limitExceeded, storeUnavailable } from './rate-limit.messages.js';
import type { RateLimitDecision } from './stores/rate-limit-store.interface.js';

/**
 * 429 Too Many Requests. The guard sets the rate-limit headers and `Retry-After` on the
 * response before throwing it, so an app's own exception filter keeps them.
 *
 * Body: `{ statusCode: 429, error: 'Too Many Requests', message, policy, retryAfter }`;
 * `retryAfter` is `null` when the request's cost exceeds the policy's capacity.
 *
 * @example throw new RateLimitExceededException(decision, cost)
 */
export class RateLimitExceededException extends HttpException {
  constructor(
    /** The decision of the policy that refused the request (the one that frees up last). */
    readonly decision: RateLimitDecision,
    /** Tokens the request asked that policy for. */
    readonly cost = 1,
  ) {
    super({ statusCode: HttpStatus.TOO_MANY_REQUESTS, error: 'Too Many Requests', ...refusal(decision, cost) }, HttpStatus.TOO_MANY_REQUESTS);
  }
}

/** What every context tells a refused client, in its own form: the message, the policy and when to retry. */
export interface Refusal {
  message: string;
  /** The policy that frees up last. */
  policy: string;
  /** Seconds until the request would be admitted; `null` when its cost exceeds the policy's capacity. */
  retryAfter: number | null;
}

/** The refusal of a request that took `cost` of the policy that `decision` describes. */
export function refusal(decision: RateLimitDecision, cost: number): Refusal {
  const never = !Number.isFinite(decision.retryAfter);
  return {
    message: never ? costExceedsBurst(decision.policy, cost, decision.limit) : limitExceeded(decision.policy, decision.retryAfter),
    policy: decision.policy,
    retryAfter: never ? null : decision.retryAfter,
  };
}

/** 503 Service Unavailable: the store failed and `failMode` is `'closed'`. */
export class RateLimitUnavailableException extends HttpException {
  constructor(cause?: unknown) {
    super(
      { statusCode: HttpStatus.SERVICE_UNAVAILABLE, error: 'Service Unavailable', message: storeUnavailable },
      HttpStatus.SERVICE_UNAVAILABLE,
      { cause },
    );
  }
}
