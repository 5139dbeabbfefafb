import {
  type BeforeApplicationShutdown,
  type ExecutionContext,
  Inject,
  Injectable,
  Logger,
  type OnApplicationShutdown,
  Optional,
} from '@nestjs/common';
import { windowMs } from '../algorithms/conversions.js';
import { ALGORITHM_DESCRIPTORS } from '../algorithms/registry.js';
import type { RateLimitContext } from '../contexts/rate-limit-context.js';
import { limiting } from '../headers/rate-limit-headers.js';
import { withJitter } from '../keys/retry-jitter.js';
import { RateLimitMetrics } from '../observability/rate-limit-metrics.js';
import { RateLimitTelemetry } from '../observability/rate-limit-telemetry.js';
import type { RateLimitPolicy } from '../policy/policy.types.js';
import { RATE_LIMIT_OPTIONS } from '../rate-limit.constants.js';
import { RateLimitUnavailableException } from '../rate-limit.exception.js';
import { invalidArgument, invalidPolicy, optionNotFor, settleUnusable, shuttingDown } from '../rate-limit.messages.js';
import { InvalidPolicyError } from '../policy/resolve-policy.js';
import type { ResolvedOptions } from '../rate-limit-options.js';
import { RoutePolicies } from '../routes/route-policies.js';
import { type RoutePolicy, routePolicy } from '../routes/route-policy.js';
import { Unskipped } from '../routes/skip-if.js';
import { type RateLimitDecision, type RateLimitRequest, RateLimitStore } from '../stores/rate-limit-store.interface.js';
import { StoreCalls } from '../stores/store-calls.js';
import { type StoreClock, storeClock } from '../stores/store-clock.js';
import { WakeQueue } from '../utils/wake-queue.js';
import { AdaptiveRates } from './adaptive-rates.js';
import { type CallHooks, CallInputs, costOf, identityOf } from './call-inputs.js';
import { GIVEN_INPUTS, GivenPolicies } from './given-policies.js';
import { type AfterGuards, type LimitedCall, recordOn, takeDeferred, takeEnds, takeSettling } from './limited-call.js';
import { ReleaseRetries } from './release-retries.js';
import { type Ending, owedBy, RequestEnd, type Settling } from './request-end.js';
import { Scales } from './scales.js';
import { Shares } from './shares/shares.js';
import { storeFailure } from './store-failure.js';
import { StoreRequests } from './store-requests.js';

/**
 * How much of one bucket an identity has used, for dashboards and "you have used 80 %" mails
 * (`RateLimiterService.usage`).
 *
 * @example { used: 8_000, limit: 10_000, remaining: 2_000, resetsAt: new Date('2026-12-01T00:00:00+01:00'), source: 'store' }
 */
export interface RateLimitUsage {
  /**
   * Tokens taken and still counted: `limit - remaining` (slots held, for `concurrency`); above
   * `limit` while a settle past the limit is being paid back (see `RateLimitPolicy.settle`).
   */
  used: number;
  /** The policy's limit (`burst`, or `limit`), as decisions give it. */
  limit: number;
  /** Whole tokens left. */
  remaining: number;
  /** When it is all there again: a quota's period's end; any other bucket's when it is full again. */
  resetsAt: Date;
  /**
   * Where the answer came from: `'store'`, the module's store; `'local'`, this process's own
   * limiter, standing in while the store is unreachable (`failMode: 'local'`): a count of this
   * process alone, not one to bill by.
   */
  source: 'store' | 'local';
}

/**
 * Work reserved outside a request (`RateLimiterService.reserve`): its cost taken up front, its
 * real cost settled when it is done. The first of `settle` and `cancel` acts; later calls do
 * nothing, and neither does anything for a refused reservation.
 *
 * @example
 * const job = await limiter.reserve(`tenant:${id}`, tokensPerDay, estimate);
 * if (!job.allowed) return requeue(job.decision.retryAfter);
 * try { await job.settle((await summarize(doc)).usage.total_tokens); } catch (error) { await job.cancel(); throw error; }
 */
