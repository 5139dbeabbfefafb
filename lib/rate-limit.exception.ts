import { HttpException, HttpStatus } from '@nestjs/common';
import { costExceedsBurst, limitExceeded, storeUnavailable } from './rate-limit.messages.js';
import type { RateLimitDecision } from './stores/rate-limit-store.interface.js';

/**
 * 429 Too Many Requests. The guard sets the rate-limit headers and `Retry-After` on the
 * response before throwing it, so an app's own exception filter keeps them.
 *
 * Body (`errorFormat: 'nest'`): `{ statusCode: 429, error: 'Too Many Requests', message, policy, retryAfter }`;
 * `retryAfter` is `null` when the request's cost exceeds the policy's capacity. With
 * `errorFormat: 'problem'`, the body is a `RateLimitProblem` (see `quotaExceeded`).
 *
 * @example throw new RateLimitExceededException(decision, cost)
 */
export class RateLimitExceededException extends HttpException {
  constructor(
    /** The decision of the policy that refused the request (the one that frees up last). */
    readonly decision: RateLimitDecision,
    /** Tokens the request asked that policy for. */
    readonly cost = 1,
    /** The response body, in place of Nest's form above. */
    body?: object,
  ) {
    super(
      body ?? { statusCode: HttpStatus.TOO_MANY_REQUESTS, error: 'Too Many Requests', ...refusal(decision, cost) },
      HttpStatus.TOO_MANY_REQUESTS,
    );
  }

  /** A problem document's message is its `detail` (see `messageOf`). */
  override initMessage(): void {
    messageOf(this, () => super.initMessage());
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
    message: never
      ? costExceedsBurst(decision.policy, cost, decision.limit)
      : limitExceeded(decision.policy, decision.retryAfter),
    policy: decision.policy,
    retryAfter: never ? null : decision.retryAfter,
  };
}

/**
 * 503 Service Unavailable: the store failed and `failMode` is `'closed'`, or the app shut down
 * while the request waited its `leaky_bucket` turn.
 *
 * Body (`errorFormat: 'nest'`): `{ statusCode: 503, error: 'Service Unavailable', message }`; with
 * `errorFormat: 'problem'`, a `RateLimitProblem` (see `reducedCapacity`).
 */
export class RateLimitUnavailableException extends HttpException {
  constructor(cause?: unknown, body?: object) {
    super(
      body ?? { statusCode: HttpStatus.SERVICE_UNAVAILABLE, error: 'Service Unavailable', message: storeUnavailable },
      HttpStatus.SERVICE_UNAVAILABLE,
      { cause },
    );
  }

  /** A problem document's message is its `detail` (see `messageOf`). */
  override initMessage(): void {
    messageOf(this, () => super.initMessage());
  }
}

/**
 * Sets an exception's `message` to its problem document's `detail`; any other body's, as Nest
 * does. (For a body without `message`, Nest would make one of the class name with a regular
 * expression, on every refusal.)
 */
function messageOf(exception: HttpException, otherwise: () => void): void {
  const detail = (exception.getResponse() as Partial<RateLimitProblem>).detail;
  if (typeof detail === 'string') exception.message = detail;
  else otherwise();
}

/** The media type of an RFC 9457 problem document, the `Content-Type` of `errorFormat: 'problem'`. */
export const PROBLEM_JSON = 'application/problem+json';

/**
 * The problem types of the IETF RateLimit draft (draft-ietf-httpapi-ratelimit-headers, section 5)
 * with the titles it registers for them (section 10.2): a title says what the type means, the
 * same for every occurrence (RFC 9457, section 3.1.3); `detail` says what happened this time.
 */
const QUOTA_EXCEEDED = 'https://iana.org/assignments/http-problem-types#quota-exceeded';
const QUOTA_EXCEEDED_TITLE = 'Quota Exceeded';
const REDUCED_CAPACITY = 'https://iana.org/assignments/http-problem-types#temporary-reduced-capacity';
const REDUCED_CAPACITY_TITLE = 'Temporary Reduced Capacity';

/**
 * An RFC 9457 problem document, as `errorFormat: 'problem'` answers a refusal (429) or a limiter
 * that cannot decide (503), with `Content-Type: application/problem+json`.
 *
 * @example
 * {
 *   type: 'https://iana.org/assignments/http-problem-types#quota-exceeded',
 *   title: 'Quota Exceeded',
 *   status: 429,
 *   detail: 'Rate limit exceeded for policy "per-org". Try again in 10 seconds.',
 *   'violated-policies': ['per-org', 'per-ip'],
 *   retryAfter: 10,
 * }
 */
export interface RateLimitProblem {
  /** The draft's problem type: `#quota-exceeded` (429) or `#temporary-reduced-capacity` (503). */
  type: string;
  /** The title the draft registers for the type. */
  title: string;
  /** The response's status. */
  status: number;
  /** What happened to this request, as the `'nest'` body's `message` says it. */
  detail: string;
  /**
   * Every policy that refused the request, the one that frees up last (the one `Retry-After` and
   * `X-RateLimit-*` describe) first; empty on a 503, where no policy decided.
   */
  'violated-policies': string[];
  /** Seconds until the request would be admitted (`Retry-After`); `null` when it never can be. */
  retryAfter: number | null;
}

/**
 * The problem document of a refused request: `named` is the policy that frees up last, `decisions`
 * every policy's decision on the request (`named` among them).
 */
export function quotaExceeded(
  named: RateLimitDecision,
  cost: number,
  decisions: readonly RateLimitDecision[],
): RateLimitProblem {
  const { message, retryAfter } = refusal(named, cost);
  const violated = [named.policy];
  for (const decision of decisions) if (!decision.allowed && decision !== named) violated.push(decision.policy);
  return {
    type: QUOTA_EXCEEDED,
    title: QUOTA_EXCEEDED_TITLE,
    status: 429,
    detail: message,
    'violated-policies': violated,
    retryAfter,
  };
}

/** The problem document of a request the limiter could not decide (`Retry-After: 1`). */
export function reducedCapacity(): RateLimitProblem {
  return {
    type: REDUCED_CAPACITY,
    title: REDUCED_CAPACITY_TITLE,
    status: 503,
    detail: storeUnavailable,
    'violated-policies': [],
    retryAfter: 1,
  };
}
