import type { Rule } from '../algorithms/algorithm.types.js';
import { keyPrefix } from '../keys/bucket-key.js';
import { type Obligations, resolvedObligations } from '../policy/obligations.js';
import type {
  AdaptiveRate,
  CostSource,
  KeySource,
  ResolvedPolicy,
  ResolvedSettle,
  SkipIf,
  TierSource,
} from '../policy/policy.types.js';

/**
 * A policy as it applies to requests: validated, its key sources settled (the policy's own or
 * the module's) and the start of its bucket keys worked out once. The guard's steps receive it,
 * so a subclass that overrides one (say, `identify`) reads the policy from it.
 */
export interface RoutePolicy {
  /** Its name, in headers and in its bucket keys. */
  readonly name: string;
  /** The rule its buckets follow (a tiered policy's: its default tier's). */
  readonly rule: Rule;
  readonly cost: CostSource;
  /** Cost used when a header, query or function cost is unusable. */
  readonly defaultCost: number;
  /** Identity sources, tried in order until one yields. */
  readonly keys: readonly KeySource[];
  /** What its bucket keys start with (see `keyPrefix`; a tiered policy's: its default tier's). */
  readonly keyPrefix: string;
  /** A tiered policy's tiers; `undefined` for a policy without. */
  readonly tiers: RouteTiers | undefined;
  /** Lets a request pass this policy uncharged when it says so. */
  readonly skipIf: SkipIf | undefined;
  /** The latency target the module steers this policy's rate by. */
  readonly adaptive: Required<AdaptiveRate> | undefined;
  /** What it owes each request it admits (see `Obligations`). */
  readonly owes: Obligations;
  /** How it settles a request's real cost (see `RateLimitPolicy.settle`); `undefined`: it does not. */
  readonly settles: ResolvedSettle | undefined;
  /** What its cost counts (`RateLimitPolicy.unit`). */
  readonly unit: string;
  /** `true` when the policy said `shares: false`: its buckets are never shared (see `Shares`). */
  readonly unshared?: true;
  /**
   * Whether the route's handler declares it itself (not its class or the module): a GraphQL
   * field charges such a policy once per selection, the others once per operation.
   */
  readonly onHandler?: boolean;
}

/** The tiers of a tiered policy as they apply to requests. */
export interface RouteTiers {
  /** Where a request's tier is read. */
  readonly source: TierSource;
  /** Each tier by name. */
  readonly byName: ReadonlyMap<string, RouteTier>;
  /** The tier of a request whose source names none. */
  readonly byDefault: RouteTier;
}

/** One tier of a policy: its rule and the start of its own bucket keys. */
export interface RouteTier {
  readonly name: string;
  readonly rule: Rule;
  readonly keyPrefix: string;
}

/** The module options a policy's route form depends on. */
export interface RouteDefaults {
  /** Prefix of every store key. */
  prefix: string;
  /** Key sources of a policy that names none. */
  key: readonly KeySource[];
}

/**
 * A validated policy as it applies to requests under the module's `prefix` and `key`, on `route`
 * (`Controller.handler`, fit for keys: see `defaultPolicyName`) when it has one: a policy scoped to
 * the route (`scope: 'route'`) has buckets of that route's own (see `keyPrefix`).
 */
export function routePolicy(resolved: ResolvedPolicy, defaults: RouteDefaults, route?: string): RoutePolicy {
  const { name, rule, cost, defaultCost, key, tiers, scope, skipIf, adaptive, settles, unit, unshared } = resolved;
  const on = scope === 'route' ? route : undefined;
  const watched = { skipIf, adaptive, owes: resolvedObligations(resolved), settles, unit, unshared };
  if (tiers === undefined) {
    return {
      name,
      rule,
      cost,
      defaultCost,
      keys: key ?? defaults.key,
      keyPrefix: keyPrefix(defaults.prefix, name, rule, undefined, on),
      tiers: undefined,
      ...watched,
    };
  }
  const byName = new Map<string, RouteTier>();
  for (const [tier, rule] of tiers.rules) {
    byName.set(tier, { name: tier, rule, keyPrefix: keyPrefix(defaults.prefix, name, rule, tier, on) });
  }
  const byDefault = byName.get(tiers.defaultTier)!;
  return {
    name,
    rule: byDefault.rule,
    cost,
    defaultCost,
    keys: key ?? defaults.key,
    keyPrefix: byDefault.keyPrefix,
    tiers: { source: tiers.source, byName, byDefault },
    ...watched,
  };
}
