import { type CanActivate, type ExecutionContext, Inject, Injectable, Logger } from '@nestjs/common';
import { AnswerHeaders } from './answer-headers.js';
import type { RateLimitContext } from './contexts/rate-limit-context.js';
import { RateLimitContexts } from './contexts/rate-limit-contexts.js';
import { resolveCost } from './keys/cost.js';
import { KeyTimeoutError, resolveIdentity } from './keys/identity.js';
import { IdentityWarnings, routeName } from './keys/identity-warnings.js';
import { resolveTier } from './keys/tier.js';
import { chargeOnce } from './limiter/charge-once.js';
import { type LimitedCall, limitedCall, watch, watchedOf } from './limiter/limited-call.js';
import { RateLimiter, type RateLimitVerdict } from './limiter/rate-limiter.js';
import { RATE_LIMIT_OPTIONS } from './rate-limit.constants.js';
import { RateLimitUnavailableException } from './rate-limit.exception.js';
import { shadowRefusal } from './rate-limit.messages.js';
import type { ResolvedOptions } from './rate-limit-options.js';
import { type RoutePolicy, storeRequest } from './routes/route-policy.js';
import { RoutePolicies } from './routes/route-policies.js';
import { anySkipIf, Unskipped } from './routes/skip-if.js';
import { RateLimitStoreError } from './stores/rate-limit-store.error.js';
import type { RateLimitRequest } from './stores/rate-limit-store.interface.js';

/**
 * Limits each request by its route's policies, charged once however many times it runs on it: the
 * Nest adapter of the engine (`RateLimiter`). What is particular to a kind of request is its seam
 * (`RateLimitContext`); a kind without one passes. Its steps are `protected`, each taking the run's
 * one record (`LimitedCall`), so an app subclasses it (see the README's "Extending"). For a
 * `'user'` key, the app's auth guard must run first (or use `runAs: 'interceptor'`).
 */
@Injectable()
export class RateLimitGuard implements CanActivate {
  protected readonly logger = new Logger('RateLimitGuard');
  private readonly identities = new IdentityWarnings(this.logger);
  private readonly headers: AnswerHeaders;
  private readonly unskipped = new Unskipped();

  constructor(
    @Inject(RATE_LIMIT_OPTIONS) protected readonly options: ResolvedOptions,
    protected readonly routes: RoutePolicies,
    protected readonly limiter: RateLimiter,
    protected readonly contexts: RateLimitContexts,
  ) {
    this.headers = new AnswerHeaders(options.headers, () => limiter.now());
  }

  canActivate(context: ExecutionContext): boolean | Promise<boolean> {
    const seam = this.contexts.for(context.getType());
    if (seam !== undefined) return this.limit(seam, context);
    return this.contexts.load(context.getType()).then((loaded) => loaded === undefined || this.limit(loaded, context));
  }

  private limit(seam: RateLimitContext, context: ExecutionContext): boolean | Promise<boolean> {
    const route = this.routes.forRoute(context.getClass(), context.getHandler() as () => unknown);
    const call = route.length === 0 ? undefined : limitedCall(context, seam, route);
    return call === undefined || chargeOnce(call, (fresh) => this.enforce(call, fresh));
  }

  /** Decides a run under the policies not charged yet and answers: `true`, or the refusal as a rejected promise. */
  protected enforce(call: LimitedCall, policies: readonly RoutePolicy[]): boolean | Promise<boolean> {
    try {
      if (this.options.skipIf === undefined && !anySkipIf(policies)) return this.decide(call, policies);
      return this.skipping(call, policies).then((applying) => {
        if (applying !== policies) this.limiter.skipped(call, policies, applying);
        return applying.length === 0 || this.decide(call, applying);
      });
    } catch (error) {
      return Promise.reject(error); // a key or cost source that threw: rejected, as by an async guard
    }
  }

  private decide(call: LimitedCall, applying: readonly RoutePolicy[]): boolean | Promise<boolean> {
    const policies = this.limiter.scaled(applying);
    const built = this.buildRequests(call, policies);
    if (Array.isArray(built)) return this.ask(call, policies, built);
    return built.then((requests) => this.ask(call, policies, requests), (error) => this.failOver(call, policies, error));
  }

  private ask(call: LimitedCall, policies: readonly RoutePolicy[], requests: RateLimitRequest[]): boolean | Promise<boolean> {
    const verdict = this.limiter.decide(call, policies, requests);
    if (!(verdict instanceof Promise)) return this.answer(call, verdict);
    return verdict.then((known) => this.answer(call, known), (error) => this.failOver(call, policies, error));
  }

  private answer(call: LimitedCall, verdict: RateLimitVerdict): boolean | Promise<boolean> {
    this.setHeaders(call, verdict);
    const shadow = this.options.mode === 'shadow';
    if (!verdict.allowed) return shadow ? (this.onShadowRefusal(call, verdict), true) : this.refusal(call, verdict);
    if (!shadow && verdict.decisions.some((decision) => decision.delay > 0)) {
      return this.waitTurn(call, verdict).then(() => (this.watchOutcome(call, verdict), true));
    }
    this.watchOutcome(call, verdict);
    return true;
  }

  /** `refuse`'s error a microtask on: a promise rejected before anyone awaits it costs Node's unhandled-rejection bookkeeping. */
  private async refusal(call: LimitedCall, verdict: RateLimitVerdict): Promise<never> {
    await undefined;
    this.refuse(call, verdict);
  }

