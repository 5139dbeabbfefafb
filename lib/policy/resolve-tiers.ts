import type { RateLimitPolicy, TierLimits, TierSource } from './policy.types.js';

type Fail = (field: string, value: unknown, expected: string) => never;

/** The policy fields of a tiered policy. */
export const TIER_FIELDS = ['tiers', 'tier', 'defaultTier'] as const;
/** What a tier sets; a tiered policy gives none of them itself. The first fields of any policy. */
export const LIMIT_FIELDS: ReadonlyArray<keyof TierLimits> = [
  'algorithm',
  'rps',
  'tokensPerSecond',
  'burst',
  'limit',
  'window',
  'anchor',
  'lease',
  'period',
  'timeZone',
];
/** As a policy name (see `resolvePolicy`): a tier name is in the bucket key too, where braces would make a Cluster hash tag. */
const TIER_NAME = /^[\x21-\x7a|~]{1,64}$/;

/** A tiered policy's tier fields, checked in shape; each tier's limits are left to become rules. */
export interface TierFields {
  source: TierSource;
  defaultTier: string;
  limits: Array<[tier: string, limits: TierLimits]>;
}

/**
 * Checks the tier fields of a policy: `undefined` when it has none. The limits of each tier are
 * only checked to be limit fields here; `resolvePolicy` turns each into a rule as it does a
 * policy's own, with messages naming the tier.
 */
export function resolveTiers(
  policy: RateLimitPolicy,
  fail: Fail,
  conflict: (problem: string) => never,
): TierFields | undefined {
  const { tiers, tier, defaultTier } = policy;
  if (tiers === undefined && tier === undefined && defaultTier === undefined) return undefined;
  if (tiers === undefined)
    conflict(`"${tier === undefined ? 'defaultTier' : 'tier'}" goes with "tiers", the limits of each tier`);
  if (typeof tiers !== 'object' || tiers === null || Array.isArray(tiers) || Object.keys(tiers).length === 0) {
    fail('tiers', tiers, 'must be an object of limits by tier name, such as { free: { rps: 10, burst: 20 } }');
  }
  // a quota's anchor function gives every tier's period start: the policy's own, beside its tiers
  const own = LIMIT_FIELDS.find(
    (field) => policy[field] !== undefined && !(field === 'anchor' && typeof policy.anchor === 'function'),
  );
  if (own !== undefined) conflict(`"${own}" is given beside "tiers"; give the limits in each tier`);
  if (tier === undefined) conflict(`"tiers" needs a "tier": 'user:<field>' or a function naming a request's tier`);
  if (!isTierSource(tier)) fail('tier', tier, `must be 'user:<field>' or a function naming a request's tier`);
  const names = Object.keys(tiers);
  if (typeof defaultTier !== 'string' || !Object.hasOwn(tiers, defaultTier)) {
    fail('defaultTier', defaultTier, `must name one of the tiers (${names.join(', ')})`);
  }
  for (const name of names) {
    if (!TIER_NAME.test(name))
      fail('tiers', name, 'must name each tier with 1 to 64 visible ASCII characters, without spaces or braces');
    const limits: unknown = tiers[name];
    if (typeof limits !== 'object' || limits === null || Array.isArray(limits)) {
      fail(`tiers.${name}`, limits, 'must be an object of limits such as { rps: 10, burst: 20 }');
    }
    for (const field of Object.keys(limits)) {
      if (!(LIMIT_FIELDS as readonly string[]).includes(field)) {
        fail(
          `tiers.${name}.${field}`,
          (limits as Record<string, unknown>)[field],
          `is not a tier field (the fields are ${LIMIT_FIELDS.join(', ')})`,
        );
      }
    }
  }
  return { source: tier, defaultTier, limits: Object.entries(tiers) };
}

function isTierSource(source: unknown): source is TierSource {
  return (
    typeof source === 'function' ||
    (typeof source === 'string' && source.startsWith('user:') && source.length > 'user:'.length)
  );
}
