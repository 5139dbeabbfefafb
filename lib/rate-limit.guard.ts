import { type CanActivate, type ExecutionContext, Inject, Injectable, Logger } from '@nestjs/common';
import { CallAnswers } from './call-answers.js';
import { RateLimitContexts } from './contexts/rate-limit-contexts.js';
import { resolveCost } from './keys/cost.js';
import { resolveIdentity } from './keys/identity.js';
import { resolveQuotaAnchor } from './keys/quota-anchor.js';
import { IdentityWarnings, routeName } from './keys/identity-warnings.js';
import { resolveTier } from './keys/tier.js';
import { charged, uncharged } from './limiter/charge-once.js';
import { type LimitedCall, limitedCall, watch, watchedOf } from './limiter/limited-call.js';
import { RateLimiter, type RateLimitVerdict } from './limiter/rate-limiter.js';
import { storeFailure } from './limiter/store-failure.js';
import { settledRequests, settleRequest } from './limiter/store-requests.js';
import { RATE_LIMIT_OPTIONS } from './rate-limit.constants.js';
import { shadowRefusal } from './rate-limit.messages.js';
import type { ResolvedOptions } from './rate-limit-options.js';
import { type RoutePolicy, storeRequest } from './routes/route-policy.js';
import { RoutePolicies } from './routes/route-policies.js';
import { Unskipped } from './routes/skip-if.js';
import type { RateLimitStoreError } from './stores/rate-limit-store.error.js';
import type { RateLimitRequest } from './stores/rate-limit-store.interface.js';

type Answer = boolean | Promise<boolean>;

/**
 * Limits each request by its route's policies, once however many times it runs on it: the Nest adapter of the engine
 * (`RateLimiter`), answering through the seam of the request's kind (`RateLimitContext`; a kind without one passes).
 * Its steps take the run's one record (`LimitedCall`): subclass it to change one (see the README's "Extending").
 */
@Injectable()
export class RateLimitGuard implements CanActivate {
  protected readonly logger = new Logger('RateLimitGuard');
  private readonly identities = new IdentityWarnings(this.logger);
  private readonly answers: CallAnswers;
  private readonly unskipped: Unskipped;

  constructor(
    @Inject(RATE_LIMIT_OPTIONS) protected readonly options: ResolvedOptions,
    protected readonly routes: RoutePolicies,
    protected readonly limiter: RateLimiter,
    protected readonly contexts: RateLimitContexts,
  ) {
    this.answers = new CallAnswers(options, () => limiter.now());
    this.unskipped = new Unskipped(options.skipIf);
  }

  canActivate(context: ExecutionContext): Answer {
    const seam = this.contexts.for(context.getType());
    if (seam !== undefined) return this.limit(seam, context);
    return this.contexts.load(context.getType()).then((loaded) => loaded === undefined || this.limit(loaded, context));
  }

  private limit(seam: LimitedCall['seam'], context: ExecutionContext): Answer {
    const call = limitedCall(context, seam, this.routes.forContext(context));
    if (call === undefined) return true;
    return this.charge(call, call.selection, call.perSelection, this.charge(call, call.target, call.perRequest, true));
  }

  /** Charges `policies` on `holder` once, when `after` admits (a GraphQL field's own after its operation's). */
  private charge(call: LimitedCall, holder: object, policies: readonly RoutePolicy[], after: Answer): Answer {
    if (policies.length === 0) return after;
    const fresh = uncharged(holder, policies);
    const run = (): Answer => fresh.length === 0 || this.enforce(call, fresh);
    return charged(holder, policies, fresh, after === true ? run() : Promise.resolve(after).then((ok) => ok && run()));
  }

  private enforce(call: LimitedCall, policies: readonly RoutePolicy[]): Answer {
    try {
      if (this.unskipped.none(policies)) return this.decide(call, policies);
      const skipping = this.unskipped.of(policies, call.request, call.context);
      return skipping.then((applying) => this.decide(call, applying, policies));
    } catch (error) {
      return Promise.reject(error); // a key or cost source that threw: rejected, as by an async guard
    }
  }

  private decide(call: LimitedCall, applying: readonly RoutePolicy[], route = applying): Answer {
    if (applying !== route) this.limiter.skipped(call, route, applying);
    if (applying.length === 0) return true;
    const policies = this.limiter.scaled(applying);
    const verdict = this.limiter.decide(call, policies, this.requests(call, policies));
    if (!(verdict instanceof Promise)) return this.answer(call, verdict);
    return verdict.then(
      (known) => this.answer(call, known),
      (error: unknown) => this.onStoreFailure(call, storeFailure(error)),
    );
  }

