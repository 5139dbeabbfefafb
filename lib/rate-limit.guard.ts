import { type CanActivate, type ExecutionContext, Inject, Injectable, Logger } from '@nestjs/common';
import { CallAnswers } from './call-answers.js';
import { RateLimitContexts } from './contexts/rate-limit-contexts.js';
import type { CallHooks } from './limiter/call-inputs.js';
import { charged, uncharged } from './limiter/charge-once.js';
import { type LimitedCall, limitedCall } from './limiter/limited-call.js';
import { RateLimiter, type RateLimitVerdict } from './limiter/rate-limiter.js';
import { storeFailure } from './limiter/store-failure.js';
import { RATE_LIMIT_OPTIONS } from './rate-limit.constants.js';
import { routeName, shadowRefusal } from './rate-limit.messages.js';
import type { ResolvedOptions } from './rate-limit-options.js';
import type { RoutePolicy } from './routes/route-policy.js';
import { RoutePolicies } from './routes/route-policies.js';
import type { RateLimitStoreError } from './stores/rate-limit-store.error.js';
import type { RateLimitDecision } from './stores/rate-limit-store.interface.js';

type Answer = boolean | Promise<boolean>;

/**
 * Limits each request by its route's policies, once however many times it runs on it: the Nest adapter of the engine
 * (`RateLimiter`), answering through the seam of the request's kind (`RateLimitContext`; a kind without one passes).
 * Its steps take the run's one record (`LimitedCall`): subclass it to change one (see docs/12-extending.md).
 */
@Injectable()
export class RateLimitGuard implements CanActivate {
  protected readonly logger = new Logger('RateLimitGuard');
  private readonly answers: CallAnswers;
  /** Its steps the engine asks a run's identity and cost of (a subclass's overrides included). */
  private readonly hooks: CallHooks = {
    identify: (call, policy) => this.identify(call, policy),
    cost: (call, policy) => this.cost(call, policy),
  };

  constructor(
    @Inject(RATE_LIMIT_OPTIONS) protected readonly options: ResolvedOptions,
    protected readonly routes: RoutePolicies,
    protected readonly limiter: RateLimiter,
    protected readonly contexts: RateLimitContexts,
  ) {
    this.answers = new CallAnswers(options, () => limiter.now());
  }

  canActivate(context: ExecutionContext): Answer {
    return this.limitIn(context, false);
  }

  /** Limits the request of `context` from after every guard: `RateLimitInterceptor`'s way, and a request this guard deferred. */
  limitAfterGuards(context: ExecutionContext): Answer {
    return this.limitIn(context, true);
  }

  private limitIn(context: ExecutionContext, afterGuards: boolean): Answer {
    const seam = this.contexts.for(context.getType());
    if (seam !== undefined) return this.limit(seam, context, afterGuards);
    const loading = this.contexts.load(context.getType());
    return loading.then((loaded) => loaded === undefined || this.limit(loaded, context, afterGuards));
  }

  private limit(seam: LimitedCall['seam'], context: ExecutionContext, afterGuards: boolean): Answer {
    const call = limitedCall(context, seam, this.routes.forContext(context));
    if (call === undefined || (!afterGuards && this.limiter.defers(call, this))) return true;
    return this.charge(call, call.selection, call.perSelection, this.charge(call, call.target, call.perRequest, true));
  }

  /** Charges `policies` on `holder` once, when `after` admits (a GraphQL field's own after its operation's). */
  private charge(call: LimitedCall, holder: object, policies: readonly RoutePolicy[], after: Answer): Answer {
    if (policies.length === 0) return after;
    const fresh = uncharged(holder, policies);
    // an admitted request's `after` is `true`: it is decided at once, with no closure to run later
    const verdict =
      after === true
        ? this.admit(call, holder, fresh)
        : Promise.resolve(after).then((ok) => ok && this.admit(call, holder, fresh));
    return charged(holder, policies, fresh, verdict);
  }

  /** Admits the run under `policies` (charged on `holder`; none: admitted), or refuses it, as the engine decides. */
  private admit(call: LimitedCall, holder: object, policies: readonly RoutePolicy[]): Answer {
    if (policies.length === 0) return true;
    const verdict = this.limiter.limit(call, policies, this.hooks);
    if (verdict === undefined) return true;
    if (!(verdict instanceof Promise)) return this.answer(call, holder, verdict);
    return verdict.then(
      (known) => known === undefined || this.answer(call, holder, known),
      (error: unknown) => this.onStoreFailure(call, storeFailure(error)),
    );
  }

  private answer(call: LimitedCall, holder: object, verdict: RateLimitVerdict): Answer {
    this.answers.headers(call, verdict);
    const enforcing = this.options.mode !== 'shadow';
    // a microtask on: a promise rejected before anyone awaits it costs Node's unhandled-rejection bookkeeping
    if (!verdict.allowed && enforcing) return Promise.resolve().then(() => this.refuse(call, verdict));
    if (!verdict.allowed) this.onShadowRefusal(call, verdict);
    else if (!enforcing || !delayed(verdict.decisions)) this.limiter.began(call, holder, verdict);
    else return this.waitTurn(call, verdict).then(() => (this.limiter.began(call, holder, verdict), true));
    return true;
  }

  /** The identity a policy limits the request as (see `KeySource`). */
  protected identify(call: LimitedCall, policy: RoutePolicy): string | Promise<string> {
    return this.limiter.identify(call, policy);
  }

  /** Tokens the request takes under a policy (see `CostSource`); an unusable cost is `defaultCost`. */
  protected cost(call: LimitedCall, policy: RoutePolicy): number | Promise<number> {
    return this.limiter.cost(call, policy);
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

  /** The answer when the store cannot decide (`error.reason` says why): `failMode` 'open' lets it through. */
  protected onStoreFailure(call: LimitedCall, error: RateLimitStoreError): boolean {
    if (this.options.failMode !== 'closed' || this.options.mode === 'shadow') return true;
    throw this.answers.unavailable(call, error);
  }
}

/** Whether a decision admits its request only after a wait (a `leaky_bucket` turn): a loop, no closure per request. */
function delayed(decisions: readonly RateLimitDecision[]): boolean {
  for (const decision of decisions) if (decision.delay > 0) return true;
  return false;
}
