import { RELEASED, type Rule } from '../algorithms/algorithm.types.js';
import { keyOf, keyPrefix } from '../keys/bucket-key.js';
import type {
  AdaptiveRate,
  CostSource,
  KeySource,
  QuotaAnchor,
  ResolvedPolicy,
  SkipIf,
  TierSource,
} from '../policy/policy.types.js';
import type { RateLimitRequest } from '../stores/rate-limit-store.interface.js';
import { quotaRule } from '../policy/quota-rule.js';

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
  /** Whether a request that succeeds gets its cost back (`count: 'failures'`). */
  readonly refundsSuccess: boolean;
  /** Lets a request pass this policy uncharged when it says so. */
  readonly skipIf: SkipIf | undefined;
  /** The latency target the module steers this policy's rate by. */
  readonly adaptive: Required<AdaptiveRate> | undefined;
  /** Whether its rule (a tier's, for a tiered one) is a `quota`, whose requests name their period (see `quotaRule`). */
  readonly quota: boolean;
  /** A quota's anchor function (see `QuotaAnchor`); `undefined` for none. */
  readonly quotaAnchor: QuotaAnchor | undefined;
  /** Whether its rule (a tier's, for a tiered one) is `concurrency`: its request gives its slot back when it ends. */
  readonly holdsSlots: boolean;
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
export function routePolicy(
  { name, rule, cost, defaultCost, key, tiers, scope, quotaAnchor, ...outcome }: ResolvedPolicy,
  defaults: RouteDefaults,
  route?: string,
): RoutePolicy {
  const on = scope === 'route' ? route : undefined;
  const quota =
    rule.calendar !== undefined || [...(tiers?.rules.values() ?? [])].some((each) => each.calendar !== undefined);
  const watched = {
    refundsSuccess: outcome.count === 'failures',
    skipIf: outcome.skipIf,
    adaptive: outcome.adaptive,
    quota,
    quotaAnchor,
    holdsSlots: releasesSlot({ rule, tiers }),
  };
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

/** Whether a policy's rule (any tier's) holds a slot its request gives back when it ends (`concurrency`). */
export function releasesSlot({ rule, tiers }: Pick<ResolvedPolicy, 'rule' | 'tiers'>): boolean {
  return (
    RELEASED.has(rule.algorithm) || [...(tiers?.rules.values() ?? [])].some((each) => RELEASED.has(each.algorithm))
  );
}

/**
 * What a store decides for one policy of one request: the bucket of `identity` under the policy
 * (under its tier `tier` for a tiered policy: a tier it does not have, or none, is its default
 * tier; the tier of a policy without tiers is ignored), and the tokens to take; a quota's in the
 * period that holds `period` (see `quotaRule`). The guard and `RateLimiterService` both build their
 * requests with it, so code reaches the guard's bucket by the same identity.
 */
export function storeRequest(
  policy: RoutePolicy,
  identity: string,
  cost: number,
  tier?: string,
  period?: RequestPeriod,
): RateLimitRequest {
  if (policy.tiers === undefined)
    return { key: keyOf(policy.keyPrefix, identity), policy: policy.name, rule: ruleAt(policy.rule, period), cost };
  const { name, rule, keyPrefix } =
    (tier === undefined ? undefined : policy.tiers.byName.get(tier)) ?? policy.tiers.byDefault;
  return { key: keyOf(keyPrefix, identity), policy: policy.name, rule: ruleAt(rule, period), cost, tier: name };
}

/** What a quota's request is counted at: the time, Unix ms on the store's clock, and the identity's anchor (see `QuotaAnchor`). */
export interface RequestPeriod {
  now: number;
  anchor?: number;
}

/** A quota's rule for the request's period (real time when none is given); any other rule as it is. */
function ruleAt(rule: Rule, period: RequestPeriod | undefined): Rule {
  if (rule.calendar === undefined) return rule;
  return quotaRule(rule, period?.now ?? Date.now(), period?.anchor);
}
