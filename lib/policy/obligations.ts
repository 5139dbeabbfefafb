import { ALGORITHM_DESCRIPTORS } from '../algorithms/registry.js';
import type { Algorithm } from '../algorithms/algorithm.types.js';
import type { QuotaAnchor, RateLimitPolicy, ResolvedPolicy } from './policy.types.js';

/**
 * What a policy owes each request it admits, read once from its algorithms' descriptors (how
 * their quota comes back, how their limit is said) and its own fields. The one reading of it: the
 * decorator and the module read it to know which routes watch their requests' end, a route's
 * record to know what an admitted request keeps for its end, and the header plan to know whose
 * window is the request's own period.
 *
 * @example obligationsOf({ name: 'exports', algorithm: 'concurrency', limit: 2, lease: '5m' }).release // true
 */
export interface Obligations {
  /** `count: 'failures'`: its charge is given back when the request succeeds. */
  readonly refundOnSuccess: boolean;
  /** `adaptive`: the request's latency steers its rate. */
  readonly latency: boolean;
  /**
   * A rule of it (any tier's) holds what the request gives back when it ends, however it ends
   * (`regain: 'release'`: a `concurrency` slot).
   */
  readonly release: boolean;
  /** A rule of it (any tier's) counts per calendar period, which each request names (`saidAs: 'period'`: a quota). */
  readonly period: boolean;
  /** A quota's function naming an identity's own period start (its `anchor`). */
  readonly anchor: QuotaAnchor | undefined;
  /**
   * `settle`, `maxDebt` or `settleEvery`: the request's real cost is settled when it ends (from
   * its handler's result or its meter), and it may take a reservation of 0.
   */
  readonly settle: boolean;
  /** Whether the request's end owes it anything: a refund, a latency, a release or a settle. */
  readonly atEnd: boolean;
}

/**
 * The fields of a policy its obligations are read from: its algorithms (its own or its tiers'),
 * `count`, `adaptive`, `anchor`, and whether it settles.
 */
interface Owing {
  algorithms: Iterable<unknown>;
  count: unknown;
  adaptive: unknown;
  anchor: unknown;
  settle: boolean;
}

function read({ algorithms, count, adaptive, anchor, settle }: Owing): Obligations {
  let release = false;
  let period = false;
  for (const algorithm of algorithms) {
    const descriptor = Object.hasOwn(ALGORITHM_DESCRIPTORS, algorithm as string)
      ? ALGORITHM_DESCRIPTORS[algorithm as Algorithm]
      : undefined;
    release ||= descriptor?.regain === 'release';
    period ||= descriptor?.saidAs === 'period';
  }
  const refundOnSuccess = count === 'failures';
  const latency = adaptive !== undefined;
  return {
    refundOnSuccess,
    latency,
    release,
    period,
    anchor: period && typeof anchor === 'function' ? (anchor as QuotaAnchor) : undefined,
    settle,
    atEnd: refundOnSuccess || latency || release || settle,
  };
}

/**
 * A policy's obligations as written in `@RateLimit`, before it is validated (the decorator reads
 * them as it decorates): anything that is not a policy owes nothing, and is refused at start.
 */
export function obligationsOf(policy: RateLimitPolicy): Obligations {
  if (typeof policy !== 'object' || policy === null || Array.isArray(policy)) return read(NOTHING);
  const tiers: unknown[] = typeof policy.tiers === 'object' && policy.tiers !== null ? Object.values(policy.tiers) : [];
  const algorithms = [
    policy.algorithm ?? 'token_bucket',
    ...tiers.map((tier) =>
      typeof tier === 'object' && tier !== null ? (tier as RateLimitPolicy).algorithm : undefined,
    ),
  ];
  const settle = policy.settle !== undefined || policy.maxDebt !== undefined || policy.settleEvery !== undefined;
  return read({ algorithms, count: policy.count, adaptive: policy.adaptive, anchor: policy.anchor, settle });
}

/** A validated policy's obligations (see `Obligations`). */
export function resolvedObligations(resolved: ResolvedPolicy): Obligations {
  const { rule, tiers, count, adaptive, quotaAnchor, settles } = resolved;
  const algorithms = [rule.algorithm, ...[...(tiers?.rules.values() ?? [])].map((each) => each.algorithm)];
  return read({ algorithms, count, adaptive, anchor: quotaAnchor, settle: settles !== undefined });
}

const NOTHING: Owing = { algorithms: [], count: undefined, adaptive: undefined, anchor: undefined, settle: false };
