import type { ExecutionContext } from '@nestjs/common';
import type { RateLimitContext } from './contexts/rate-limit-context.js';
import { type HeaderFamily, type HeaderPlan, headerPlan, writeRateLimitHeaders } from './headers/rate-limit-headers.js';
import { type SharedAnswer, sharedAnswer } from './headers/shared-answer.js';
import type { RoutePolicy } from './routes/route-policy.js';
import type { RateLimitDecision } from './stores/rate-limit-store.interface.js';

/**
 * Writes the rate-limit headers and `Retry-After` of a request's answer through its seam: from
 * the request's own decisions, or, on an answer several decisions share (see
 * `RateLimitContext.sharedAnswer`: a GraphQL HTTP response), from every decision made for it so
 * far, by the same rule.
 */
export class AnswerHeaders {
  /** Each route's header plan, by its (cached) list of policies; `null`: no headers. */
  private readonly plans = new WeakMap<readonly RoutePolicy[], HeaderPlan | null>();

  /**
   * @param families the header families the module sends
   * @param now the time `X-RateLimit-Reset` counts from, Unix ms (the store's clock: see `RateLimiterService.now`)
   */
  constructor(
    private readonly families: readonly HeaderFamily[],
    private readonly now: () => number,
  ) {}

  /** Sets the header families for a request's decisions (one per policy of `policies`). */
  decided(policies: readonly RoutePolicy[], decisions: readonly RateLimitDecision[], context: ExecutionContext, seam: RateLimitContext): void {
    const shared = seam.sharedAnswer?.(context);
    if (shared !== undefined) return this.rewrite(sharedAnswer(shared).add(policies, decisions), context, seam);
    let plan = this.plans.get(policies);
    if (plan === undefined) this.plans.set(policies, (plan = headerPlan(this.families, policies) ?? null));
    if (plan === null) return;
    writeRateLimitHeaders(plan, decisions, this.now(), (name, value) => seam.setHeader(context, name, value));
  }

  /**
   * Sets `Retry-After` for a refused request (`refused`: the policy that frees up last; none when
   * it never does) or for one the limiter could not answer (`undefined`: 1 second), whatever the
   * header families.
   */
  retryAfter(refused: RateLimitDecision | undefined, context: ExecutionContext, seam: RateLimitContext): void {
    const shared = seam.sharedAnswer?.(context);
    if (shared !== undefined) return this.rewrite(sharedAnswer(shared).refuse(refused), context, seam);
    if (refused === undefined) seam.setHeader(context, 'Retry-After', '1');
    else if (Number.isFinite(refused.retryAfter)) seam.setHeader(context, 'Retry-After', String(refused.retryAfter));
  }

  /** Writes every header of a shared answer again, removing a `Retry-After` it no longer warrants. */
  private rewrite(answer: SharedAnswer, context: ExecutionContext, seam: RateLimitContext): void {
    answer.write(this.families, this.now(), (name, value) => (value === undefined ? seam.removeHeader?.(context, name) : seam.setHeader(context, name, value)));
  }
}