export interface RateLimitReservation {
  /** Whether every policy admitted the reservation. */
  readonly allowed: boolean;
  /** The decision that speaks for it (a refusal's: the one that frees up last; see `limiting`). */
  readonly decision: RateLimitDecision;
  /** One decision per policy. */
  readonly decisions: readonly RateLimitDecision[];
  /**
   * Charges the work its real cost, `actual` (cost units, a finite number >= 0), in every policy:
   * the difference with the reservation taken past empty (into debt, down to the policy's
   * `maxDebt`) or given back. Tried again for a while if the store fails; never rejects for that.
   *
   * @throws RangeError (rejects) for an `actual` that is not a finite number >= 0
   */
  settle(actual: number): Promise<void>;
  /** Gives the whole reservation back: the work did not happen. */
  cancel(): Promise<void>;
}

/** What the engine decided for one run of the guard: every policy's decision, all-or-nothing. */
export interface RateLimitVerdict {
  /** The policies decided, as scaled when they were. */
  readonly policies: readonly RoutePolicy[];
  /** One store request per policy. */
  readonly requests: readonly RateLimitRequest[];
  /** One decision per policy. */
  readonly decisions: readonly RateLimitDecision[];
  /** The decision the headers describe and a refusal answers with: the one that frees up last (see `limiting`). */
  readonly limiting: RateLimitDecision;
  /** Whether every policy admitted the request. */
  readonly allowed: boolean;
}

/**
 * The engine behind the guard and `RateLimiterService`. It builds every store request (one
 * place: `StoreRequests`), decides (the store's calls: timeout, circuit breaker, `failMode`;
 * `setScale` and adaptive factors; `skipIf`; `retryAfterJitter`), and owns each admitted
 * request's end: whichever of its ends comes first settles, once, what it owes (refunds of
 * `count: 'failures'`, slots given back, latencies for adaptive rates; see `RequestEnd`). It
 * times `leaky_bucket` waits and tells metrics and events. It never calls back into whoever asks
 * it, but for the guard's steps it is handed (`CallHooks`). Internal: apps use `RateLimiterService`.
 */
@Injectable()
export class RateLimiter implements BeforeApplicationShutdown, OnApplicationShutdown {
  private readonly calls: StoreCalls;
  /** The store's given clock (see `RateLimitStore.clock`); `undefined`: real time. */
  private readonly clock: StoreClock | undefined;
  /** `leaky_bucket` waits, on the store's clock. */
  private readonly sleepers: WakeQueue;
  /** Waits in progress, each with the refund it makes when it ends early: shutdown sees them through. */
  private readonly waiting = new Set<Promise<void>>();
  private readonly scales = new Scales();
  private readonly requests: StoreRequests;
  /** What each set of guard steps says of a run (see `CallInputs`), made once per guard. */
  private readonly inputs = new WeakMap<CallHooks, CallInputs>();
  private readonly given: GivenPolicies;
  private readonly unskipped: Unskipped;
  private readonly adaptive: AdaptiveRates;
  private readonly releases: ReleaseRetries;
  /** Hot keys' shares, when the module takes them (`shares`). */
  private readonly shares: Shares | undefined;
  /** The module's policies as they apply to requests, for `setScale` to check a factor against. */
  private readonly modulePolicies: readonly RoutePolicy[];
  private readonly telemetry: RateLimitTelemetry;
  /** Policies whose `settle` gave no usable cost: warned of once each. */
  private readonly unusableSettles = new Set<string>();
  private readonly logger = new Logger('RateLimitModule');

  constructor(
    @Inject(RATE_LIMIT_OPTIONS) private readonly options: ResolvedOptions,
    @Inject(RateLimitStore) store: RateLimitStore,
    @Optional() @Inject(RateLimitMetrics) metrics: RateLimitMetrics | null = null,
    @Optional() @Inject(RoutePolicies) private readonly routes: RoutePolicies | null = null,
  ) {
    this.modulePolicies = options.policies.map((policy) => routePolicy(policy, options));
    this.given = new GivenPolicies(options, this.scales);
    this.unskipped = new Unskipped(options.skipIf);
    this.adaptive = new AdaptiveRates((name, factor) => this.setScale(name, factor));
    this.telemetry = new RateLimitTelemetry(metrics, options, (decision) => this.calls.decidedLocally(decision));
    this.calls = new StoreCalls(store, options, this.telemetry.storeCalls(store));
    this.clock = storeClock(store.clock);
    this.sleepers = new WakeQueue(this.clock);
    this.requests = new StoreRequests(this);
    if (options.shares !== undefined) {
      const { calls } = this;
      this.shares = new Shares(
        options.shares,
        {
          consume: (requests) => calls.consume(requests),
          take: (requests) => calls.take(requests),
          settle: (settles) => calls.settle(settles),
        },
        () => this.now(),
      );
      calls.shareWith(this.shares);
    }
    this.releases = new ReleaseRetries(
      { release: (decisions) => this.calls.release(decisions), settle: (settles) => this.calls.settle(settles) },
      (outcome, decisions, error) => this.telemetry.released(outcome, decisions, error),
      this.logger,
    );
  }