  private failOver(call: LimitedCall, policies: readonly RoutePolicy[], failure: unknown): boolean {
    const error = failure instanceof KeyTimeoutError ? new RateLimitStoreError(failure.message, { cause: failure, reason: 'timeout' }) : failure;
    if (!(error instanceof RateLimitStoreError)) throw error;
    let passed = false;
    try {
      return (passed = this.onStoreFailure(call, error));
    } finally {
      this.limiter.failedOver(call, policies, passed);
    }
  }

  /** The policies that apply: none when the module's `skipIf` says so, else those whose own does not. */
  protected async skipping(call: LimitedCall, policies: readonly RoutePolicy[]): Promise<readonly RoutePolicy[]> {
    if (this.options.skipIf !== undefined && (await this.options.skipIf(call.context, call.request))) return [];
    return this.unskipped.of(policies, call.request, call.context);
  }

  /** One store request per policy; a promise only when a key, cost or tier function answers with one. */
  protected buildRequests(call: LimitedCall, policies: readonly RoutePolicy[]): RateLimitRequest[] | Promise<RateLimitRequest[]> {
    const requests: RateLimitRequest[] = new Array(policies.length);
    let pending: Promise<unknown>[] | undefined;
    for (let i = 0; i < policies.length; i++) {
      const policy = policies[i];
      const identity = this.identities.checked(policy.keys, this.identify(call, policy), call.request, call.context, call.seam);
      const cost = this.cost(call, policy);
      const tier = policy.tiers === undefined ? undefined : this.tier(call, policy);
      if (typeof identity === 'string' && typeof cost === 'number' && (tier === undefined || typeof tier === 'string')) requests[i] = storeRequest(policy, identity, cost, tier);
      else (pending ??= []).push(Promise.all([identity, cost, tier]).then(([key, settled, named]) => (requests[i] = storeRequest(policy, key, settled, named))));
    }
    return pending === undefined ? requests : Promise.all(pending).then(() => requests);
  }

  /** The identity a policy limits the request as (see `KeySource`). */
  protected identify(call: LimitedCall, policy: RoutePolicy): string | Promise<string> {
    return resolveIdentity(policy.keys, call.request, call.context, this.options);
  }

  /** Tokens the request takes under a policy (see `CostSource`); an unusable cost is `defaultCost`. */
  protected cost(call: LimitedCall, policy: RoutePolicy): number | Promise<number> {
    return resolveCost(policy.cost, policy.defaultCost, call.request, call.context);
  }

  /** A tiered policy's tier for the request (see `TierSource`); `undefined`: its `defaultTier`. */
  protected tier(call: LimitedCall, policy: RoutePolicy): string | undefined | Promise<string | undefined> {
    if (policy.tiers === undefined) return undefined;
    return resolveTier(policy.tiers.source, call.request, call.context, (call.record.tiers ??= new Map()), this.options.timeout);
  }

  /** Sets the configured header families (on a shared GraphQL response, from every decision made for it). */
  protected setHeaders(call: LimitedCall, verdict: RateLimitVerdict): void {
    this.headers.decided(verdict.policies, verdict.decisions, call.context, call.seam);
  }

  /** Ends a refused request: `Retry-After`, then `exceptionFactory`'s error or the seam's refusal (a 429). */
  protected refuse(call: LimitedCall, verdict: RateLimitVerdict): never {
    const { limiting, requests, decisions } = verdict;
    this.headers.retryAfter(limiting, call.context, call.seam);
    const factory = this.options.exceptionFactory;
    if (factory !== undefined) throw factory(limiting, call.context);
    throw call.seam.refusal(limiting, requests[decisions.indexOf(limiting)].cost, call.context, decisions);
  }

  /** In shadow mode, logs a request enforcing would refuse (it passes). */
  protected onShadowRefusal(call: LimitedCall, verdict: RateLimitVerdict): void {
    this.logger.warn(shadowRefusal(verdict.limiting.policy, routeName(call.context), verdict.limiting.retryAfter));
  }

  /** Holds an admitted `leaky_bucket` request until its turn; a gone client or a shutdown gives the turn back. */
  protected async waitTurn(call: LimitedCall, verdict: RateLimitVerdict): Promise<void> {
    const departure = call.seam.departure?.(call.context);
    try {
      await this.limiter.wait(verdict.decisions, departure?.signal);
    } catch (error) {
      if (departure?.signal.aborted) throw departure.gone();
      if (!(error instanceof RateLimitUnavailableException)) throw error;
      this.unavailable(call, error);
    } finally {
      departure?.end();
    }
  }

  /** Keeps what the admitted request owes `count: 'failures'` and `adaptive` policies, for its outcome. */
  protected watchOutcome(call: LimitedCall, verdict: RateLimitVerdict): void {
    const watched = watchedOf(verdict.policies, verdict.decisions);
    if (watched !== undefined) watch(call, watched);
  }

  /** What a request gets when the store cannot decide: `failMode` 'open' lets it through. */
  protected onStoreFailure(call: LimitedCall, error: RateLimitStoreError): boolean {
    if (this.options.failMode === 'closed' && this.options.mode !== 'shadow') this.unavailable(call, error);
    return true;
  }

  private unavailable(call: LimitedCall, error: Error): never {
    this.headers.retryAfter(undefined, call.context, call.seam);
    throw call.seam.unavailable(error, call.context);
  }
}
