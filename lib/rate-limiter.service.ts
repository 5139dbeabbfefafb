import { Injectable } from '@nestjs/common';
import { RateLimiter, type RateLimitReservation, type RateLimitUsage } from './limiter/rate-limiter.js';
import type { RateLimitPolicy } from './policy/policy.types.js';
import type { RateLimitDecision } from './stores/rate-limit-store.interface.js';

/**
 * The limiter for code outside the guard: consume, peek and reset buckets by identity, with the
 * module's store, prefix, timeout and fail mode, on the same engine as the guard.
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
export class RateLimiterService {
  constructor(private readonly engine: RateLimiter) {}

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
  async consume(
    identity: string,
    policies: RateLimitPolicy | RateLimitPolicy[],
    cost = 1,
    tier?: string,
  ): Promise<RateLimitDecision[]> {
    return this.engine.consume('RateLimiterService.consume', identity, policies, cost, tier);
  }

  /**
   * Reserves `cost` (an estimate, cost units; 0 when every policy settles) for work done outside a
   * request (a queue's job, a cron task), and hands back the reservation, whose `settle(actual)`
   * charges the real cost once the work is done, or `cancel()` gives it all back (see
   * `RateLimitReservation`). `tier` as for `consume`. A `concurrency` policy is refused (rejects
   * with `InvalidPolicyError`): a slot in flight is not a cost.
   *
   * @example
   * const job = await limiter.reserve(`tenant:${tenant}`, { name: 'tokens', limit: 1_000_000, window: '1d', settle: () => 0 }, 2_000);
   * if (job.allowed) await job.settle(await runSummary(tenant));
   */
  async reserve(
    identity: string,
    policies: RateLimitPolicy | RateLimitPolicy[],
    cost = 1,
    tier?: string,
  ): Promise<RateLimitReservation> {
    return this.engine.reserve(identity, policies, cost, tier);
  }

  /** What `consume` would decide, without taking anything. */
  async peek(
    identity: string,
    policies: RateLimitPolicy | RateLimitPolicy[],
    cost = 1,
    tier?: string,
  ): Promise<RateLimitDecision[]> {
    return this.engine.peek('RateLimiterService.peek', identity, policies, cost, tier);
  }

  /**
   * How much of `policy`'s bucket `identity` has used, without taking anything (a peek): `used`,
   * `limit`, `remaining`, and `resetsAt`, when all of it is there again (a quota's: its period's
   * end, in its time zone and from its anchor, which is called with no arguments here), and
   * `source`: `'store'`, or `'local'` when `failMode: 'local'` answered while the store was
   * unreachable (this process's own count: not one to bill by). For dashboards and "you have used
   * 80 % of your monthly quota" mails. `tier` as for `consume`.
   *
   * @example const { used, limit, resetsAt } = await limiter.usage(`api-key:${key}`, monthlyQuota)
   */
  async usage(identity: string, policy: RateLimitPolicy, tier?: string): Promise<RateLimitUsage> {
    return this.engine.usage(identity, policy, tier);
  }

  /** Forgets the buckets of `identity` for these policies (a tiered one's: of `tier`, as for `consume`): they are full again. */
  async reset(identity: string, policies: RateLimitPolicy | RateLimitPolicy[], tier?: string): Promise<void> {
    return this.engine.reset(identity, policies, tier);
  }

  /**
   * Empties every bucket under the module's `prefix`: the store's (Redis: `SCAN` and `UNLINK` in
   * batches, on every master of a Cluster; keys outside the prefix are left alone) and the
   * `failMode: 'local'` limiter's. Takes as long as the keyspace takes (no `timeout`).
   * @example beforeEach(() => moduleRef.get(RateLimiterService).resetAll())
   */
  resetAll(): Promise<void> {
    return this.engine.resetAll();
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
    this.engine.setScale(policyName, factor);
  }

  /** A policy's factor (see `setScale`): 1 unless scaled. */
  getScale(policyName: string): number {
    return this.engine.getScale(policyName);
  }

  /**
   * The time decisions are made at, Unix ms: the store's clock when it was given one (a
   * `ManualClock` in tests, its ms taken as Unix ms), else `Date.now()`. `X-RateLimit-Reset`
   * counts from it.
   * @example const resetsAt = limiter.now() + decision.fullAfter * 1000
   */
  now(): number {
    return this.engine.now();
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
    return this.engine.wait(decisions, signal);
  }

  /**
   * Gives back what the request of `decisions` (some or all of what `consume` returned) took, in the
   * store that took it, within the timeout. Never rejects: a failed refund leaves the charge taken,
   * and refunding the same decisions again tries again (a refund that landed gives nothing more).
   */
  refund(decisions: readonly RateLimitDecision[]): Promise<void> {
    return this.engine.refund(decisions);
  }
}