  // ---------------------------------------------------------------------------------------------
  // A run of the guard

  /**
   * Decides a run of the guard under `policies` (those of its route not charged on it yet): the
   * ones a `skipIf` lets pass are left out, the others decided under their factors, all at once;
   * `undefined` when none is left. The verdict itself when the store decides at once (the memory
   * store), so an admitted request waits on no promise.
   *
   * @param hooks the guard's steps that say the run's identity and cost under a policy
   * @returns rejected with what a key or cost source threw (as by an async guard), or with a
   * `RateLimitStoreError` when the store cannot decide and `failMode` is not 'local'
   */
  limit(
    call: LimitedCall,
    policies: readonly RoutePolicy[],
    hooks: CallHooks,
  ): RateLimitVerdict | undefined | Promise<RateLimitVerdict | undefined> {
    if (this.unskipped.none(policies)) {
      try {
        return this.decideRun(call, policies, hooks);
      } catch (error) {
        return Promise.reject(error);
      }
    }
    return this.unskipped.of(policies, call.request, call.context).then((applying) => {
      if (applying !== policies) this.telemetry.skipped(call.context, policies, applying);
      return applying.length === 0 ? undefined : this.decideRun(call, applying, hooks);
    });
  }

  /**
   * Whether a run is left to be decided after every guard (by `RateLimitOutcomeInterceptor`,
   * which the routes of such policies run), and if so notes who left it: a policy of its route
   * holds a slot until the request ends, and its transport does not tell the end (a gateway
   * message, a microservice call). A guard after this one that refuses the request, or an
   * interceptor that answers it without its handler, would end it where nothing hears; after the
   * guards, the interceptor sees it end, however it ends, or it is never charged.
   */
  defers(call: LimitedCall, guard: AfterGuards): boolean {
    if (!releasing(call.route) || this.transportEnd(call) !== undefined) return false;
    call.record.deferred = guard;
    return true;
  }

  /**
   * The request a run admitted under `verdict` begins: what it owes its policies hangs on its one
   * end (see `RequestEnd`). Its transport's end settles it (HTTP: the response finished, or closed
   * however early, even before the verdict came); what a GraphQL field's own policies charged (on
   * `holder`, its selection), or what was charged where the transport tells no end, is settled by
   * the handler's outcome too, whichever comes first.
   */
  began(call: LimitedCall, holder: object, verdict: RateLimitVerdict): void {
    const owed = owedBy(verdict.policies, verdict.requests, verdict.decisions);
    if (owed === undefined) return;
    const end = new RequestEnd(owed, call.context, this.settle);
    if (owed.settles.length > 0) {
      (recordOn(call.selection).settling ??= []).push(end);
      for (const settling of owed.settles) this.settleEvery(end, settling);
    }
    const transport = this.transportEnd(call);
    const ofSelection = holder !== call.target;
    if (transport !== undefined) {
      const { record } = call;
      if (!ofSelection && call.selection !== call.target) record.judged = true;
      // a field's own policies: the response ending says nothing of the field, and ends it as failed
      void transport.then((ok) => end.end(ok && !ofSelection && record.failed !== true));
    }
    if (ofSelection || transport === undefined) (recordOn(call.selection).ends ??= []).push(end);
  }

  /**
   * What the handler's outcome settles for a request in `context`: the ends kept for it (see
   * `began`), as a function of whether the handler completed; `undefined` when none is kept.
   * Called once per request by `RateLimitOutcomeInterceptor`.
   */
  outcome(seam: RateLimitContext, context: ExecutionContext): ((completed: boolean) => void) | undefined {
    const target = seam.target?.(context) ?? context.getArgs();
    const selection = seam.selection?.(context) ?? target;
    const ends = takeEnds(selection);
    const judged = selection !== target && recordOn(target).judged === true;
    if (ends === undefined && !judged) return undefined;
    return (completed) => {
      if (!completed && judged) recordOn(target).failed = true;
      if (ends !== undefined) for (const end of ends) end.end(completed);
    };
  }

