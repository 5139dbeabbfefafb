import {
  ALGORITHMS,
  type Algorithm,
  type RefusableOption,
  type Rule,
  WINDOW_ALGORITHMS,
} from '../algorithms/algorithm.types.js';
import { ALGORITHM_DESCRIPTORS } from '../algorithms/registry.js';
import {
  costAboveCapacity,
  defaultCostAboveCapacity,
  expectedAlgorithm,
  optionNotFor,
  windowUnderOneMs,
} from '../rate-limit.messages.js';
import type { Conflict, Fail } from './invalid-policy.js';
import type { ResolvedPolicy, TierLimits } from './policy.types.js';
import { resolveAnchor } from './resolve-anchor.js';
import { resolveCountedLimit } from './resolve-counted-limit.js';
import { resolveRate } from './resolve-rate.js';

/** What a policy says for every tier alike, which each tier's rule is checked against. */
export interface PolicyWide extends Pick<ResolvedPolicy, 'cost' | 'defaultCost' | 'count' | 'adaptive'> {
  /** The policy's block, as a rule's fields (see `resolveBlock`); `undefined`: none. */
  block: Pick<Rule, 'blockMs' | 'blockResets'> | undefined;
  /** For a policy that settles, its rules' `debt`: tokens, or `'burst'`, each rule's capacity; `undefined`: it does not settle. */
  maxDebt: number | 'burst' | undefined;
}

/**
 * A policy's (or a tier's) limits as a rule, with the policy's block: its algorithm, its rate
 * and capacity said the algorithm's way, checked against the policy's cost and the options its
 * algorithm refuses.
 *
 * @throws InvalidPolicyError through `fail` or `conflict`
 */
export function resolveRule(limits: TierLimits, wide: PolicyWide, fail: Fail, conflict: Conflict): Rule {
  // A field set to null is a value, and refused as one: only a field left out takes its default.
  const algorithm: Algorithm = limits.algorithm === undefined ? 'token_bucket' : limits.algorithm;
  if (!ALGORITHMS.includes(algorithm)) fail('algorithm', algorithm, expectedAlgorithm(ALGORITHMS));

  const counted = resolveCountedLimit(limits, algorithm, fail, conflict);
  const { rps, burst, capacity } = counted ?? resolveRate(limits, fail, conflict);
  if (WINDOW_ALGORITHMS.has(algorithm) && (burst * 1000) / rps < 1) conflict(windowUnderOneMs(algorithm, burst, rps));
  const { cost, defaultCost, block } = wide;
  // A cost above the capacity is refused on every request, forever: surely not what was meant.
  if (typeof cost === 'number' && cost > burst) conflict(costAboveCapacity(cost, capacity, burst));
  if (typeof cost !== 'number' && defaultCost > burst) conflict(defaultCostAboveCapacity(defaultCost, capacity, burst));
  refuseOptions(algorithm, wide, conflict);

  const anchor = resolveAnchor(limits.anchor, algorithm, fail);
  const rule: Rule = block === undefined ? { algorithm, rps, burst } : { algorithm, rps, burst, ...block };
  if (wide.maxDebt !== undefined) rule.debt = wide.maxDebt === 'burst' ? burst : wide.maxDebt;
  if (counted?.calendar !== undefined) return { ...rule, calendar: counted.calendar };
  return anchor === undefined ? rule : { ...rule, anchor };
}

/** Refuses the options of the policy that `algorithm` cannot honour (`AlgorithmDescriptor.refuses`), saying why. */
function refuseOptions(
  algorithm: Algorithm,
  { block, adaptive, count, maxDebt }: PolicyWide,
  conflict: Conflict,
): void {
  const refuses = ALGORITHM_DESCRIPTORS[algorithm].refuses;
  if (refuses === undefined) return;
  const given: Record<RefusableOption, boolean> = {
    blockFor: block !== undefined,
    adaptive: adaptive !== undefined,
    "count: 'failures'": count === 'failures',
    settle: maxDebt !== undefined,
  };
  for (const [option, why] of Object.entries(refuses) as Array<[RefusableOption, string]>)
    if (given[option]) conflict(optionNotFor(option, algorithm, why));
}
