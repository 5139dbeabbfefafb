import { type BeforeApplicationShutdown, Inject, Injectable, type OnApplicationShutdown, Optional } from '@nestjs/common';
import type { RateLimitPolicy } from './policy/policy.types.js';
import { RATE_LIMIT_OPTIONS } from './rate-limit.constants.js';
import { RateLimitUnavailableException } from './rate-limit.exception.js';
import { shuttingDown } from './rate-limit.messages.js';
import type { ResolvedOptions } from './rate-limit-options.js';
import { withJitter } from './keys/retry-jitter.js';
import { RateLimitMetrics } from './observability/rate-limit-metrics.js';
import { RateLimitTelemetry } from './observability/rate-limit-telemetry.js';
import { GivenPolicies } from './routes/given-policies.js';
import { RoutePolicies } from './routes/route-policies.js';
import { type RoutePolicy, routePolicy } from './routes/route-policy.js';
import { Scales } from './routes/scales.js';
import { type RateLimitDecision, type RateLimitRequest, RateLimitStore } from './stores/rate-limit-store.interface.js';
import { StoreCalls } from './stores/store-calls.js';
import { type StoreClock, storeClock } from './stores/store-clock.js';
import { WakeQueue } from './utils/wake-queue.js';

/**
 * The engine behind the guard, for code outside it: consume, peek and reset buckets by
 * identity, with the module's store, prefix, timeout and fail mode.
 *
 * Every store call is bounded by `timeout`. After 3 failures in a row a circuit breaker stops
 * calling the store: decisions take the `failMode` outcome at once, and one call every 250 ms
 * probes whether the store answers again.
 *
 * An identity is `<source>:<value>` as the guard builds it (`user:42`, `api-key:abc`,
 * `ip:1.2.3.4`), so code reaches the guard's bucket for the same policy name. On a store failure
 * it throws `RateLimitStoreError`, except with `failMode: 'local'`, where it decides in memory.
 *
 * Bad arguments reject the call before anything reaches the store, and are no store failure: a
 * bad policy, or two policies with the same name (an unnamed one is `'default'`: they would share
 * one bucket), with `InvalidPolicyError`; a cost that is not a finite number > 0 with a
 * `TypeError` or `RangeError`.
 *
 * @example
 * const [decision] = await limiter.consume(`user:${user.id}`, { name: 'login', limit: 5, window: '15m' });
 * if (!decision.allowed) throw new RateLimitExceededException(decision);
 */
@Injectable()
export class RateLimiterService implements BeforeApplicationShutdown, OnApplicationShutdown {
  private readonly calls: StoreCalls;
  /** The store's given clock (see `RateLimitStore.clock`); `undefined`: real time. */
  private readonly clock: StoreClock | undefined;
  /** `leaky_bucket` waits, on the store's clock. */
  private readonly sleepers: WakeQueue;
  /** Waits in progress, each with the refund it makes when it ends early: shutdown sees them through. */
  private readonly waiting = new Set<Promise<void>>();
  /** The factors `setScale` puts on policies: the guard applies them to each route's policies. */
  readonly scales = new Scales();
  /** Each policy given to `consume`, `peek` or `reset`, validated once. */
  private readonly given: GivenPolicies;
  /** The module's policies as they apply to requests, for `setScale` to check a factor against. */
  private readonly modulePolicies: readonly RoutePolicy[];
  /** Where the guard, this service and its store calls report what they do: metrics and diagnostics_channel events. */
  readonly telemetry: RateLimitTelemetry;

  constructor(
    @Inject(RATE_LIMIT_OPTIONS) private readonly options: ResolvedOptions,
    @Inject(RateLimitStore) store: RateLimitStore,
    @Optional() @Inject(RateLimitMetrics) metrics: RateLimitMetrics | null = null,
    @Optional() @Inject(RoutePolicies) private readonly routes: RoutePolicies | null = null,
  ) {
    this.modulePolicies = options.policies.map((policy) => routePolicy(policy, options));
    this.given = new GivenPolicies(options, this.scales);
    this.telemetry = new RateLimitTelemetry(metrics, options, (decision) => this.calls.decidedLocally(decision));
    this.calls = new StoreCalls(store, options, this.telemetry.storeCalls(store));
    this.clock = storeClock(store.clock);
    this.sleepers = new WakeQueue(this.clock);
  }

  /**
   * Takes `cost` tokens (a finite number > 0, default 1) from every policy's bucket for
   * `identity`, or from none. Async, as are `peek` and `reset`: a bad argument rejects the
   * promise, never throws.
   *
   * `tier` is the tier of the policies with `tiers` (the guard works it out from their `tier`;
   * here the caller names it): a tier a policy does not have, or none, is its `defaultTier`.
   * Policies without tiers ignore it.
   *
   * @example await limiter.consume(`api-key:${key}`, apiPolicy, 1, account.plan)
   */
  async consume(identity: string, policies: RateLimitPolicy | RateLimitPolicy[], cost = 1, tier?: string): Promise<RateLimitDecision[]> {
    return this.decide(this.given.requests('RateLimiterService.consume', identity, policies, cost, tier), true);
  }

  /** What `consume` would decide, without taking anything. */
  async peek(identity: string, policies: RateLimitPolicy | RateLimitPolicy[], cost = 1, tier?: string): Promise<RateLimitDecision[]> {
    return this.decide(this.given.requests('RateLimiterService.peek', identity, policies, cost, tier), false);
  }