  /**
   * The ends of the request in `context` that settle its real cost, for its handler's values (the
   * last one is what `settle` reads) and its meters; `undefined` when none of its policies settles.
   * Taken once, by `RateLimitOutcomeInterceptor`.
   */
  settling(seam: RateLimitContext, context: ExecutionContext): RequestEnd[] | undefined {
    const target = seam.target?.(context) ?? context.getArgs();
    return takeSettling(seam.selection?.(context) ?? target);
  }

  /** The guard that left the request in `context` to be decided after every guard (see `defers`), taken: once. */
  deferred(seam: RateLimitContext, context: ExecutionContext): AfterGuards | undefined {
    return takeDeferred(seam.target?.(context) ?? context.getArgs());
  }

  /** The identity a policy limits a run as, from its key sources (see `KeySource`): `RateLimitGuard.identify`'s own. */
  identify(call: LimitedCall, policy: RoutePolicy): string | Promise<string> {
    return identityOf(call, policy, this.options);
  }

  /** The tokens a run takes under a policy (see `CostSource`): `RateLimitGuard.cost`'s own. */
  cost(call: LimitedCall, policy: RoutePolicy): number | Promise<number> {
    return costOf(call, policy);
  }

  // ---------------------------------------------------------------------------------------------
  // RateLimiterService

  /** See `RateLimiterService.consume`; `where` names the call in messages. */
  async consume(
    where: string,
    identity: string,
    policies: RateLimitPolicy | RateLimitPolicy[],
    cost: number,
    tier: string | undefined,
  ): Promise<RateLimitDecision[]> {
    const given = this.given.of(where, identity, policies, cost, tier);
    return this.decisions(await this.givenBuilt(given, identity, cost, tier), true, given);
  }

  /** See `RateLimiterService.reserve`. */
  async reserve(
    identity: string,
    policies: RateLimitPolicy | RateLimitPolicy[],
    cost: number,
    tier: string | undefined,
  ): Promise<RateLimitReservation> {
    const given = this.given.of('RateLimiterService.reserve', identity, policies, cost, tier);
    const requests = await this.givenBuilt(given, identity, cost, tier);
    // as at start for a policy that settles: an algorithm that cannot (concurrency) says why
    for (const { rule } of requests) {
      const why = ALGORITHM_DESCRIPTORS[rule.algorithm].refuses?.settle;
      if (why !== undefined)
        throw new InvalidPolicyError(
          invalidPolicy('RateLimiterService.reserve', optionNotFor('settle', rule.algorithm, why)),
        );
    }
    const decisions = await this.decisions(requests, true, given);
    const decision = limiting(decisions);
    let open = decision.allowed;
    const settle = async (actual: number): Promise<void> => {
      if (typeof actual !== 'number' || !(actual >= 0 && actual < Infinity))
        throw new RangeError(
          invalidArgument('RateLimitReservation.settle', 'actual', actual, 'must be a finite number >= 0'),
        );
      if (!open) return;
      open = false;
      const settles = decisions.map((each) => ({ decision: each, actual }));
      const leaseMs = Math.max(...requests.map(({ rule }) => windowMs(rule.rps, rule.burst + (rule.debt ?? 0))));
      await this.releases.settle(settles, leaseMs, () =>
        this.calls.settleLocally(
          requests,
          requests.map((request) => actual - request.cost),
        ),
      );
    };
    const cancel = async (): Promise<void> => {
      if (!open) return;
      open = false;
      await this.calls.refund(decisions);
    };
    return { allowed: decision.allowed, decision, decisions, settle, cancel };
  }

  /** See `RateLimiterService.peek`; `where` names the call in messages. */
  async peek(
    where: string,
    identity: string,
    policies: RateLimitPolicy | RateLimitPolicy[],
    cost: number,
    tier: string | undefined,
  ): Promise<RateLimitDecision[]> {
    return this.decisions(await this.givenRequests(where, identity, policies, cost, tier), false);
  }

