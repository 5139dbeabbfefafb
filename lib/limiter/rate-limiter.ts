import {
  type BeforeApplicationShutdown,
  type ExecutionContext,
  Inject,
  Injectable,
  type OnApplicationShutdown,
  Optional,
} from '@nestjs/common';
import { limiting } from '../headers/rate-limit-headers.js';
import { withJitter } from '../keys/retry-jitter.js';
import { RateLimitMetrics } from '../observability/rate-limit-metrics.js';
import { RateLimitTelemetry } from '../observability/rate-limit-telemetry.js';
import { windowMs } from '../algorithms/conversions.js';
import type { RateLimitPolicy } from '../policy/policy.types.js';
import { RATE_LIMIT_OPTIONS } from '../rate-limit.constants.js';
import { RateLimitUnavailableException } from '../rate-limit.exception.js';
import { invalidArgument, shuttingDown } from '../rate-limit.messages.js';
import type { ResolvedOptions } from '../rate-limit-options.js';
import { RoutePolicies } from '../routes/route-policies.js';
import { type RoutePolicy, routePolicy } from '../routes/route-policy.js';
import { type RateLimitDecision, type RateLimitRequest, RateLimitStore } from '../stores/rate-limit-store.interface.js';
import { StoreCalls } from '../stores/store-calls.js';
import { type StoreClock, storeClock } from '../stores/store-clock.js';
import { WakeQueue } from '../utils/wake-queue.js';
import { AdaptiveRates } from './adaptive-rates.js';
import { GivenPolicies } from './given-policies.js';
import type { LimitedCall, Watched } from './limited-call.js';
import { Scales } from './scales.js';
import { storeFailure } from './store-failure.js';

/**
 * How much of one bucket an identity has used, for dashboards and "you have used 80 %" mails
 * (`RateLimiterService.usage`).
 *
 * @example { used: 8_000, limit: 10_000, remaining: 2_000, resetsAt: new Date('2026-12-01T00:00:00+01:00') }
 */
