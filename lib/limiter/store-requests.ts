import { Logger } from '@nestjs/common';
import type { Rule } from '../algorithms/algorithm.types.js';
import { keyOf } from '../keys/bucket-key.js';
import { quotaRule } from '../policy/quota-rule.js';
import { unplaceableAnchor } from '../rate-limit.messages.js';
import type { RoutePolicy, RouteTier, RouteTiers } from '../routes/route-policy.js';
import type { RateLimitRequest } from '../stores/rate-limit-store.interface.js';

/**
 * What a call (a run of the guard, a `RateLimiterService` call) says of itself for one of its
 * policies, each a value or a promise of one: the identity it is limited as (`user:42`), the
 * tokens it takes, its tier (asked of a tiered policy only) and its quota's anchor, Unix ms
 * (asked of a policy with an `anchor` function only).
 */
export interface RequestInputs<Call> {
  identity(call: Call, policy: RoutePolicy): string | Promise<string>;
  cost(call: Call, policy: RoutePolicy): number | Promise<number>;
  tier(call: Call, policy: RoutePolicy): string | undefined | Promise<string | undefined>;
  anchor(call: Call, policy: RoutePolicy): number | undefined | Promise<number | undefined>;
}

/**
 * The one place where a policy and a call's inputs become a store request: the bucket of the
 * identity under the policy (under its tier, for a tiered one), the tokens to take, and for a
 * quota the calendar period that holds the store's time now (from the identity's anchor when it
 * has one). The guard and `RateLimiterService` both build with it, so code reaches the guard's
 * buckets by the same identity.
 */
export class StoreRequests {
  /** Policies whose anchor named a time no period starts from: warned of once each. */
  private readonly unplaced = new Set<string>();
  private readonly logger = new Logger('RateLimitModule');

  /** @param clock the store's clock: a quota's period is the one that holds its time */
  constructor(private readonly clock: { now(): number }) {}

  /**
   * One store request per policy: at once when every input is a value (an admitted request on
   * the memory store then waits on no promise), else once they have all settled.
   *
   * @throws (or rejects with) what an input threw or rejected with
   */
  build<Call>(
    policies: readonly RoutePolicy[],
    inputs: RequestInputs<Call>,
    call: Call,
  ): RateLimitRequest[] | Promise<RateLimitRequest[]> {
    const requests = new Array<RateLimitRequest>(policies.length);
    let pending: Promise<unknown>[] | undefined;
    for (let i = 0; i < policies.length; i++) {
      const policy = policies[i];
      const identity = inputs.identity(call, policy);
      const cost = inputs.cost(call, policy);
      const tier = policy.tiers && inputs.tier(call, policy);
      const anchor = policy.owes.anchor && inputs.anchor(call, policy);
      const known =
        typeof identity === 'string' &&
        typeof cost === 'number' &&
        typeof tier !== 'object' &&
        typeof anchor !== 'object';
      if (known) requests[i] = this.request(policy, identity, cost, tier, anchor);
      else
        (pending ??= []).push(
          Promise.all([identity, cost, tier, anchor]).then(
            ([key, tokens, named, anchored]) => (requests[i] = this.request(policy, key, tokens, named, anchored)),
          ),
        );
    }
    return pending === undefined ? requests : Promise.all(pending).then(() => requests);
  }

  /**
   * The request of one policy (`tier`: a tier it does not have, or none, is its default tier; the
   * tier of a policy without tiers is ignored), a quota's in the period that holds the store's
   * time now, from `anchor` when it is one a period can start from.
   */
  request(policy: RoutePolicy, identity: string, cost: number, tier?: string, anchor?: number): RateLimitRequest {
    if (policy.tiers === undefined) {
      const rule = policy.owes.period ? this.periodRule(policy, policy.rule, anchor) : policy.rule;
      return { key: keyOf(policy.keyPrefix, identity), policy: policy.name, rule, cost };
    }
    const { name, rule, keyPrefix } = tierOf(policy.tiers, tier);
    const ruled = policy.owes.period ? this.periodRule(policy, rule, anchor) : rule;
    return { key: keyOf(keyPrefix, identity), policy: policy.name, rule: ruled, cost, tier: name };
  }

  /** The bucket key of `identity` under a policy (and its tier), for a reset: no period needed. */
  key(policy: RoutePolicy, identity: string, tier?: string): string {
    return keyOf(policy.tiers === undefined ? policy.keyPrefix : tierOf(policy.tiers, tier).keyPrefix, identity);
  }

  /**
   * A quota's rule for the period that holds the store's time now (any other rule as it is). An
   * anchor no period can start from in the quota's time zone (a timestamp in ns, `1e300`) counts
   * in the calendar's own periods, as an anchor function that names none does, with one warning
   * per policy.
   */
  private periodRule(policy: RoutePolicy, rule: Rule, anchor: number | undefined): Rule {
    const now = this.clock.now();
    if (anchor === undefined || rule.calendar === undefined) return quotaRule(rule, now);
    try {
      return quotaRule(rule, now, anchor);
    } catch (error) {
      if (!(error instanceof RangeError)) throw error;
      if (!this.unplaced.has(policy.name)) {
        this.unplaced.add(policy.name);
        this.logger.warn(unplaceableAnchor(policy.name, anchor, rule.calendar.timeZone));
      }
      return quotaRule(rule, now);
    }
  }
}

/** A tiered policy's tier of that name, or its default tier. */
function tierOf(tiers: RouteTiers, tier: string | undefined): RouteTier {
  return (tier === undefined ? undefined : tiers.byName.get(tier)) ?? tiers.byDefault;
}