  /** Forgets the buckets of `identity` for these policies (a tiered one's: of `tier`, as for `consume`): they are full again. */
  async reset(identity: string, policies: RateLimitPolicy | RateLimitPolicy[], tier?: string): Promise<void> {
    const keys = this.given.requests('RateLimiterService.reset', identity, policies, 1, tier).map((request) => request.key);
    await this.calls.reset(keys);
  }

  /**
   * Empties every bucket under the module's `prefix`: the store's (Redis: `SCAN` and `UNLINK` in
   * batches, on every master of a Cluster; keys outside the prefix are left alone) and the
   * `failMode: 'local'` limiter's. Takes as long as the keyspace takes (no `timeout`).
   * @example beforeEach(() => moduleRef.get(RateLimiterService).resetAll())
   */
  resetAll(): Promise<void> {
    return this.calls.resetAll(this.options.prefix);
  }

  /**
   * Scales a policy by `factor` (0 < factor <= 1; 1: the full rate) from the next decision on, in
   * this process (`'*'`: every policy): its `rps` times the factor, or for a `fixed_window` or
   * `sliding_window_counter` its limit, its window kept (so a lower factor never admits more,
   * whatever factors other instances on the store have). An `adaptive` policy's factor is the module's.
   *
   * @throws RangeError naming the policy for a factor under which one the module knows by that
   * name (on a route or in its `policies`; every one for `'*'`) would take more than 365 days to
   * refill, the bound policies are held to at start (a policy first used later is held at the
   * least factor it takes)
   * @example limiter.setScale('api', 0.5) // half the rate while a dependency struggles
   */
  setScale(policyName: string, factor: number): void {
    this.scales.set(policyName, factor, [...this.modulePolicies, ...(this.routes?.all() ?? [])]);
  }

  /** A policy's factor (see `setScale`): 1 unless scaled. */
  getScale(policyName: string): number {
    return this.scales.get(policyName);
  }

  /**
   * The time decisions are made at, Unix ms: the store's clock when it was given one (a
   * `ManualClock` in tests, its ms taken as Unix ms), else `Date.now()`. `X-RateLimit-Reset`
   * counts from it.
   * @example const resetsAt = limiter.now() + decision.fullAfter * 1000
   */
  now(): number {
    return this.clock === undefined ? Date.now() : this.clock.now();
  }

  /**
   * Waits out the longest `delay` of admitted decisions: a `leaky_bucket` request proceeds
   * only when its turn in the queue comes. The guard does this itself; code that calls
   * `consume` does it with this. One timer serves every waiting request. The wait is on the
   * store's clock: real time, or the clock the store was given, so a test that advances a
   * `ManualClock` past a request's turn lets it proceed at once.
   *
   * The wait ends early when `signal` aborts (say, the client went away) or the app shuts down.
   * Then what the request took from every policy is given back first (the queue is shorter by
   * its cost, so the next request waits that much less), and the promise rejects: with
   * `signal.reason` on an abort, with `RateLimitUnavailableException` (503) at shutdown. Either
   * way the request did not get its turn: do not run its work.
   *
   * @example
   * const decisions = await limiter.consume(`user:${user.id}`, { name: 'exports', algorithm: 'leaky_bucket', rps: 1, burst: 30 });
   * if (!decisions.every((d) => d.allowed)) throw new RateLimitExceededException(decisions[0]);
   * await limiter.wait(decisions, AbortSignal.timeout(10_000)); // rejects, charge given back, after 10 s
   */
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

  /**
   * Decides store requests (built by the guard or by `consume`/`peek`) within the timeout.
   *
   * @throws RateLimitStoreError when the store fails or is too slow and failMode is not 'local'
   */
  decide(requests: readonly RateLimitRequest[], charge: boolean): Promise<RateLimitDecision[]> {
    try {
      return Promise.resolve(this.decideNow(requests, charge));
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /**
   * `decide`, with the decisions themselves when the store made them at once (the memory store),
   * so the guard waits on no promise; it may throw instead of rejecting.
   */
  decideNow(requests: readonly RateLimitRequest[], charge: boolean): RateLimitDecision[] | Promise<RateLimitDecision[]> {
    const decided = this.calls.decide(requests, charge);
    // jittered here, where the store's answers and its remembered refusals meet, so both say the same
    const { retryAfterJitter: jitter } = this.options;
    if (jitter === 0) return decided;
    return Array.isArray(decided) ? withJitter(decided, requests, jitter) : decided.then((decisions) => withJitter(decisions, requests, jitter));
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
    await this.calls.close();
  }

  /** Sleeps until the turn comes; when the wait ends early, gives the charge back and rejects. */
  private async waitTurn(decisions: readonly RateLimitDecision[], ms: number, signal: AbortSignal | undefined): Promise<void> {
    const started = performance.now();
    if (await this.sleepers.wait(ms, signal)) return this.telemetry.queued(decisions, started);
    await this.refund(decisions);
    if (signal?.aborted) throw signal.reason;
    throw new RateLimitUnavailableException(new Error(shuttingDown));
  }

  /**
   * Gives back what the request of `decisions` (some or all of what `consume` returned) took, in the
   * store that took it, within the timeout. Never rejects: a failed refund leaves the charge taken.
   */
  refund(decisions: readonly RateLimitDecision[]): Promise<void> {
    return this.calls.refund(decisions);
  }
}
