import type { RateLimitPolicy } from '../policy/policy.types.js';
import { InvalidPolicyError, resolvePolicy } from '../policy/resolve-policy.js';
import { duplicatePolicyName, invalidArgument, invalidPolicy, invalidPolicyField } from '../rate-limit.messages.js';
import { checkCost } from '../stores/distinct-requests.js';
import type { RateLimitRequest } from '../stores/rate-limit-store.interface.js';
import { type RouteDefaults, type RoutePolicy, routePolicy, storeRequest } from '../routes/route-policy.js';
import type { Scales } from './scales.js';

/**
 * The policies code hands `RateLimiterService` (`consume`, `peek`, `reset`), each validated once
 * (kept by the object given), and the store requests they make for an identity: the same buckets
 * as a guard policy of the same name, under the same factors.
 */
export class GivenPolicies {
  /** Each policy given, as it applies to requests. */
  private readonly compiled = new WeakMap<RateLimitPolicy, RoutePolicy>();

  constructor(
    private readonly defaults: RouteDefaults,
    private readonly scales: Scales,
  ) {}

  /**
   * One store request per policy. `where` names the call in messages.
   *
   * @throws InvalidPolicyError for a bad policy or two with one name; TypeError or RangeError for
   * a bad identity, cost or tier
   */
  requests(
    where: string,
    identity: string,
    policies: RateLimitPolicy | RateLimitPolicy[],
    cost: number,
    tier: string | undefined,
  ): RateLimitRequest[] {
    if (typeof identity !== 'string')
      throw new TypeError(invalidArgument(where, 'identity', identity, "must be a string such as 'user:42'"));
    if (tier !== undefined && typeof tier !== 'string')
      throw new TypeError(invalidArgument(where, 'tier', tier, "must be a tier's name, a string"));
    checkCost(cost, where, 'cost');
    const requests = (Array.isArray(policies) ? policies : [policies]).map((policy) => {
      let compiled = this.compiled.get(policy);
      if (!compiled) {
        const resolved = resolvePolicy(policy, 'RateLimiterService', 'default');
        // a call here names no route, so it could reach none of a route-scoped policy's buckets
        if (resolved.scope === 'route')
          throw new InvalidPolicyError(
            invalidPolicyField(
              'RateLimiterService',
              'scope',
              resolved.scope,
              `cannot be 'route' here: RateLimiterService has no route, only an identity; use 'client' (the default)`,
            ),
          );
        this.compiled.set(policy, (compiled = routePolicy(resolved, this.defaults)));
      }
      return storeRequest(this.scales.scaled(compiled), identity, cost, tier);
    });
    // a policy's name is its bucket: two of one name would be one bucket under two rules, as a route refuses
    for (let i = 1; i < requests.length; i++) {
      for (let j = 0; j < i; j++) {
        if (requests[j].policy === requests[i].policy) {
          throw new InvalidPolicyError(invalidPolicy('RateLimiterService', duplicatePolicyName(requests[i].policy)));
        }
      }
    }
    return requests;
  }
}
