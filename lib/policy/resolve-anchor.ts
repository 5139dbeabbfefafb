import type { Algorithm, Rule } from '../algorithms/algorithm.types.js';
import { ALGORITHM_DESCRIPTORS, ALGORITHMS } from '../algorithms/registry.js';
import {
  expectedAnchor,
  expectedAnchorFunction,
  expectedAnchorFunctionOnlyFor,
  expectedAnchorOnPolicy,
  expectedOnlyFor,
} from '../rate-limit.messages.js';
import type { Fail } from './invalid-policy.js';
import type { QuotaAnchor, RateLimitPolicy } from './policy.types.js';

/** The algorithms whose `anchor` is `'clock'` or `'first-request'` (`AlgorithmDescriptor.anchor`). */
const FIRST_REQUEST_ANCHORED = ALGORITHMS.filter((a) => ALGORITHM_DESCRIPTORS[a].anchor === 'first-request');
/** The algorithms whose `anchor` is a function, an identity's own period start. */
const FUNCTION_ANCHORED = ALGORITHMS.filter((a) => ALGORITHM_DESCRIPTORS[a].anchor === 'function');

/**
 * A policy's (or a tier's) `anchor` as its rule's: `'first-request'`, or `undefined` for the
 * clock's windows and for an anchor function, which is the policy's (see `anchorFunctionOf`).
 *
 * @throws InvalidPolicyError through `fail`
 */
export function resolveAnchor(anchor: unknown, algorithm: Algorithm, fail: Fail): 'first-request' | undefined {
  if (anchor === undefined) return undefined;
  if (ALGORITHM_DESCRIPTORS[algorithm].anchor === 'function') {
    if (typeof anchor !== 'function') fail('anchor', anchor, expectedAnchorFunction());
    return undefined;
  }
  if (typeof anchor === 'function') fail('anchor', anchor, expectedAnchorFunctionOnlyFor(FUNCTION_ANCHORED, algorithm));
  if (anchor !== 'clock' && anchor !== 'first-request') fail('anchor', anchor, expectedAnchor());
  if (ALGORITHM_DESCRIPTORS[algorithm].anchor !== 'first-request')
    fail('anchor', anchor, expectedOnlyFor(FIRST_REQUEST_ANCHORED, algorithm));
  return anchor === 'first-request' ? anchor : undefined;
}

/**
 * A policy's anchor function, given on the policy (not a tier, where a function would be one per
 * tier of one identity's dates): `undefined` when none is. `rules` are the policy's (a rule per
 * tier), one of which must take it.
 *
 * @throws InvalidPolicyError through `fail`
 */
export function anchorFunctionOf(policy: RateLimitPolicy, rules: readonly Rule[], fail: Fail): QuotaAnchor | undefined {
  if (typeof policy.tiers === 'object' && policy.tiers !== null) {
    for (const [tier, limits] of Object.entries(policy.tiers)) {
      if (typeof limits?.anchor === 'function') fail(`tiers.${tier}.anchor`, limits.anchor, expectedAnchorOnPolicy());
    }
  }
  if (typeof policy.anchor !== 'function') return undefined;
  if (!rules.some((rule) => ALGORITHM_DESCRIPTORS[rule.algorithm].anchor === 'function'))
    fail('anchor', policy.anchor, expectedAnchorFunctionOnlyFor(FUNCTION_ANCHORED, undefined));
  return policy.anchor;
}