export interface RateLimitUsage {
  /** Tokens taken and still counted: `limit - remaining` (slots held, for `concurrency`). */
  used: number;
  /** The policy's limit (`burst`, or `limit`), as decisions give it. */
  limit: number;
  /** Whole tokens left. */
  remaining: number;
  /** When it is all there again: a quota's period's end; any other bucket's when it is full again. */
  resetsAt: Date;
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
 * The engine behind the guard and `RateLimiterService`: the store's calls (timeout, circuit
 * breaker, `failMode`), the factors of `setScale` and of adaptive policies, `retryAfterJitter`,
 * `leaky_bucket` waits, and what it tells metrics and events. It never calls back into whoever
 * asks it. Internal: apps use `RateLimiterService`.
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
  private readonly given: GivenPolicies;
  private readonly adaptive: AdaptiveRates;
  /** The module's policies as they apply to requests, for `setScale` to check a factor against. */
  private readonly modulePolicies: readonly RoutePolicy[];
  private readonly telemetry: RateLimitTelemetry;

  constructor(
    @Inject(RATE_LIMIT_OPTIONS) private readonly options: ResolvedOptions,
    @Inject(RateLimitStore) store: RateLimitStore,
    @Optional() @Inject(RateLimitMetrics) metrics: RateLimitMetrics | null = null,
    @Optional() @Inject(RoutePolicies) private readonly routes: RoutePolicies | null = null,
  ) {
    this.modulePolicies = options.policies.map((policy) => routePolicy(policy, options));
    this.given = new GivenPolicies(options, this.scales, this);
    this.adaptive = new AdaptiveRates((name, factor) => this.setScale(name, factor));
    this.telemetry = new RateLimitTelemetry(metrics, options, (decision) => this.calls.decidedLocally(decision));
    this.calls = new StoreCalls(store, options, this.telemetry.storeCalls(store));
    this.clock = storeClock(store.clock);
    this.sleepers = new WakeQueue(this.clock);
  }

  /** A route's policies under the factors in force (see `setScale`). */
  scaled(policies: readonly RoutePolicy[]): readonly RoutePolicy[] {
    return this.scales.apply(policies);
  }

  /**
   * Charges a run of the guard, once its store requests are built: the verdict itself when they
   * were and the store decided at once (the memory store), so an admitted request waits on no
   * promise.
   *
   * @throws RateLimitStoreError (or rejects with it) when the store cannot decide and `failMode` is
   * not 'local'; rejects with what building the requests rejected with
   */
  decide(
    call: LimitedCall,
    policies: readonly RoutePolicy[],
    requests: RateLimitRequest[] | Promise<RateLimitRequest[]>,
  ): RateLimitVerdict | Promise<RateLimitVerdict> {
    if (!Array.isArray(requests))
      return requests.then(
        (built) => this.decide(call, policies, built),
        (error: unknown) => this.failed(call, policies, error),
      );
    const decided = this.decisions(requests, true);
    if (Array.isArray(decided)) return this.verdict(call.context, policies, requests, decided);
    return decided.then(
      (decisions) => this.verdict(call.context, policies, requests, decisions),
      (error: unknown) => this.failed(call, policies, error),
    );
  }

  /** A run some of whose policies a `skipIf` let pass: `applying` are those left. */
  skipped(call: LimitedCall, policies: readonly RoutePolicy[], applying: readonly RoutePolicy[]): void {
    this.telemetry.skipped(call.context, policies, applying);
  }

  /**
   * Settles what an admitted request owed its outcome: refunds when it succeeded, latencies for
   * adaptive rates, and the slots it held (`concurrency`) however it ended.
   */
  settle(watched: readonly Watched[], succeeded: boolean, latencyMs: number): void {
    for (const { refunds, adaptive, releases } of watched) {
      if (succeeded && refunds.length > 0) void this.refund(refunds);
      if (releases.length > 0) void this.refund(releases);
      for (const policy of adaptive) this.adaptive.record(policy, latencyMs);
    }
  }

  /** Decides policies given in code (`RateLimiterService.consume` and `peek`); `where` names the call in messages. */
  async decideGiven(
    where: string,
    identity: string,
    policies: RateLimitPolicy | RateLimitPolicy[],
    cost: number,
    tier: string | undefined,
    charge: boolean,
  ): Promise<RateLimitDecision[]> {
    return this.decisions(await this.given.requests(where, identity, policies, cost, tier), charge);
  }

  /** See `RateLimiterService.usage`. */
  async usage(identity: string, policy: RateLimitPolicy, tier: string | undefined): Promise<RateLimitUsage> {
    const where = 'RateLimiterService.usage';
    if (Array.isArray(policy))
      throw new TypeError(invalidArgument(where, 'policy', policy, 'must be one policy: usage answers for one bucket'));
    const requests = await this.given.requests(where, identity, policy, 1, tier);
    const [decision] = await this.calls.peek(requests);
    const { rule } = requests[0];
    // a quota's period ends where the request's rule says; any other bucket once it is full again
    const resetsAt =
      rule.origin !== undefined ? rule.origin + windowMs(rule.rps, rule.burst) : this.now() + decision.fullAfter * 1000;
    return {
      used: Math.max(0, decision.limit - decision.remaining),
      limit: decision.limit,
      remaining: decision.remaining,
      resetsAt: new Date(resetsAt),
    };
  }

  /** Forgets the buckets of `identity` under policies given in code. */
  async reset(
    identity: string,
    policies: RateLimitPolicy | RateLimitPolicy[],
    tier: string | undefined,
  ): Promise<void> {
    const keys = this.given.keys('RateLimiterService.reset', identity, policies, tier);
    await this.calls.reset(keys);
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
   * Ends every `leaky_bucket` wait at once, before the HTTP server stops and waits for the
   * requests in flight: each waiting request gives its charge back and is answered 503 without
   * running its handler, so `app.close()` never waits for a queue (up to `burst / rps`). Resolves
   * when their refunds are done, so they reach the store before `onApplicationShutdown` closes it.
   */
  async beforeApplicationShutdown(): Promise<void> {
    this.sleepers.close();
    await Promise.allSettled(this.waiting);
  }

  /** Stops its own timers and the local limiter; the store is closed by whoever opened it. */
  async onApplicationShutdown(): Promise<void> {
    this.sleepers.close();
    this.adaptive.close();
    await this.calls.close();
  }

  /** The store's decisions, jittered where the store's answers and its remembered refusals meet, so both say the same. */
  private decisions(
    requests: readonly RateLimitRequest[],
    charge: boolean,
  ): RateLimitDecision[] | Promise<RateLimitDecision[]> {
    const decided = charge ? this.calls.consume(requests) : this.calls.peek(requests);
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
