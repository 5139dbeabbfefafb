import type { Attributes, Counter, Histogram, Meter } from '@opentelemetry/api';
import type { StoreCallOutcome } from '../stores/store-calls.js';
import type { RateLimitResult, ReleaseOutcome } from './rate-limit-events.js';

/** A store as `ratelimit.store` names it. */
export type StoreKind = 'memory' | 'redis' | 'custom';

/** The instruments of one store's calls (see `RateLimitMetrics.forStore`). */
export interface StoreMetrics {
  /** A decision's store call ended (or was answered without one: `cached`, `breaker_open`) after `seconds`. */
  called(outcome: StoreCallOutcome, seconds: number): void;
  /** The store's circuit breaker opened or closed. */
  breaker(state: 'open' | 'closed'): void;
}

/** Store calls take microseconds (memory) to the module's `timeout` (100 ms by default), s. */
const STORE_BUCKETS = [
  0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
];
/** A `leaky_bucket` turn comes within `burst / rps`: milliseconds to minutes, s. */
const QUEUE_BUCKETS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];
const STORE_CALL_OUTCOMES: readonly StoreCallOutcome[] = ['ok', 'timeout', 'error', 'breaker_open', 'cached'];

/** The `ratelimit.requests` attributes of one policy and context, by result. */
type ByResult = Partial<Record<RateLimitResult, Attributes>>;

/**
 * The module's OpenTelemetry instruments, on the meter `nestjs-ratelimit`, made once. Each set of
 * attributes is one object, made the first time it is needed and reused: recording allocates
 * nothing of ours. No attribute holds anything of a client (identity, key, address).
 *
 * `@opentelemetry/api` is an optional peer, imported by `load` alone: with no package, or no SDK
 * registered by then (the API's meter would be a no-op), there are no metrics and nothing records.
 */
export class RateLimitMetrics {
  private readonly requests: Counter;
  private readonly storeDuration: Histogram;
  private readonly queueDuration: Histogram;
  private readonly breakerTransitions: Counter;
  private readonly releases: Counter;
  /** `ratelimit.requests` attributes by policy, context and result. */
  private readonly requestAttributes = new Map<string, Map<string, ByResult>>();
  /** `ratelimit.queue.duration` attributes by policy. */
  private readonly queueAttributes = new Map<string, Attributes>();
  /** `ratelimit.releases` attributes by policy and outcome. */
  private readonly releaseAttributes = new Map<string, Partial<Record<ReleaseOutcome, Attributes>>>();

  /**
   * The instruments, when `@opentelemetry/api` is installed and an SDK has registered its meter
   * provider (before the app starts, as OpenTelemetry asks: a meter taken earlier stays a no-op);
   * else `null`.
   */
  static async load(): Promise<RateLimitMetrics | null> {
    let api: typeof import('@opentelemetry/api');
    try {
      api = await import('@opentelemetry/api');
    } catch (error) {
      if (isMissingPackage(error)) return null;
      throw error;
    }
    const meter = api.metrics.getMeter('nestjs-ratelimit');
    return meter === api.createNoopMeter() ? null : new RateLimitMetrics(meter);
  }

  private constructor(meter: Meter) {
    this.requests = meter.createCounter('ratelimit.requests', {
      unit: '{request}',
      description: 'Requests decided, per policy; ratelimit.result says what became of them',
    });
    this.storeDuration = meter.createHistogram('ratelimit.store.duration', {
      unit: 's',
      description: "Time a decision's store call took; ratelimit.store.outcome says how it ended",
      advice: { explicitBucketBoundaries: STORE_BUCKETS },
    });
    this.queueDuration = meter.createHistogram('ratelimit.queue.duration', {
      unit: 's',
      description: 'Time an admitted leaky_bucket request waited for its turn',
      advice: { explicitBucketBoundaries: QUEUE_BUCKETS },
    });
    this.breakerTransitions = meter.createCounter('ratelimit.breaker.transitions', {
      unit: '{transition}',
      description: "The store's circuit breaker opening (calls stop) and closing (the store answers again)",
    });
    this.releases = meter.createCounter('ratelimit.releases', {
      unit: '{release}',
      description:
        'Releases of concurrency slots the store failed: ratelimit.release.outcome says whether one was tried again, landed after all, or lapsed with its lease',
    });
  }

  /**
   * A release of `policy`'s slots that the store failed: tried again (`failed`, once per failed
   * attempt), given back after all (`landed`) or given up when its lease ended (`lapsed`).
   */
  released(policy: string, outcome: ReleaseOutcome): void {
    let byOutcome = this.releaseAttributes.get(policy);
    if (byOutcome === undefined) this.releaseAttributes.set(policy, (byOutcome = {}));
    this.releases.add(1, (byOutcome[outcome] ??= { 'ratelimit.policy': policy, 'ratelimit.release.outcome': outcome }));
  }

  /** One request's result under one policy. */
  request(policy: string, context: string, result: RateLimitResult): void {
    let byContext = this.requestAttributes.get(policy);
    if (byContext === undefined) this.requestAttributes.set(policy, (byContext = new Map<string, ByResult>()));
    let byResult = byContext.get(context);
    if (byResult === undefined) byContext.set(context, (byResult = {}));
    const attributes = (byResult[result] ??= {
      'ratelimit.policy': policy,
      'ratelimit.result': result,
      'ratelimit.context': context,
    });
    this.requests.add(1, attributes);
  }

  /** An admitted `leaky_bucket` request waited `seconds` for its turn; `policy` is the one it waited longest for. */
  queued(policy: string, seconds: number): void {
    let attributes = this.queueAttributes.get(policy);
    if (attributes === undefined) this.queueAttributes.set(policy, (attributes = { 'ratelimit.policy': policy }));
    this.queueDuration.record(seconds, attributes);
  }

  /** The instruments of a store's calls, with every attribute set they use made now. */
  forStore(store: StoreKind): StoreMetrics {
    const outcomes = new Map(
      STORE_CALL_OUTCOMES.map((outcome) => [outcome, { 'ratelimit.store': store, 'ratelimit.store.outcome': outcome }]),
    );
    const open = { 'ratelimit.store': store, 'ratelimit.breaker.state': 'open' };
    const closed = { 'ratelimit.store': store, 'ratelimit.breaker.state': 'closed' };
    return {
      called: (outcome, seconds) => this.storeDuration.record(seconds, outcomes.get(outcome)),
      breaker: (state) => this.breakerTransitions.add(1, state === 'open' ? open : closed),
    };
  }
}

/** An import that failed because the package is not installed (ESM or CommonJS build). */
function isMissingPackage(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND';
}
