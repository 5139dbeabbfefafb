import {
  expectedAdaptive,
  expectedAdaptiveLatency,
  expectedAdaptiveMin,
  expectedCountMode,
  expectedSkipIf,
} from '../rate-limit.messages.js';
import type { Fail } from './invalid-policy.js';
import { isPositive } from './policy-bounds.js';
import type { RateLimitPolicy, ResolvedPolicy } from './policy.types.js';

/** The policy fields of what a request's outcome or the app's load does to a policy. */
export const OUTCOME_FIELDS = ['count', 'skipIf', 'adaptive'] as const;
/** The least factor an adaptive policy's rate is scaled down to, unless it names its own `min`. */
const DEFAULT_ADAPTIVE_MIN = 0.1;

/** `count`, `skipIf` and `adaptive`: what a request's outcome or the app's load does to a policy. */
export function resolveOutcomeFields(
  policy: RateLimitPolicy,
  fail: Fail,
): Pick<ResolvedPolicy, 'count' | 'skipIf' | 'adaptive'> {
  const { count = 'all', skipIf, adaptive } = policy;
  if (count !== 'all' && count !== 'failures') fail('count', count, expectedCountMode());
  if (skipIf !== undefined && typeof skipIf !== 'function') fail('skipIf', skipIf, expectedSkipIf());
  if (adaptive === undefined) return { count, skipIf, adaptive };
  if (typeof adaptive !== 'object' || adaptive === null) fail('adaptive', adaptive, expectedAdaptive());
  const { latency, min = DEFAULT_ADAPTIVE_MIN } = adaptive;
  if (!isPositive(latency)) fail('adaptive.latency', latency, expectedAdaptiveLatency());
  if (!isPositive(min) || min > 1) fail('adaptive.min', min, expectedAdaptiveMin());
  return { count, skipIf, adaptive: { latency, min } };
}
