import type { RateLimitPolicy, ResolvedPolicy } from './policy.types.js';

type Fail = (field: string, value: unknown, expected: string) => never;

/** The policy fields of what a request's outcome or the app's load does to a policy. */
export const OUTCOME_FIELDS = ['count', 'skipIf', 'adaptive'] as const;
/** The least factor an adaptive policy's rate is scaled down to, unless it names its own `min`. */
const DEFAULT_ADAPTIVE_MIN = 0.1;

const isPositive = (value: unknown): value is number =>
  typeof value === 'number' && Number.isFinite(value) && value > 0;

/** `count`, `skipIf` and `adaptive`: what a request's outcome or the app's load does to a policy. */
export function resolveOutcomeFields(
  policy: RateLimitPolicy,
  fail: Fail,
): Pick<ResolvedPolicy, 'count' | 'skipIf' | 'adaptive'> {
  const { count = 'all', skipIf, adaptive } = policy;
  if (count !== 'all' && count !== 'failures') fail('count', count, `must be 'all' or 'failures'`);
  if (skipIf !== undefined && typeof skipIf !== 'function')
    fail('skipIf', skipIf, 'must be a function of the execution context returning a boolean');
  if (adaptive === undefined) return { count, skipIf, adaptive };
  if (typeof adaptive !== 'object' || adaptive === null)
    fail('adaptive', adaptive, 'must be an object such as { latency: 250, min: 0.1 }');
  const { latency, min = DEFAULT_ADAPTIVE_MIN } = adaptive;
  if (!isPositive(latency)) fail('adaptive.latency', latency, 'must be a positive number of milliseconds');
  if (!isPositive(min) || min > 1) fail('adaptive.min', min, 'must be a factor of rps above 0 and at most 1');
  return { count, skipIf, adaptive: { latency, min } };
}