  /** See `RateLimiterService.usage`. */
  async usage(identity: string, policy: RateLimitPolicy, tier: string | undefined): Promise<RateLimitUsage> {
    const where = 'RateLimiterService.usage';
    if (Array.isArray(policy))
      throw new TypeError(invalidArgument(where, 'policy', policy, 'must be one policy: usage answers for one bucket'));
    const requests = await this.givenRequests(where, identity, policy, 1, tier);
    const [decision] = await this.calls.peek(requests);
    const { rule } = requests[0];
    // a quota's period ends where the request's rule says; any other bucket once it is full again
    const resetsAt =
      rule.origin !== undefined ? rule.origin + windowMs(rule.rps, rule.burst) : this.now() + decision.fullAfter * 1000;
    return {
      // in debt (a settle past the limit), what it owes past empty counts too
      used: Math.max(0, decision.limit - decision.remaining) + (decision.debt ?? 0),
      limit: decision.limit,
      remaining: decision.remaining,
      resetsAt: new Date(resetsAt),
      source: this.calls.decidedLocally(decision) ? 'local' : 'store',
    };
  }

  /** Forgets the buckets of `identity` under policies given in code. */
  async reset(
    identity: string,
    policies: RateLimitPolicy | RateLimitPolicy[],
    tier: string | undefined,
  ): Promise<void> {
    const given = this.given.of('RateLimiterService.reset', identity, policies, 1, tier);
    await this.calls.reset(given.map((policy) => this.requests.key(policy, identity, tier)));
  }

  /** See `RateLimiterService.resetAll`. */
  resetAll(): Promise<void> {
    return this.calls.resetAll(this.options.prefix);
  }

  /** See `RateLimiterService.setScale`. */
  setScale(policyName: string, factor: number): void {
    this.scales.set(policyName, factor, [...this.modulePolicies, ...(this.routes?.all() ?? [])]);
  }

  /** See `RateLimiterService.getScale`. */
  getScale(policyName: string): number {
    return this.scales.get(policyName);
  }

  /** See `RateLimiterService.now`. */
  now(): number {
    return this.clock === undefined ? Date.now() : this.clock.now();
  }

  /** See `RateLimiterService.wait`. */
  wait(decisions: readonly RateLimitDecision[], signal?: AbortSignal): Promise<void> {
    let delay = 0;
    for (const decision of decisions) if (decision.allowed) delay = Math.max(delay, decision.delay);
    if (delay <= 0) return Promise.resolve();
    const waiting = this.waitTurn(decisions, delay * 1000, signal);
    this.waiting.add(waiting);
    const done = () => void this.waiting.delete(waiting);
    waiting.then(done, done);
    return waiting;
  }

  /** See `RateLimiterService.refund`. */
  refund(decisions: readonly RateLimitDecision[]): Promise<void> {
    return this.calls.refund(decisions);
  }

  /**
   * Gives back the slots `decisions` took as their request ended, tried again while the store
   * fails, until they land or `leaseMs` has passed (see `ReleaseRetries`). Resolves then.
   */
  release(decisions: readonly RateLimitDecision[], leaseMs: number): Promise<void> {
    return this.releases.release(decisions, leaseMs);
  }

  /**
   * Ends every `leaky_bucket` wait at once, before the HTTP server stops and waits for the
   * requests in flight: each waiting request gives its charge back and is answered 503 without
   * running its handler, so `app.close()` never waits for a queue (up to `burst / rps`). Resolves
   * when their refunds are done, so they reach the store before `onApplicationShutdown` closes it.
   */
  async beforeApplicationShutdown(): Promise<void> {
    this.sleepers.close();
    await Promise.allSettled(this.waiting);
    // what is left of each share goes back while the store is open (it closes after this)
    await this.shares?.close();
  }

  /** Stops its own timers and the local limiter; the store is closed by whoever opened it. */
  async onApplicationShutdown(): Promise<void> {
    this.sleepers.close();
    this.adaptive.close();
    this.releases.close();
    await this.calls.close();
  }

  // ---------------------------------------------------------------------------------------------

  /** A run's policies under their factors, its requests built and decided. */
  private decideRun(
    call: LimitedCall,
    applying: readonly RoutePolicy[],
    hooks: CallHooks,
  ): RateLimitVerdict | Promise<RateLimitVerdict> {
    const policies = this.scales.apply(applying);
    let inputs = this.inputs.get(hooks);
    if (inputs === undefined) this.inputs.set(hooks, (inputs = new CallInputs(hooks, this.options.timeout)));
    const built = this.requests.build(policies, inputs, call);
    if (!Array.isArray(built))
      return built.then(
        (requests) => this.decideRequests(call, policies, requests),
        (error: unknown) => this.failed(call, policies, error),
      );
    return this.decideRequests(call, policies, built);
  }

