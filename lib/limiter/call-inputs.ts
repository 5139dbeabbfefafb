import { Logger } from '@nestjs/common';
import { resolveCost } from '../keys/cost.js';
import { type KeyOptions, resolveIdentity } from '../keys/identity.js';
import { IdentityWarnings } from '../keys/identity-warnings.js';
import { resolveQuotaAnchor } from '../keys/quota-anchor.js';
import { resolveTier } from '../keys/tier.js';
import type { RoutePolicy } from '../routes/route-policy.js';
import type { LimitedCall } from './limited-call.js';
import type { RequestInputs } from './store-requests.js';

/**
 * The steps of the guard that say who a run is and what it costs under a policy (`identify`,
 * `cost`): the guard hands them to the engine, so a subclass that overrides one is heard.
 */
export interface CallHooks {
  identify(call: LimitedCall, policy: RoutePolicy): string | Promise<string>;
  cost(call: LimitedCall, policy: RoutePolicy): number | Promise<number>;
}

/**
 * What a run of the guard says of itself for each of its policies: its identity and cost through
 * the guard's steps (the identity checked, see `IdentityWarnings`), its tier and its quota's
 * anchor from the policy's functions, each called once per request (kept on its record).
 */
export class CallInputs implements RequestInputs<LimitedCall> {
  private readonly identities = new IdentityWarnings(new Logger('RateLimitGuard'));

  constructor(
    private readonly hooks: CallHooks,
    private readonly timeoutMs: number,
  ) {}

  identity(call: LimitedCall, policy: RoutePolicy): string | Promise<string> {
    return this.identities.checked(policy.keys, this.hooks.identify(call, policy), call);
  }

  cost(call: LimitedCall, policy: RoutePolicy): number | Promise<number> {
    return this.hooks.cost(call, policy);
  }

  tier(call: LimitedCall, policy: RoutePolicy): string | undefined | Promise<string | undefined> {
    return resolveTier(policy.tiers!.source, call, this.timeoutMs);
  }

  anchor(call: LimitedCall, policy: RoutePolicy): number | undefined | Promise<number | undefined> {
    return resolveQuotaAnchor(policy.owes.anchor!, call, this.timeoutMs);
  }
}

/** The identity a policy limits a run as, from its key sources (see `KeySource`): `RateLimitGuard.identify`'s own. */
export function identityOf(call: LimitedCall, policy: RoutePolicy, options: KeyOptions): string | Promise<string> {
  return resolveIdentity(policy.keys, call.request, call.context, options);
}

/** The tokens a run takes under a policy (see `CostSource`), `defaultCost` when unusable: `RateLimitGuard.cost`'s own. */
export function costOf(call: LimitedCall, policy: RoutePolicy): number | Promise<number> {
  // a rule that settles (it has a debt) may reserve nothing up front
  return resolveCost(policy.cost, policy.defaultCost, call.request, call.context, policy.rule.debt !== undefined);
}
