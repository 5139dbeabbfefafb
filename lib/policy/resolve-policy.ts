import {
  expectedPolicyField,
  expectedScope,
  expectedShares,
  invalidPolicyValue,
  policyOrTier,
} from '../rate-limit.messages.js';
import { InvalidPolicyError, refusals, tierRefusals } from './invalid-policy.js';
import { factorAtLeast, refillTooSlow } from './policy-bounds.js';
import { resolveName } from './policy-name.js';
import type { RateLimitPolicy, ResolvedPolicy, ResolvedTiers } from './policy.types.js';
import { resolveCost, resolveKeySources } from './request-sources.js';
import { anchorFunctionOf } from './resolve-anchor.js';
import { resolveBlock } from './resolve-block.js';
import { OUTCOME_FIELDS, resolveOutcomeFields } from './resolve-outcome-fields.js';
import { type PolicyWide, resolveRule } from './resolve-rule.js';
import { resolveSettle, SETTLE_FIELDS } from './resolve-settle.js';
import { LIMIT_FIELDS, resolveTiers, TIER_FIELDS } from './resolve-tiers.js';

// What the rest of the package takes from policy validation, wherever in lib/policy it lives.
export { HEADER_NAME_CHARS } from '../rate-limit.messages.js';
export { parseWindow } from './durations.js';
export { InvalidPolicyError } from './invalid-policy.js';
export { defaultPolicyName, MAX_NAME_LENGTH } from './policy-name.js';
export { isHeaderName, isKeySource, resolveKeySources } from './request-sources.js';

const FIELDS = new Set<string>([
  ...LIMIT_FIELDS,
  'cost',
  'defaultCost',
  'key',
  'scope',
  'name',
  ...TIER_FIELDS,
  'blockFor',
  ...OUTCOME_FIELDS,
  ...SETTLE_FIELDS,
  'shares',
]);

/**
 * Validates a policy and fills in its defaults. `where` names its place for error messages
 * (`CatsController.findAll`, `CatsController (class)`, `RateLimitModule policies[0]`) and
 * `defaultName` is the name an unnamed policy gets there.
 *
 * @throws InvalidPolicyError naming `where` and the field
 */
export function resolvePolicy(policy: RateLimitPolicy, where: string, defaultName: string): ResolvedPolicy {
  const { fail, conflict } = refusals(where);
  if (typeof policy !== 'object' || policy === null || Array.isArray(policy)) {
    throw new InvalidPolicyError(invalidPolicyValue(where, policy));
  }
  for (const field of Object.keys(policy)) {
    if (!FIELDS.has(field)) fail(field, (policy as Record<string, unknown>)[field], expectedPolicyField(FIELDS));
  }

  const { settles, maxDebt, unit } = resolveSettle(policy, fail);
  const { cost, defaultCost } = resolveCost(policy, settles !== undefined, fail);
  const outcome = resolveOutcomeFields(policy, fail);
  // every tier's rule is checked against what the policy says for all of them
  const block = resolveBlock(policy.blockFor, fail);
  const wide: PolicyWide = { cost, defaultCost, block, count: outcome.count, adaptive: outcome.adaptive, maxDebt };
  // a tiered policy has a rule per tier, each checked as a policy's own, in messages that name the tier
  const tiered = resolveTiers(policy, fail, conflict);
  const tiers: ResolvedTiers | undefined = tiered && {
    rules: new Map(
      tiered.limits.map(([tier, limits]) => {
        const inTier = tierRefusals(tier, fail, conflict);
        return [tier, resolveRule(limits, wide, inTier.fail, inTier.conflict)];
      }),
    ),
    source: tiered.source,
    defaultTier: tiered.defaultTier,
  };
  const rule = tiers === undefined ? resolveRule(policy, wide, fail, conflict) : tiers.rules.get(tiers.defaultTier)!;

  const key = policy.key === undefined ? undefined : resolveKeySources(policy.key, fail);
  const scope = policy.scope === undefined ? 'client' : policy.scope;
  if (scope !== 'client' && scope !== 'route') fail('scope', scope, expectedScope());
  const name = resolveName(policy.name, defaultName, fail);
  const quotaAnchor = anchorFunctionOf(policy, tiers === undefined ? [rule] : [...tiers.rules.values()], fail);

  // the adaptive factor scales every tier's rate: none may pass the bound on refilling
  const min = outcome.adaptive?.min ?? 1;
  for (const [tier, each] of tiers === undefined ? [[undefined, rule] as const] : tiers.rules) {
    if (refillTooSlow(each, min)) fail('adaptive.min', min, factorAtLeast(each, policyOrTier(tier)));
  }
  const resolved: ResolvedPolicy =
    tiers === undefined
      ? { name, rule, cost, defaultCost, key, scope, ...outcome, unit }
      : { name, rule, cost, defaultCost, key, scope, tiers, ...outcome, unit };
  if (quotaAnchor !== undefined) resolved.quotaAnchor = quotaAnchor;
  if (settles !== undefined) resolved.settles = settles;
  if (policy.shares !== undefined) {
    if (policy.shares !== false) fail('shares', policy.shares, expectedShares());
    resolved.unshared = true;
  }
  return resolved;
}
