import { RELEASED } from '../algorithms/algorithm.types.js';
import { windowMs } from '../algorithms/conversions.js';
import type { RoutePolicy } from '../routes/route-policy.js';
import type { RateLimitDecision, RateLimitRequest } from '../stores/rate-limit-store.interface.js';

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
    owed ??= { refunds: [], releases: [], leaseMs: 0, latencies: [] };
    if (owes.refundOnSuccess) owed.refunds.push(decisions[i]);
    if (owes.latency) owed.latencies.push(policies[i]);
    if (releases) {
      owed.releases.push(decisions[i]);
      owed.leaseMs = Math.max(owed.leaseMs, windowMs(rule.rps, rule.burst));
    }
  }
  return owed;
}

/**
 * The one end of an admitted request: whichever of its ends comes first (its response finished
 * or closed, its handler's outcome, its GraphQL operation's end) settles what it owes, once; the
 * others find it settled. `succeeded` says whether it succeeded (HTTP: a final status < 400);
 * its latency is counted from when it was admitted.
 */
export class RequestEnd {
  private ended = false;
  private readonly admittedAt = performance.now();

  constructor(
    private readonly owed: Owed,
    private readonly settle: (owed: Owed, succeeded: boolean, latencyMs: number) => void,
  ) {}

  /** Settles what the request owes, the first time; later calls do nothing. */
  end(succeeded: boolean): void {
    if (this.ended) return;
    this.ended = true;
    this.settle(this.owed, succeeded, performance.now() - this.admittedAt);
  }
}
