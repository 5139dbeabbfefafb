import {
  expectedDefaultTier,
  expectedTierField,
  expectedTierLimits,
  expectedTierName,
  expectedTiers,
  expectedTierSource,
  limitBesideTiers,
  tierFieldWithoutTiers,
  tiersWithoutTier,
} from '../rate-limit.messages.js';
import type { Conflict, Fail } from './invalid-policy.js';
import { isName, MAX_NAME_LENGTH } from './policy-name.js';
import type { RateLimitPolicy, TierLimits, TierSource } from './policy.types.js';

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
export function resolveTiers(policy: RateLimitPolicy, fail: Fail, conflict: Conflict): TierFields | undefined {
  const { tiers, tier, defaultTier } = policy;
  if (tiers === undefined && tier === undefined && defaultTier === undefined) return undefined;
  if (tiers === undefined) conflict(tierFieldWithoutTiers(tier === undefined ? 'defaultTier' : 'tier'));
  if (typeof tiers !== 'object' || tiers === null || Array.isArray(tiers) || Object.keys(tiers).length === 0)
    fail('tiers', tiers, expectedTiers());
  // a quota's anchor function gives every tier's period start: the policy's own, beside its tiers
  const own = LIMIT_FIELDS.find(
    (field) => policy[field] !== undefined && !(field === 'anchor' && typeof policy.anchor === 'function'),
  );
  if (own !== undefined) conflict(limitBesideTiers(own));
  if (tier === undefined) conflict(tiersWithoutTier());
  if (!isTierSource(tier)) fail('tier', tier, expectedTierSource());
  const names = Object.keys(tiers);
  if (typeof defaultTier !== 'string' || !Object.hasOwn(tiers, defaultTier))
    fail('defaultTier', defaultTier, expectedDefaultTier(names));
  for (const name of names) {
    // a tier's name is in the bucket key too, as a policy's is
    if (!isName(name)) fail('tiers', name, expectedTierName(MAX_NAME_LENGTH));
    const limits: unknown = tiers[name];
    if (typeof limits !== 'object' || limits === null || Array.isArray(limits))
      fail(`tiers.${name}`, limits, expectedTierLimits());
    for (const field of Object.keys(limits)) {
      if (!(LIMIT_FIELDS as readonly string[]).includes(field))
        fail(`tiers.${name}.${field}`, (limits as Record<string, unknown>)[field], expectedTierField(LIMIT_FIELDS));
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