  private decideRequests(
    call: LimitedCall,
    policies: readonly RoutePolicy[],
    requests: RateLimitRequest[],
  ): RateLimitVerdict | Promise<RateLimitVerdict> {
    const decided = this.decisions(requests, true, policies);
    if (Array.isArray(decided)) return this.verdict(call.context, policies, requests, decided);
    return decided.then(
      (decisions) => this.verdict(call.context, policies, requests, decisions),
      (error: unknown) => this.failed(call, policies, error),
    );
  }

  /** The store requests of a `RateLimiterService` call (see `GivenPolicies`). */
  private givenRequests(
    where: string,
    identity: string,
    policies: RateLimitPolicy | RateLimitPolicy[],
    cost: number,
    tier: string | undefined,
  ): RateLimitRequest[] | Promise<RateLimitRequest[]> {
    return this.givenBuilt(this.given.of(where, identity, policies, cost, tier), identity, cost, tier);
  }

  /** The store requests of given policies (see `givenRequests`). */
  private givenBuilt(
    given: readonly RoutePolicy[],
    identity: string,
    cost: number,
    tier: string | undefined,
  ): RateLimitRequest[] | Promise<RateLimitRequest[]> {
    return this.requests.build(given, GIVEN_INPUTS, { identity, cost, tier, timeoutMs: this.options.timeout });
  }

  /**
   * The store's decisions (or, for a charge of `policies` with shares on, a share's: see `Shares`),
   * jittered where the store's answers and its remembered refusals meet, so both say the same.
   */
  private decisions(
    requests: readonly RateLimitRequest[],
    charge: boolean,
    policies?: readonly RoutePolicy[],
  ): RateLimitDecision[] | Promise<RateLimitDecision[]> {
    const decided = !charge
      ? this.calls.peek(requests)
      : ((policies !== undefined ? this.shares?.consume(requests, policies) : undefined) ??
        this.calls.consume(requests));
    const { retryAfterJitter: jitter } = this.options;
    if (jitter === 0) return decided;
    return Array.isArray(decided)
      ? withJitter(decided, requests, jitter)
      : decided.then((decisions) => withJitter(decisions, requests, jitter));
  }

  private verdict(
    context: ExecutionContext,
    policies: readonly RoutePolicy[],
    requests: readonly RateLimitRequest[],
    decisions: RateLimitDecision[],
  ): RateLimitVerdict {
    const named = limiting(decisions);
    this.telemetry.decided(context, decisions, named.allowed);
    return { policies, requests, decisions, limiting: named, allowed: named.allowed };
  }

  /**
   * A run the store could not decide, or whose key function passed `timeout`: told to metrics and
   * events with the answer `failMode` gives it, and rejected with as a `RateLimitStoreError` for
   * the guard to answer; any other error (a key or cost source's bug) is rethrown as it is.
   */
  private failed(call: LimitedCall, policies: readonly RoutePolicy[], error: unknown): never {
    const failure = storeFailure(error);
    const { failMode, mode } = this.options;
    this.telemetry.failedOver(call.context, policies, failMode !== 'closed' || mode === 'shadow');
    throw failure;
  }

  /** The end of a run's request as its transport tells it, asked once per request (see `RateLimitContext.ended`). */
  private transportEnd(call: LimitedCall): Promise<boolean> | undefined {
    const { record } = call;
    if (record.ended === undefined) record.ended = call.seam.ended?.(call.context) ?? null;
    return record.ended ?? undefined;
  }

  /** Settles what an admitted request owed when it ended (see `RequestEnd`). */
  private readonly settle = ({ owed, succeeded, latencyMs, result, context }: Ending): void => {
    const refunds = succeeded ? owed.refunds : [];
    if (owed.settles.length > 0) void this.settleCosts(owed.settles, refunds, result, context);
    else if (refunds.length > 0) void this.calls.refund(refunds);
    if (owed.releases.length > 0) void this.release(owed.releases, owed.leaseMs);
    for (const policy of owed.latencies) this.adaptive.record(policy, latencyMs);
  };

