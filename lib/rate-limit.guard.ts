import { type CanActivate, type ExecutionContext, Inject, Injectable, Logger } from '@nestjs/common';
import { AnswerHeaders } from './answer-headers.js';
import { outcomeTarget, type RateLimitContext } from './contexts/rate-limit-context.js';
import { RateLimitContexts } from './contexts/rate-limit-contexts.js';
import { limiting } from './headers/rate-limit-headers.js';
import { resolveCost } from './keys/cost.js';
import { KeyTimeoutError, type LimitedRequest, resolveIdentity } from './keys/identity.js';
import { resolveTier } from './keys/tier.js';
import { IdentityWarnings, routeName } from './keys/identity-warnings.js';
import { RATE_LIMIT_OPTIONS } from './rate-limit.constants.js';
import { RateLimitUnavailableException } from './rate-limit.exception.js';
import { shadowRefusal } from './rate-limit.messages.js';
import type { ResolvedOptions } from './rate-limit-options.js';
import { RateLimiterService } from './rate-limiter.service.js';
import { chargeOnce } from './routes/charges.js';
import { watch, watchedOf } from './routes/outcomes.js';
import { type RoutePolicy, storeRequest } from './routes/route-policy.js';
import { RoutePolicies } from './routes/route-policies.js';
import { anySkipIf, Unskipped } from './routes/skip-if.js';
import { RateLimitStoreError } from './stores/rate-limit-store.error.js';
import type { RateLimitDecision, RateLimitRequest } from './stores/rate-limit-store.interface.js';

/**
 * Applies the route's policies to each request: works out the identity and cost of every policy,
 * asks the store for one all-or-nothing decision, sets the rate-limit headers, then lets the
 * request through (after its turn in the queue, for a `leaky_bucket`) or ends it with the
 * refusal. What is particular to a kind of request (reading it, writing headers, the form of a
 * refusal: a 429 for HTTP, a field error for GraphQL) is its context's seam (`RateLimitContext`);
 * a kind without one is let through. A request or message is charged once, however many times the
 * guard runs on it. Registered globally by `RateLimitModule` unless `guard: false` or
 * `runAs: 'interceptor'`; then use it as `@UseGuards(RateLimitGuard)`.
 *
 * Its steps are `protected` so an app can subclass it (e.g. to key by tenant) instead of forking.
 *
 * Order matters for `key: 'user'`: the guard reads `req.user`, so the app's auth guard must run
 * first (register it globally before this module, or use `runAs: 'interceptor'`).
 */
@Injectable()
export class RateLimitGuard implements CanActivate {
  protected readonly logger = new Logger('RateLimitGuard');
  private readonly identities = new IdentityWarnings(this.logger);
  /** Writes each answer's headers, from its own decisions or from all those of an answer they share. */
  private readonly headers: AnswerHeaders;
  /** Each route's policies less those a `skipIf` let pass, one list per set skipped (so its plan is cached). */
  private readonly unskipped = new Unskipped();

  constructor(
    @Inject(RATE_LIMIT_OPTIONS) protected readonly options: ResolvedOptions,
    protected readonly routes: RoutePolicies,
    protected readonly limiter: RateLimiterService,
    protected readonly contexts: RateLimitContexts,
  ) {
    this.headers = new AnswerHeaders(options.headers, () => limiter.now());
  }

  /** `true` at once for what is not limited; else the verdict of `enforce`, shared by every run on one request (the first of a kind of context waits for its seam to be made). */
  canActivate(context: ExecutionContext): boolean | Promise<boolean> {
    const type = context.getType();
    const seam = this.contexts.for(type);
    if (seam !== undefined) return this.limit(seam, context);
    return this.contexts.load(type).then((loaded) => loaded === undefined || this.limit(loaded, context));
  }

  /** The route's policies for the request in `context`, charged once per target. */
  private limit(seam: RateLimitContext, context: ExecutionContext): boolean | Promise<boolean> {
    const policies = this.routes.forRoute(context.getClass(), context.getHandler() as () => unknown);
    if (policies.length === 0) return true;
    const request = seam.request(context);
    if (request === undefined) return true;

    // once per request or message: a second run (a global guard and @UseGuards, the next field of a GraphQL
    // operation) shares the first's verdict for the policies it decided; a field's own, once per selection
    const target = seam.target?.(context) ?? context.getArgs();
    return chargeOnce(target, policies, (fresh) => this.enforce(fresh, request, context, seam), seam.selection?.(context));
  }

