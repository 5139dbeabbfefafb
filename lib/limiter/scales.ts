import { type Rule, SCALED_BY_LIMIT, UNSCALED } from '../algorithms/algorithm.types.js';
import { wholeIfNear } from '../algorithms/conversions.js';
import { factorAtLeast, LEAST_FACTOR, leastFactor, refillTooSlow } from '../policy/policy-bounds.js';
import { invalidArgument } from '../rate-limit.messages.js';
import type { RoutePolicy, RouteTier } from '../routes/route-policy.js';

/**
 * A rule under a factor below 1: a `fixed_window` or `sliding_window_counter` admits `burst`
 * times it per window (`Rule.limit`, a product within rounding of a whole number taken as that
 * number) and keeps its window, so its count carries over whatever factor each instance sharing
 * the store has; every other algorithm has its `rps` times it. The factor is never below the
 * least the rule takes (see `leastFactor`): a policy first used after its factor was set refills
 * within the start-time bound all the same.
 */
export function scaledRule(rule: Rule, factor: number): Rule {
  if (UNSCALED.has(rule.algorithm)) return rule;
  const kept = Math.min(1, Math.max(factor, leastFactor(rule)));
  if (SCALED_BY_LIMIT.has(rule.algorithm)) return { ...rule, limit: wholeIfNear(rule.burst * kept, rule.burst) };
  return { ...rule, rps: rule.rps * kept };
}

/** Every rule of a policy: its own, or each tier's, with the tier's name. */
function rulesOf(policy: Pick<RoutePolicy, 'rule' | 'tiers'>): Iterable<RouteTier | { name: undefined; rule: Rule }> {
  return policy.tiers === undefined ? [{ name: undefined, rule: policy.rule }] : policy.tiers.byName.values();
}

/**
 * The factors `RateLimiterService.setScale` puts on policies (`'*'`: every policy without one of
 * its own), and the route policies as they apply under them (see `scaledRule`). While every
 * factor is 1 a route's policies are used as they are; else a scaled copy of each route's list is
 * made once per change, so its header plan (cached per list) shows the scaled numbers.
 */
export class Scales {
  private readonly factors = new Map<string, number>();
  private all = 1;
  /** Whether some factor is not 1. */
  private active = false;
  /** Bumped on every change: copies made before it are stale. */
  private version = 0;
  private readonly copies = new WeakMap<
    readonly RoutePolicy[],
    { version: number; policies: readonly RoutePolicy[] }
  >();

  /**
   * Sets a policy's factor (`'*'`: every policy's, forgetting their own). `known` are the policies
   * the factor is checked against (those of that name, or all for `'*'`): none may take longer than
   * the start-time bound (365 days) to refill under it.
   *
   * @throws TypeError for a name that is not a string, RangeError for a factor not in (0, 1] or
   * one under which a known policy (or any policy at all) would pass the bound
   */
  set(name: string, factor: number, known: Iterable<RoutePolicy> = []): void {
    const where = 'RateLimiterService.setScale';
    if (typeof name !== 'string')
      throw new TypeError(invalidArgument(where, 'policyName', name, "must be a policy's name or '*'"));
    if (typeof factor !== 'number' || !(factor > 0 && factor <= 1)) {
      throw new RangeError(invalidArgument(where, 'factor', factor, 'must be a number above 0 and at most 1'));
    }
    if (factor < LEAST_FACTOR)
      throw new RangeError(invalidArgument(where, 'factor', factor, factorAtLeast(LEAST_FACTOR, 'every policy')));
    for (const policy of known) {
      if (name !== '*' && policy.name !== name) continue;
      for (const tier of rulesOf(policy)) {
        if (!refillTooSlow(tier.rule, factor)) continue;
        const who = `policy "${policy.name}"${tier.name === undefined ? '' : ` (tier "${tier.name}")`}`;
        throw new RangeError(invalidArgument(where, 'factor', factor, factorAtLeast(tier.rule, who)));
      }
    }
    if (name === '*') {
      this.all = factor;
      this.factors.clear();
    } else {
      this.factors.set(name, factor);
    }
    this.active = this.all !== 1 || [...this.factors.values()].some((f) => f !== 1);
    this.version++;
  }

  /** A policy's factor (`'*'`: the one of policies without their own). */
  get(name: string): number {
    return name === '*' ? this.all : (this.factors.get(name) ?? this.all);
  }

  /** `policies`, each under its factor: the list itself while no factor is set. */
  apply(policies: readonly RoutePolicy[]): readonly RoutePolicy[] {
    if (!this.active) return policies;
    let copy = this.copies.get(policies);
    if (copy?.version !== this.version) {
      copy = { version: this.version, policies: policies.map((policy) => this.scaled(policy)) };
      this.copies.set(policies, copy);
    }
    return copy.policies;
  }

  /** One policy under its factor (every tier's rule, for a tiered one); its keys stay its own. */
  scaled(policy: RoutePolicy): RoutePolicy {
    const factor = this.active ? this.get(policy.name) : 1;
    if (factor === 1) return policy;
    if (policy.tiers === undefined) return { ...policy, rule: scaledRule(policy.rule, factor) };
    const tier = (unscaled: RouteTier): RouteTier => ({ ...unscaled, rule: scaledRule(unscaled.rule, factor) });
    const byName = new Map([...policy.tiers.byName].map(([name, each]) => [name, tier(each)]));
    const byDefault = byName.get(policy.tiers.byDefault.name)!;
    return { ...policy, rule: byDefault.rule, tiers: { ...policy.tiers, byName, byDefault } };
  }
}