  /**
   * Charges each settling policy of an ended request its real cost (see `actualOf`), in one store
   * call with its refunds (`count: 'failures'`, as a settle of nothing), after the interval settle
   * still on its way; a settle the store fails is tried again as a release is.
   */
  private async settleCosts(
    settles: readonly Settling[],
    refunds: readonly RateLimitDecision[],
    result: { value: unknown } | undefined,
    context: ExecutionContext,
  ): Promise<void> {
    const due: Settling[] = [];
    const actuals: number[] = [];
    for (const settling of settles) {
      const actual = await this.actualOf(settling, result, context);
      if (actual === undefined) continue;
      await settling.meter.idle;
      due.push(settling);
      actuals.push(actual);
    }
    if (due.length === 0) {
      if (refunds.length > 0) await this.calls.refund(refunds);
      return;
    }
    const leaseMs = Math.max(...due.map((settling) => settling.leaseMs));
    await this.settleNow(due, actuals, refunds, leaseMs);
  }

  /**
   * A settling policy's real cost when its request ended: what its handler counted on its meter;
   * else, from its result, what the policy's `settle` says; else `undefined`, the reservation
   * stands (a request that ended before its handler counted or returned anything, say its client
   * gone while the work went on, is not let off for free).
   */
  private async actualOf(
    { policy, meter }: Settling,
    result: { value: unknown } | undefined,
    context: ExecutionContext,
  ): Promise<number | undefined> {
    if (meter.touched) return meter.count;
    const fromResult = policy.settles?.result;
    if (fromResult !== undefined && result !== undefined) {
      try {
        const actual: unknown = await fromResult(result.value, context);
        if (typeof actual === 'number' && actual >= 0 && actual < Infinity) return actual;
        this.unusable(policy.name, actual);
      } catch (error) {
        this.unusable(policy.name, error);
      }
    }
    return undefined;
  }

  /** Warns, once per policy, of a `settle` that gave no usable cost (the reservation then stands). */
  private unusable(policy: string, what: unknown): void {
    if (this.unusableSettles.has(policy)) return;
    this.unusableSettles.add(policy);
    this.logger.warn(settleUnusable(policy, what));
  }

  /** Charges `due` their `actuals` (with `refunds` given back), telling each meter what its bucket holds after. */
  private async settleNow(
    due: readonly Settling[],
    actuals: readonly number[],
    refunds: readonly RateLimitDecision[],
    leaseMs: number,
  ): Promise<void> {
    const settles = due.map(({ decision }, i) => ({ decision, actual: actuals[i] }));
    // a refund is a settle of nothing; a policy that settles its real cost is charged that instead
    for (const decision of refunds)
      if (!due.some((settling) => settling.decision === decision)) settles.push({ decision, actual: 0 });
    const after = await this.releases.settle(settles, leaseMs, () =>
      this.calls.settleLocally(
        due.map(({ request }) => request),
        due.map(({ meter }, i) => actuals[i] - meter.charged),
      ),
    );
    due.forEach(({ meter }, i) => meter.settledAt(actuals[i], after?.[i]));
  }

  /**
   * Settles what a meter has counted so far at its policy's `settleEvery`, while its request runs:
   * one wait in the engine's queue at a time (no timer of its own), ended by the request's end.
   */
  private settleEvery(end: RequestEnd, settling: Settling): void {
    const everyMs = settling.policy.settles?.everyMs;
    if (everyMs === undefined) return;
    const { meter } = settling;
    const tick = async (): Promise<void> => {
      if (!(await this.sleepers.wait(everyMs, end.signal)) || end.over) return;
      if (meter.touched && meter.count !== meter.charged) {
        meter.idle = this.settleNow([settling], [meter.count], [], settling.leaseMs);
        await meter.idle;
      }
      void tick();
    };
    void tick();
  }

  /** Sleeps until the turn comes; when the wait ends early, gives the charge back and rejects. */
  private async waitTurn(
    decisions: readonly RateLimitDecision[],
    ms: number,
    signal: AbortSignal | undefined,
  ): Promise<void> {
    const started = performance.now();
    if (await this.sleepers.wait(ms, signal)) return this.telemetry.queued(decisions, started);
    await this.refund(decisions);
    if (signal?.aborted) throw signal.reason;
    throw new RateLimitUnavailableException(new Error(shuttingDown));
  }
}

/** Whether a route's policy holds a slot its request gives back when it ends (a loop: no closure per request). */
function releasing(route: readonly RoutePolicy[]): boolean {
  for (const policy of route) if (policy.owes.release) return true;
  return false;
}
