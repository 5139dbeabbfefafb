import {
  expectedCost,
  expectedCostHeader,
  expectedCostQuery,
  expectedDefaultCost,
  expectedKeyHeader,
  expectedKeySources,
} from '../rate-limit.messages.js';
import type { Fail } from './invalid-policy.js';
import { isPositive } from './policy-bounds.js';
import type { CostSource, KeySource, RateLimitPolicy } from './policy.types.js';

/** An RFC 9110 token: what an HTTP header name may be. */
const TOKEN = /^[!#$%&'*+.^_`|~0-9a-z-]+$/i;

/** Whether `name` is an HTTP header name (an RFC 9110 token). */
export function isHeaderName(name: unknown): name is string {
  return typeof name === 'string' && TOKEN.test(name);
}

/** Whether `source` is a key source the module understands. */
export function isKeySource(source: unknown): source is KeySource {
  return (
    typeof source === 'function' ||
    source === 'ip' ||
    source === 'user' ||
    source === 'api-key' ||
    (typeof source === 'string' && source.startsWith('header:') && isHeaderName(source.slice('header:'.length)))
  );
}

/**
 * Validates a key option (`key` of a policy or of the module) and returns it as a list. A bad
 * entry of a list is named by its index (`key[1]`).
 */
export function resolveKeySources(key: unknown, fail: Fail): readonly KeySource[] {
  const list: unknown[] = Array.isArray(key) ? key : [key];
  const bad = list.findIndex((source) => !isKeySource(source));
  if (list.length > 0 && bad === -1) return list as KeySource[];
  const [field, value] = bad === -1 ? ['key', key] : [Array.isArray(key) ? `key[${bad}]` : 'key', list[bad]];
  if (typeof value === 'string' && value.startsWith('header:')) fail(field, value, expectedKeyHeader());
  return fail(field, value, expectedKeySources());
}

/** A policy's `cost` and `defaultCost`, each 1 when left out. */
export function resolveCost(
  policy: RateLimitPolicy,
  settles: boolean,
  fail: Fail,
): { cost: CostSource; defaultCost: number } {
  // a policy that settles may take nothing up front: its real cost comes at the end
  const allowed = (value: unknown) => isPositive(value) || (settles && value === 0);
  // A field set to null is a value, and refused as one: only a field left out takes its default.
  const cost = policy.cost === undefined ? 1 : policy.cost;
  if (typeof cost === 'string' && cost.startsWith('header:') && !isHeaderName(cost.slice('header:'.length)))
    fail('cost', cost, expectedCostHeader());
  if (cost === 'query:') fail('cost', cost, expectedCostQuery());
  if (!(allowed(cost) || typeof cost === 'function' || (typeof cost === 'string' && /^(header|query):/.test(cost))))
    fail('cost', cost, expectedCost());
  const defaultCost = policy.defaultCost === undefined ? 1 : policy.defaultCost;
  if (!allowed(defaultCost)) fail('defaultCost', defaultCost, expectedDefaultCost());
  return { cost, defaultCost };
}