  /**
   * Decides a request under its policies and answers: `true` to let it through (after its turn,
   * for a `leaky_bucket`), or the context's refusal as a rejected promise. An answer the memory
   * store gives at once is returned at once: Nest awaits nothing for an admitted request.
   */
  protected enforce(route: readonly RoutePolicy[], request: LimitedRequest, context: ExecutionContext, seam: RateLimitContext): boolean | Promise<boolean> {
    try {
      if (this.options.skipIf === undefined && !anySkipIf(route)) return this.decideUnder(route, request, context, seam);
      return this.skipping(route, request, context).then((applying) => {
        if (applying !== route) this.limiter.telemetry.skipped(context, route, applying);
        return applying.length === 0 || this.decideUnder(applying, request, context, seam);
      });
    } catch (error) {
      return Promise.reject(error); // a key or cost source that threw: rejected, as by an async guard
    }
  }

  /** Builds the store requests of the policies that apply and decides them; `failMode` answers for a key function past `timeout`. */
  private decideUnder(applying: readonly RoutePolicy[], request: LimitedRequest, context: ExecutionContext, seam: RateLimitContext): boolean | Promise<boolean> {
    const policies = this.limiter.scales.apply(applying);
    const requests = this.buildRequests(policies, request, context, seam);
    return Array.isArray(requests) ? this.decide(policies, requests, context, seam) : requests.then((built) => this.decide(policies, built, context, seam), (error: unknown) => this.failOver(error, policies, context, seam));
  }

  /** Asks the store; `failMode` answers for a store that cannot. */
  private decide(policies: readonly RoutePolicy[], requests: RateLimitRequest[], context: ExecutionContext, seam: RateLimitContext): boolean | Promise<boolean> {
    const decided = this.limiter.decideNow(requests, true);
    if (Array.isArray(decided)) return this.answer(policies, requests, decided, context, seam);
    return decided.then((decisions) => this.answer(policies, requests, decisions, context, seam), (error: unknown) => this.failOver(error, policies, context, seam));
  }

  /** Sets the headers of the decisions, then lets the request through or refuses it. */
  private answer(policies: readonly RoutePolicy[], requests: readonly RateLimitRequest[], decisions: RateLimitDecision[], context: ExecutionContext, seam: RateLimitContext): boolean | Promise<boolean> {
    this.setHeaders(policies, decisions, context, seam);
    const named = limiting(decisions);
    this.limiter.telemetry.decided(context, decisions, named.allowed);
    if (this.options.mode === 'shadow') {
      if (!named.allowed) this.onShadowRefusal(named, context);
      else this.watchOutcome(policies, decisions, context, seam);
      return true;
    }
    if (!named.allowed) return this.refuse(named, requests[decisions.indexOf(named)].cost, context, seam, decisions);
    // a leaky_bucket admits a request for its turn in the queue: wait until then
    if (decisions.some((decision) => decision.delay > 0)) {
      return this.waitTurn(decisions, context, seam).then(() => {
        this.watchOutcome(policies, decisions, context, seam);
        return true;
      });
    }
    this.watchOutcome(policies, decisions, context, seam);
    return true;
  }

  /** `onRefusal`'s error, rejected a microtask on: a promise rejected before anyone awaits it costs Node's unhandled-rejection bookkeeping. */
  private async refuse(refused: RateLimitDecision, cost: number, context: ExecutionContext, seam: RateLimitContext, decisions: readonly RateLimitDecision[]): Promise<never> {
    await undefined;
    this.onRefusal(refused, cost, context, seam, decisions);
  }

  /** A store error's answer under `failMode` (a key function past `timeout` is answered alike: no bucket to charge); any other error is thrown on. */
  private failOver(failure: unknown, policies: readonly RoutePolicy[], context: ExecutionContext, seam: RateLimitContext): boolean {
    const error = failure instanceof KeyTimeoutError ? new RateLimitStoreError(failure.message, { cause: failure, reason: 'timeout' }) : failure;
    if (!(error instanceof RateLimitStoreError)) throw error;
    return this.limiter.telemetry.failedOver(context, policies, () => this.onStoreFailure(error, context, seam));
  }

  /** The policies that apply to the request: none when the module's `skipIf` says so, else those whose own does not. */
  protected async skipping(policies: readonly RoutePolicy[], request: LimitedRequest, context: ExecutionContext): Promise<readonly RoutePolicy[]> {
    if (this.options.skipIf !== undefined && (await this.options.skipIf(context, request))) return [];
    return this.unskipped.of(policies, request, context);
  }

  /**
   * Keeps, for the request's outcome, what an admitted and charged request owes the policies that
   * watch it (`count: 'failures'`, `adaptive`): `RateLimitOutcomeInterceptor` settles it.
   */
  protected watchOutcome(policies: readonly RoutePolicy[], decisions: readonly RateLimitDecision[], context: ExecutionContext, seam: RateLimitContext): void {
    const watched = watchedOf(policies, decisions);
    if (watched !== undefined) watch(outcomeTarget(seam, context), watched);
  }

