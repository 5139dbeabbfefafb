import { expectedMaxDebt, expectedSettle, expectedSettleEvery, expectedUnit } from '../rate-limit.messages.js';
import { resolveDuration } from './durations.js';
import type { Fail } from './invalid-policy.js';
import type { RateLimitPolicy, ResolvedSettle } from './policy.types.js';

/** The policy fields of a request's real cost, settled when it ends. */
export const SETTLE_FIELDS = ['settle', 'maxDebt', 'settleEvery', 'unit'] as const;

/** A unit's word: what the per-dimension header names end with (`x-ratelimit-remaining-tokens`). */
const UNIT = /^[a-z0-9][a-z0-9-]{0,31}$/i;

/** What a policy says of settling its requests' real cost. */
export interface PolicySettle {
  /** `undefined` for a policy that does not settle. */
  settles: ResolvedSettle | undefined;
  /** Tokens past empty its rules' buckets may go (`Rule.debt`), `'burst'` for each rule's own; `undefined` when it does not settle. */
  maxDebt: number | 'burst' | undefined;
  unit: string;
}

/**
 * `settle`, `maxDebt`, `settleEvery` and `unit`: a policy settles when it gives any of the first
 * three (a meter needs no `settle`, but a debt to settle into).
 *
 * @throws InvalidPolicyError through `fail`, naming the field
 */
export function resolveSettle(policy: RateLimitPolicy, fail: Fail): PolicySettle {
  const { settle, maxDebt, settleEvery, unit = 'requests' } = policy;
  if (typeof unit !== 'string' || !UNIT.test(unit)) fail('unit', unit, expectedUnit());
  if (settle !== undefined && typeof settle !== 'function') fail('settle', settle, expectedSettle());
  if (maxDebt !== undefined && !(typeof maxDebt === 'number' && Number.isSafeInteger(maxDebt) && maxDebt >= 0))
    fail('maxDebt', maxDebt, expectedMaxDebt());
  const everyMs =
    settleEvery === undefined
      ? undefined
      : Math.round(resolveDuration('settleEvery', settleEvery, 1000, expectedSettleEvery(), fail) * 1000);
  if (settle === undefined && maxDebt === undefined && everyMs === undefined)
    return { settles: undefined, maxDebt: undefined, unit: unit.toLowerCase() };
  return { settles: { result: settle, everyMs }, maxDebt: maxDebt ?? 'burst', unit: unit.toLowerCase() };
}
