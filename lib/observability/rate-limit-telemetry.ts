import type { ExecutionContext } from '@nestjs/common';
import type { FailMode } from '../rate-limit-options.interface.js';
import type { RateLimitDecision, RateLimitStore } from '../stores/rate-limit-store.interface.js';
import type { StoreCallWatcher } from '../stores/store-calls.js';
import {
  decisionsWatched,
  publishDecision,
  publishRelease,
  publishStoreError,
  type RateLimitResult,
  type ReleaseOutcome,
} from './rate-limit-events.js';
import type { RateLimitMetrics, StoreKind } from './rate-limit-metrics.js';

/** What `RateLimitTelemetry` needs of the module's options. */
export interface TelemetryOptions {
  readonly mode: 'enforce' | 'shadow';
  readonly failMode: FailMode;
}

const NO_DECISIONS: readonly RateLimitDecision[] = Object.freeze([]);

/**
 * What the module tells of what it does: `RateLimitMetrics` (when there are metrics) and the
 * diagnostics channels (when someone subscribes). The guard reports each request's result here,
 * the service its `leaky_bucket` waits, `StoreCalls` its calls. With neither metrics nor a
 * subscriber, each report is a check or two and returns.
 */
export class RateLimitTelemetry {
  constructor(
    private readonly metrics: RateLimitMetrics | null,
    private readonly options: TelemetryOptions,
    /** Whether a decision is the local limiter's (`failMode: 'local'`). */
    private readonly decidedLocally: (decision: RateLimitDecision) => boolean,
  ) {}

  /** A request the store (or the local limiter) decided; `allowed` when every policy admitted it. */
  decided(context: ExecutionContext, decisions: readonly RateLimitDecision[], allowed: boolean): void {
    if (this.metrics === null && !decisionsWatched()) return;
    const local = this.options.failMode === 'local' && this.decidedLocally(decisions[0]);
    const shadow = this.options.mode === 'shadow';
    if (this.metrics !== null) {
      const type = context.getType();
      for (const decision of decisions)
        this.metrics.request(decision.policy, type, resultOf(decision.allowed, local, shadow));
    }
    publishDecision(context, decisions, resultOf(allowed, local, shadow));
  }

  /**
   * A request some of whose policies a `skipIf` let pass: `applying` are those left (none: the
   * request passes, which is its decision).
   */
  skipped(context: ExecutionContext, route: readonly { name: string }[], applying: readonly { name: string }[]): void {
    if (this.metrics !== null) {
      const type = context.getType();
      for (const policy of route) if (!applying.includes(policy)) this.metrics.request(policy.name, type, 'skipped');
    }
    if (applying.length === 0) publishDecision(context, NO_DECISIONS, 'skipped');
  }

  /** A request the store could not decide, and whether the guard's `failMode` answer let it pass (failed open) or not (failed closed). */
  failedOver(context: ExecutionContext, policies: readonly { name: string }[], passed: boolean): void {
    const result: RateLimitResult = passed ? 'failed_open' : 'failed_closed';
    if (this.metrics !== null)
      for (const policy of policies) this.metrics.request(policy.name, context.getType(), result);
    publishDecision(context, NO_DECISIONS, result);
  }

  /** An admitted `leaky_bucket` request whose turn came; it waited since `started` (a `performance.now()`). */
  queued(decisions: readonly RateLimitDecision[], started: number): void {
    if (this.metrics === null) return;
    let longest = decisions[0];
    for (const decision of decisions) if (decision.delay > longest.delay) longest = decision;
    this.metrics.queued(longest.policy, (performance.now() - started) / 1000);
  }

  /** A step of the retries of a release the store failed (see `ReleaseOutcome`). */
  released(outcome: ReleaseOutcome, decisions: readonly RateLimitDecision[], error?: unknown): void {
    const policies = decisions.map((decision) => decision.policy);
    if (this.metrics !== null) for (const policy of policies) this.metrics.released(policy, outcome);
    publishRelease(policies, outcome, error);
  }

  /** What `StoreCalls` tells of its calls on `store`: timed with metrics; a failure published. */
  storeCalls(store: RateLimitStore): StoreCallWatcher {
    const metrics = this.metrics?.forStore(kindOf(store));
    return {
      timed: metrics !== undefined,
      called: (outcome, seconds) => metrics?.called(outcome, seconds),
      failed: (error, failMode) => publishStoreError(error, failMode),
      breaker: (state) => metrics?.breaker(state),
    };
  }
}

/** A policy's result, or a request's: `allowed` when it (every policy) admitted the request. */
function resultOf(allowed: boolean, local: boolean, shadow: boolean): RateLimitResult {
  if (local) return 'local';
  if (allowed) return 'allowed';
  return shadow ? 'shadow_refused' : 'refused';
}

/** The store as `ratelimit.store` names it: as it says of itself (`RateLimitStore.kind`), else `'custom'`. */
function kindOf(store: RateLimitStore): StoreKind {
  return store.kind ?? 'custom';
}
