import type { ExecutionContext } from '@nestjs/common';
import { RELEASED } from '../algorithms/algorithm.types.js';
import { windowMs } from '../algorithms/conversions.js';
import type { RoutePolicy } from '../routes/route-policy.js';
import type { RateLimitDecision, RateLimitRequest } from '../stores/rate-limit-store.interface.js';
import { Meter } from './rate-limit-meter.js';

/**
 * What an admitted request owes its policies when it ends (see `Obligations`): each obligation
 * is a list here, filled by `owedBy` and settled by the engine.
 */
export interface Owed {
  /** The decisions of its `count: 'failures'` policies: given back when the request succeeded. */
  readonly refunds: RateLimitDecision[];
  /** The decisions that took slots (`regain: 'release'`): given back however the request ends. */
  readonly releases: RateLimitDecision[];
  /** How long the longest of those slots is held at most, ms: a release that fails is tried again until then. */
  leaseMs: number;
  /** Its adaptive policies: the request's latency steers their rate. */
  readonly latencies: RoutePolicy[];
  /** Its policies that settle the real cost (`settle`, a meter): charged it when it ends. */
  readonly settles: Settling[];
}

/** A policy an admitted request settles its real cost under: its decision, and its meter. */
export interface Settling {
  readonly policy: RoutePolicy;
  /** Its store request: its bucket and rule, the reservation its cost. */
  readonly request: RateLimitRequest;
  readonly decision: RateLimitDecision;
  /** Counts what its handler adds (see `RateLimitMeter`), and knows what was charged so far. */
  readonly meter: Meter;
  /** The longest its bucket holds a charge, ms: a settle that fails is tried again until then. */
  readonly leaseMs: number;
}

/**
 * What an admitted request owes when it ends, from its policies, their store requests (a tiered
 * policy's tier may hold a slot where another does not) and their decisions; `undefined` when
 * nothing.
 */
export function owedBy(
  policies: readonly RoutePolicy[],
  requests: readonly RateLimitRequest[],
  decisions: readonly RateLimitDecision[],
): Owed | undefined {
  let owed: Owed | undefined;
  for (let i = 0; i < policies.length; i++) {
    const { owes } = policies[i];
    if (!owes.atEnd) continue;
    const { rule } = requests[i];
    const releases = owes.release && RELEASED.has(rule.algorithm);
    owed ??= { refunds: [], releases: [], leaseMs: 0, latencies: [], settles: [] };
    if (owes.refundOnSuccess) owed.refunds.push(decisions[i]);
    if (owes.latency) owed.latencies.push(policies[i]);
    if (owes.settle) {
      const { policy, cost } = requests[i];
      owed.settles.push({
        policy: policies[i],
        request: requests[i],
        decision: decisions[i],
        meter: new Meter(policy, cost, decisions[i]),
        leaseMs: windowMs(rule.rps, rule.burst + (rule.debt ?? 0)),
      });
    }
    if (releases) {
      owed.releases.push(decisions[i]);
      owed.leaseMs = Math.max(owed.leaseMs, windowMs(rule.rps, rule.burst));
    }
  }
  return owed;
}

/** What a request's end tells the engine (see `RequestEnd`). */
export interface Ending {
  readonly owed: Owed;
  /** The context it was admitted in (what a `settle` is called with). */
  readonly context: ExecutionContext;
  readonly succeeded: boolean;
  /** Ms from its admission to its end. */
  readonly latencyMs: number;
  /** The last value its handler gave, when it gave one (for `settle` from the result). */
  readonly result?: { value: unknown };
}

/**
 * The one end of an admitted request: whichever of its ends comes first (its response finished
 * or closed, its handler's outcome, its GraphQL operation's end) settles what it owes, once; the
 * others find it settled. `succeeded` says whether it succeeded (HTTP: a final status < 400);
 * its latency is counted from when it was admitted. Until then it hears its handler's values
 * (the last one is what a `settle` reads) and lends its meters to the handler's parameters.
 */
export class RequestEnd {
  private ended = false;
  private readonly admittedAt = performance.now();
  private result: { value: unknown } | undefined;
  /** Aborted when it ends: what runs for it meanwhile (interval settles) stops. */
  private controller: AbortController | undefined;

  constructor(
    readonly owed: Owed,
    private readonly context: ExecutionContext,
    private readonly settle: (ending: Ending) => void,
  ) {}

  /** Whether it has ended. */
  get over(): boolean {
    return this.ended;
  }

  /** Aborted when the request ends. */
  get signal(): AbortSignal {
    return (this.controller ??= new AbortController()).signal;
  }

  /** Notes a value its handler gave: the last one before its end is its result. */
  readonly heard = (value: unknown): void => {
    if (!this.ended) this.result = { value };
  };

  /** The meter of each of its policies that settle, by name. */
  meters(): ReadonlyMap<string, Meter> {
    return new Map(this.owed.settles.map(({ policy, meter }) => [policy.name, meter]));
  }

  /** Settles what the request owes, the first time; later calls do nothing. */
  end(succeeded: boolean): void {
    if (this.ended) return;
    this.ended = true;
    this.controller?.abort();
    this.settle({
      owed: this.owed,
      context: this.context,
      succeeded,
      latencyMs: performance.now() - this.admittedAt,
      result: this.result,
    });
  }
}