  /**
   * One store request per policy: its bucket for this client and its cost. A promise only when a
   * key, cost or tier function answers with one.
   */
  protected buildRequests(policies: readonly RoutePolicy[], request: LimitedRequest, context: ExecutionContext, seam: RateLimitContext): RateLimitRequest[] | Promise<RateLimitRequest[]> {
    const requests: RateLimitRequest[] = new Array(policies.length);
    let pending: Promise<unknown>[] | undefined;
    for (let i = 0; i < policies.length; i++) {
      const policy = policies[i];
      const identity = this.identities.checked(policy.keys, this.resolveIdentity(policy, request, context), request, context, seam);
      const cost = this.resolveCost(policy, request, context);
      const tier = policy.tiers === undefined ? undefined : this.resolveTier(policy, request, context, seam);
      if (typeof identity === 'string' && typeof cost === 'number' && (tier === undefined || typeof tier === 'string')) requests[i] = storeRequest(policy, identity, cost, tier);
      else (pending ??= []).push(Promise.all([identity, cost, tier]).then(([key, settled, named]) => (requests[i] = storeRequest(policy, key, settled, named))));
    }
    return pending === undefined ? requests : Promise.all(pending).then(() => requests);
  }

  /** The identity a policy limits this request as (see `KeySource`); a promise only when a key function answers with one. */
  protected resolveIdentity(policy: RoutePolicy, request: LimitedRequest, context: ExecutionContext): string | Promise<string> {
    return resolveIdentity(policy.keys, request, context, this.options);
  }

  /** Tokens this request takes under a policy (see `CostSource`); an unusable cost is `defaultCost`. */
  protected resolveCost(policy: RoutePolicy, request: LimitedRequest, context: ExecutionContext): number | Promise<number> {
    return resolveCost(policy.cost, policy.defaultCost, request, context);
  }

  /**
   * The tier a tiered policy limits this request as (see `TierSource`); `undefined`, or a name
   * the policy has no tier of, is its `defaultTier`. A tier function runs once per request,
   * however many policies read it.
   */
  protected resolveTier(policy: RoutePolicy, request: LimitedRequest, context: ExecutionContext, seam: RateLimitContext): string | undefined | Promise<string | undefined> {
    if (policy.tiers === undefined) return undefined;
    return resolveTier(policy.tiers.source, request, context, seam.target?.(context) ?? context.getArgs(), this.options.timeout);
  }

  /** Sets the configured header families for the decisions (on a GraphQL HTTP response, for every decision made for it). */
  protected setHeaders(policies: readonly RoutePolicy[], decisions: readonly RateLimitDecision[], context: ExecutionContext, seam: RateLimitContext): void {
    this.headers.decided(policies, decisions, context, seam);
  }

  /**
   * Ends a refused request: `Retry-After` (unless no wait would do), then the app's
   * `exceptionFactory`'s error or the context's refusal (a 429 for HTTP). `refused` is the policy
   * that frees up last, the one the headers describe; `decisions` are every policy's.
   */
  protected onRefusal(refused: RateLimitDecision, cost: number, context: ExecutionContext, seam: RateLimitContext, decisions: readonly RateLimitDecision[] = [refused]): never {
    this.headers.retryAfter(refused, context, seam);
    const factory = this.options.exceptionFactory;
    throw factory === undefined ? seam.refusal(refused, cost, context, decisions) : factory(refused, context);
  }

  /**
   * In shadow mode, a request the policies refuse passes; this logs it (a warning naming the
   * policy and the route), so what enforcing would block can be counted before switching.
   */
  protected onShadowRefusal(refused: RateLimitDecision, context: ExecutionContext): void {
    this.logger.warn(shadowRefusal(refused.policy, routeName(context), refused.retryAfter));
  }

  /**
   * Holds an admitted `leaky_bucket` request until its turn. When its client goes away first,
   * the turn is given back and the handler does not run (HTTP: a 499 that no one receives and
   * Nest does not log). When the app shuts down first, the turn is given back too and the client
   * gets the context's unavailable answer (HTTP: a 503) with `Retry-After: 1`.
   */
  protected async waitTurn(decisions: readonly RateLimitDecision[], context: ExecutionContext, seam: RateLimitContext): Promise<void> {
    const departure = seam.departure?.(context);
    try {
      await this.limiter.wait(decisions, departure?.signal);
    } catch (error) {
      if (departure?.signal.aborted) throw departure.gone();
      if (!(error instanceof RateLimitUnavailableException)) throw error;
      this.headers.retryAfter(undefined, context, seam);
      throw seam.unavailable(error, context);
    } finally {
      departure?.end();
    }
  }

  /** What a request gets when the store cannot decide: `failMode` 'open' lets it through. */
  protected onStoreFailure(error: RateLimitStoreError, context: ExecutionContext, seam: RateLimitContext): boolean {
    if (this.options.failMode === 'closed' && this.options.mode !== 'shadow') {
      this.headers.retryAfter(undefined, context, seam);
      throw seam.unavailable(error, context);
    }
    return true;
  }
}
