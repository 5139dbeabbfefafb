import type { Algorithm, AlgorithmDescriptor, QuotaCalendar } from '../algorithms/algorithm.types.js';
import { ALGORITHM_DESCRIPTORS, ALGORITHMS } from '../algorithms/registry.js';
import {
  countedLimitMissing,
  expectedLease,
  expectedOnlyFor,
  expectedPeriod,
  expectedTimeZone,
  leaseMissing,
  periodMissing,
  rateFieldNotFor,
} from '../rate-limit.messages.js';
import { isTimeZone, QUOTA_PERIODS, type QuotaPeriod } from './calendar-period.js';
import { resolveDuration } from './durations.js';
import type { Conflict, Fail } from './invalid-policy.js';
import { resolveCount } from './policy-bounds.js';
import type { TierLimits } from './policy.types.js';

type SaidAs = NonNullable<AlgorithmDescriptor['saidAs']>;

/**
 * The fields that say a limit each way but a rate's (`AlgorithmDescriptor.saidAs`): a policy of
 * an algorithm said another way gives none of them.
 */
const SAYING_FIELDS = { lease: ['lease'], period: ['period', 'timeZone'] } as const satisfies Record<
  SaidAs,
  ReadonlyArray<keyof TierLimits>
>;
/** The algorithms whose limit is said `way`, for messages. */
function saidAs(way: SaidAs): readonly Algorithm[] {
  return ALGORITHMS.filter((algorithm) => ALGORITHM_DESCRIPTORS[algorithm].saidAs === way);
}

/** The fields of a rate, which a limit said as `limit` with a `lease` or a `period` has no use for. */
const RATE_FIELDS = ['rps', 'tokensPerSecond', 'burst', 'window'] as const;

/** Seconds a `period` lasts at the most (a month of 31 days, a leap year): a quota's rule's window until a request names its period. */
const PERIOD_SECONDS: Record<QuotaPeriod, number> = {
  day: 86_400,
  week: 7 * 86_400,
  month: 31 * 86_400,
  year: 366 * 86_400,
};

/**
 * The limits of an algorithm that is not a rate, said as `limit` with a `lease` (requests in
 * flight) or a `period` (per calendar period), as a rule's rate and capacity; `undefined` for a
 * rate's algorithm, which may give neither. A lease's rule has the lease as its window; a period's,
 * the longest the period can be, until a request names its period (see `quotaRule`), with its
 * calendar.
 *
 * @throws InvalidPolicyError through `fail` or `conflict`
 */
export function resolveCountedLimit(
  limits: TierLimits,
  algorithm: Algorithm,
  fail: Fail,
  conflict: Conflict,
): { rps: number; burst: number; capacity: 'limit'; calendar?: QuotaCalendar } | undefined {
  const way = ALGORITHM_DESCRIPTORS[algorithm].saidAs;
  for (const other of Object.keys(SAYING_FIELDS) as SaidAs[]) {
    if (other === way) continue;
    for (const field of SAYING_FIELDS[other])
      if (limits[field] !== undefined) fail(field, limits[field], expectedOnlyFor(saidAs(other), algorithm));
  }
  if (way === undefined) return undefined;

  for (const field of RATE_FIELDS) if (limits[field] !== undefined) conflict(rateFieldNotFor(field, algorithm, way));
  if (limits.limit === undefined) conflict(countedLimitMissing(algorithm, way));
  const limit = resolveCount('limit', limits.limit, fail);
  if (way === 'lease') {
    if (limits.lease === undefined) conflict(leaseMissing(algorithm));
    const seconds = resolveDuration('lease', limits.lease, 1, expectedLease(), fail);
    return { rps: limit / seconds, burst: limit, capacity: 'limit' };
  }
  if (limits.period === undefined) conflict(periodMissing(algorithm, QUOTA_PERIODS));
  if (!QUOTA_PERIODS.includes(limits.period)) fail('period', limits.period, expectedPeriod(QUOTA_PERIODS));
  const timeZone = limits.timeZone === undefined ? 'UTC' : limits.timeZone;
  if (!isTimeZone(timeZone)) fail('timeZone', timeZone, expectedTimeZone());
  return {
    rps: limit / PERIOD_SECONDS[limits.period],
    burst: limit,
    capacity: 'limit',
    calendar: { period: limits.period, timeZone },
  };
}
