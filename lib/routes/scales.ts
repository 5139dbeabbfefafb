import type { Rule } from '../algorithms/algorithm.types.js';
import { invalidArgument } from '../rate-limit.messages.js';
import type { RoutePolicy, RouteTier } from './route-policy.js';

/**
 * The factors `RateLimiterService.setScale` puts on policies' `rps`, by policy name (`'*'`: every
 * policy without one of its own), and the route policies as they apply under them. While every
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
  private readonly copies = new WeakMap<readonly RoutePolicy[], { version: number; policies: readonly RoutePolicy[] }>();

  /**
   * Sets a policy's factor (`'*'`: every policy's, forgetting their own).
   *
   * @throws TypeError for a name that is not a string, RangeError for a factor not in (0, 1]
   */
  set(name: string, factor: number): void {
    const where = 'RateLimiterService.setScale';
    if (typeof name !== 'string') throw new TypeError(invalidArgument(where, 'policyName', name, "must be a policy's name or '*'"));
    if (typeof factor !== 'number' || !(factor > 0 && factor <= 1)) {
      throw new RangeError(invalidArgument(where, 'factor', factor, 'must be a number above 0 and at most 1'));
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

  /** `policies` with each `rps` times its factor: the list itself while no factor is set. */
  apply(policies: readonly RoutePolicy[]): readonly RoutePolicy[] {
    if (!this.active) return policies;
    let copy = this.copies.get(policies);
    if (copy?.version !== this.version) {
      copy = { version: this.version, policies: policies.map((policy) => this.scaled(policy)) };
      this.copies.set(policies, copy);
    }
    return copy.policies;
  }

  /** One policy with its `rps` (every tier's, for a tiered one) times its factor. */
  scaled(policy: RoutePolicy): RoutePolicy {
    const factor = this.active ? this.get(policy.name) : 1;
    if (factor === 1) return policy;
    const rule = (scaled: Rule): Rule => ({ ...scaled, rps: scaled.rps * factor });
    if (policy.tiers === undefined) return { ...policy, rule: rule(policy.rule) };
    const tier = (scaled: RouteTier): RouteTier => ({ ...scaled, rule: rule(scaled.rule) });
    const byName = new Map([...policy.tiers.byName].map(([name, each]) => [name, tier(each)]));
    const byDefault = byName.get(policy.tiers.byDefault.name)!;
    return { ...policy, rule: byDefault.rule, tiers: { ...policy.tiers, byName, byDefault } };
  }
}
