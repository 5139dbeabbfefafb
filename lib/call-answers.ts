import { RateLimitUnavailableException } from './rate-limit.exception.js';
import type { ExceptionFactory } from './rate-limit-options.interface.js';
import { type HeaderFamily, type HeaderPlan, headerPlan, writeRateLimitHeaders } from './headers/rate-limit-headers.js';
import { type SharedAnswer, sharedAnswer } from './headers/shared-answer.js';
import type { LimitedCall } from './limiter/limited-call.js';
import type { RateLimiter, RateLimitVerdict } from './limiter/rate-limiter.js';
import type { RoutePolicy } from './routes/route-policy.js';
import type { RateLimitDecision } from './stores/rate-limit-store.interface.js';

/** What `CallAnswers` needs of the module's options. */
export interface AnswerOptions {
  /** The header families the module sends. */
  readonly headers: readonly HeaderFamily[];
  readonly exceptionFactory?: ExceptionFactory;
}

/**
 * Answers a run of the guard through its seam: the rate-limit headers and `Retry-After` (from the
 * run's own decisions, or, on an answer several runs share, see `RateLimitContext.sharedAnswer`: a
 * GraphQL HTTP response, from every decision made for it so far, by the same rule), the refusal,
 * the unavailable answer, and an admitted `leaky_bucket` request's wait for its turn.
 */
export class CallAnswers {
  /** Each route's header plan, by its (cached) list of policies; `null`: no headers. */
  private readonly plans = new WeakMap<readonly RoutePolicy[], HeaderPlan | null>();

  /**
   * @param now the time `X-RateLimit-Reset` counts from, Unix ms (the store's clock: see `RateLimiterService.now`)
   */
  constructor(
    private readonly options: AnswerOptions,
    private readonly now: () => number,
  ) {}

  /** Sets the header families for a verdict's decisions. */
  headers({ context, seam }: LimitedCall, { policies, requests, decisions }: RateLimitVerdict): void {
    const shared = seam.sharedAnswer?.(context);
    if (shared !== undefined)
      return this.rewrite(sharedAnswer(shared).add(policies, decisions, requests), context, seam);
    let plan = this.plans.get(policies);
    if (plan === undefined) this.plans.set(policies, (plan = headerPlan(this.options.headers, policies) ?? null));
    if (plan === null) return;
    const rules = plan.periodic === undefined ? undefined : requests.map((request) => request.rule);
    writeRateLimitHeaders(plan, decisions, this.now(), (name, value) => seam.setHeader(context, name, value), rules);
  }

  /**
   * The error a refused request ends with, `Retry-After` set (unless no wait would do): the app's
   * `exceptionFactory`'s, else the seam's refusal (a 429 for HTTP).
   */
  refusal(call: LimitedCall, { limiting, requests, decisions }: RateLimitVerdict): Error {
    this.retryAfter(call, limiting);
    const factory = this.options.exceptionFactory;
    if (factory !== undefined) return factory(limiting, call.context);
    return call.seam.refusal(limiting, requests[decisions.indexOf(limiting)].cost, call.context, decisions);
  }

  /** The error a request ends with when the limiter cannot answer it, `Retry-After: 1` set (HTTP: a 503). */
  unavailable(call: LimitedCall, cause: unknown): Error {
    this.retryAfter(call, undefined);
    return call.seam.unavailable(cause, call.context);
  }

  /**
   * Waits for an admitted `leaky_bucket` request's turn on the engine (`RateLimiter.wait`). When its client goes
   * away first, the turn is given back and this rejects with the seam's `gone()` (HTTP: a 499 that no
   * one receives); when the app shuts down first, with `unavailable`.
   */
  async turn(call: LimitedCall, verdict: RateLimitVerdict, limiter: Pick<RateLimiter, 'wait'>): Promise<void> {
    const departure = call.seam.departure?.(call.context);
    try {
      await limiter.wait(verdict.decisions, departure?.signal);
    } catch (error) {
      if (departure?.signal.aborted) throw departure.gone();
      throw error instanceof RateLimitUnavailableException ? this.unavailable(call, error) : error;
    } finally {
      departure?.end();
    }
  }

  /** Sets `Retry-After` for the policy that frees up last (none when it never does), or 1 s when there is no decision. */
  private retryAfter({ context, seam }: LimitedCall, refused: RateLimitDecision | undefined): void {
    const shared = seam.sharedAnswer?.(context);
    if (shared !== undefined) return this.rewrite(sharedAnswer(shared).refuse(refused), context, seam);
    if (refused === undefined) seam.setHeader(context, 'Retry-After', '1');
    else if (Number.isFinite(refused.retryAfter)) seam.setHeader(context, 'Retry-After', String(refused.retryAfter));
  }

  /** Writes every header of a shared answer again, removing a `Retry-After` it no longer warrants. */
  private rewrite(answer: SharedAnswer, context: LimitedCall['context'], seam: LimitedCall['seam']): void {
    answer.write(this.options.headers, this.now(), (name, value) =>
      value === undefined ? seam.removeHeader?.(context, name) : seam.setHeader(context, name, value),
    );
  }
}