  private requests(call: LimitedCall, route: readonly RoutePolicy[]): RateLimitRequest[] | Promise<RateLimitRequest[]> {
    const requests = new Array<RateLimitRequest>(route.length);
    let pending: Promise<unknown>[] | undefined;
    for (let i = 0; i < route.length; i++) {
      const policy = route[i];
      const identity = this.identities.checked(policy.keys, this.identify(call, policy), call);
      const cost = this.cost(call, policy);
      const tier = policy.tiers && resolveTier(policy.tiers.source, call, this.options.timeout);
      const anchor = policy.quotaAnchor && resolveQuotaAnchor(policy.quotaAnchor, call, this.options.timeout);
      const known =
        typeof identity === 'string' &&
        typeof cost === 'number' &&
        typeof tier !== 'object' &&
        typeof anchor !== 'object';
      if (known)
        requests[i] = storeRequest(
          policy,
          identity,
          cost,
          tier,
          policy.quota ? { now: this.limiter.now(), anchor } : undefined,
        );
      else (pending ??= []).push(settleRequest(requests, i, policy, identity, cost, tier, anchor, this.limiter));
    }
    return pending === undefined ? requests : settledRequests(requests, pending);
  }

  private answer(call: LimitedCall, verdict: RateLimitVerdict): Answer {
    this.answers.headers(call, verdict);
    const enforcing = this.options.mode !== 'shadow';
    // a microtask on: a promise rejected before anyone awaits it costs Node's unhandled-rejection bookkeeping
    if (!verdict.allowed && enforcing) return Promise.resolve().then(() => this.refuse(call, verdict));
    if (!verdict.allowed) this.onShadowRefusal(call, verdict);
    else if (!enforcing || verdict.decisions.every((decision) => decision.delay <= 0)) this.watchOutcome(call, verdict);
    else return this.waitTurn(call, verdict).then(() => (this.watchOutcome(call, verdict), true));
    return true;
  }

  /** The identity a policy limits the request as (see `KeySource`). */
  protected identify(call: LimitedCall, policy: RoutePolicy): string | Promise<string> {
    return resolveIdentity(policy.keys, call.request, call.context, this.options);
  }

  /** Tokens the request takes under a policy (see `CostSource`); an unusable cost is `defaultCost`. */
  protected cost(call: LimitedCall, policy: RoutePolicy): number | Promise<number> {
    return resolveCost(policy.cost, policy.defaultCost, call.request, call.context);
  }

  /** Ends a refused request: `Retry-After`, then `exceptionFactory`'s error or the seam's refusal (a 429). */
  protected refuse(call: LimitedCall, verdict: RateLimitVerdict): never {
    throw this.answers.refusal(call, verdict);
  }

  /** In shadow mode, logs a request enforcing would refuse (it passes). */
  protected onShadowRefusal(call: LimitedCall, { limiting }: RateLimitVerdict): void {
    this.logger.warn(shadowRefusal(limiting.policy, routeName(call.context), limiting.retryAfter));
  }

  /** Holds an admitted `leaky_bucket` request until its turn; a gone client or a shutdown gives the turn back. */
  protected waitTurn(call: LimitedCall, verdict: RateLimitVerdict): Promise<void> {
    return this.answers.turn(call, verdict, this.limiter);
  }

  /**
   * Keeps what the admitted request owes `count: 'failures'` and `adaptive` policies, for its
   * outcome; and gives the slots of its `concurrency` policies back when it ends: on HTTP when its
   * response is finished or closed (a client gone, a stream aborted, another guard or a pipe that
   * refused it after this one), elsewhere when its handler's outcome settles.
   */
  protected watchOutcome(call: LimitedCall, verdict: RateLimitVerdict): void {
    const watched = watchedOf(verdict.policies, verdict.requests, verdict.decisions);
    if (watched !== undefined && watched.releases.length > 0) {
      const ended = call.seam.succeeded?.(call.context);
      if (ended !== undefined) {
        const releases = watched.releases;
        watched.releases = [];
        void ended.then(() => this.limiter.refund(releases));
      }
    }
    watch(call, watched);
  }

  /** The answer when the store cannot decide (`error.reason` says why): `failMode` 'open' lets it through. */
  protected onStoreFailure(call: LimitedCall, error: RateLimitStoreError): boolean {
    if (this.options.failMode !== 'closed' || this.options.mode === 'shadow') return true;
    throw this.answers.unavailable(call, error);
  }
}
