import { callAnchor } from '../keys/quota-anchor.js';
import type { QuotaAnchor, RateLimitPolicy } from '../policy/policy.types.js';
import { InvalidPolicyError, resolvePolicy } from '../policy/resolve-policy.js';
import { duplicatePolicyName, invalidArgument, invalidPolicy, invalidPolicyField } from '../rate-limit.messages.js';
import { type RouteDefaults, type RoutePolicy, routePolicy } from '../routes/route-policy.js';
import { checkCost } from '../stores/distinct-requests.js';
import type { Scales } from './scales.js';
import type { RequestInputs } from './store-requests.js';

/** A `RateLimiterService` call: the identity, cost and tier its caller names, and how long an anchor's promise is awaited, ms. */
export interface GivenCall {
  readonly identity: string;
  readonly cost: number;
  readonly tier: string | undefined;
  readonly timeoutMs: number;
}

/**
 * What a `RateLimiterService` call says of itself for each policy: what its caller named. A
 * quota's `anchor` is called with no context and no request (there are none here), once per call.
 */
export const GIVEN_INPUTS: RequestInputs<GivenCall> = {
  identity: (call) => call.identity,
  cost: (call) => call.cost,
  tier: (call) => call.tier,
  anchor: (call, policy) => {
    const anchor = policy.owes.anchor as unknown as () => ReturnType<QuotaAnchor>;
    return callAnchor(() => anchor(), call.timeoutMs);
  },
};

/**
 * The policies code hands `RateLimiterService` (`consume`, `peek`, `usage`, `reset`), each
 * validated once (kept by the object given) and as it applies to requests under the same factors
 * as a guard policy of the same name, so code reaches the guard's buckets.
 */
export class GivenPolicies {
  /** Each policy given, as it applies to requests. */
  private readonly compiled = new WeakMap<RateLimitPolicy, RoutePolicy>();

  constructor(
    private readonly defaults: RouteDefaults,
    private readonly scales: Scales,
  ) {}

  /**
   * The policies, checked and under their factors, as they apply to requests, with the call's
   * arguments checked. `where` names the call in messages.
   *
   * @throws InvalidPolicyError for a bad policy or two with one name; TypeError or RangeError for
   * a bad identity, cost or tier
   */
  of(
    where: string,
    identity: string,
    policies: RateLimitPolicy | RateLimitPolicy[],
    cost: number,
    tier: string | undefined,
  ): RoutePolicy[] {
    if (typeof identity !== 'string')
      throw new TypeError(invalidArgument(where, 'identity', identity, "must be a string such as 'user:42'"));
    if (tier !== undefined && typeof tier !== 'string')
      throw new TypeError(invalidArgument(where, 'tier', tier, "must be a tier's name, a string"));
    const routes = (Array.isArray(policies) ? policies : [policies]).map((policy) =>
      this.scales.scaled(this.compile(policy)),
    );
    // policies that all settle (their rules have a debt) may reserve nothing up front
    checkCost(
      cost,
      where,
      'cost',
      routes.every((policy) => policy.rule.debt !== undefined),
    );
    // a policy's name is its bucket: two of one name would be one bucket under two rules, as a route refuses
    for (let i = 1; i < routes.length; i++) {
      for (let j = 0; j < i; j++) {
        if (routes[j].name === routes[i].name) {
          throw new InvalidPolicyError(invalidPolicy('RateLimiterService', duplicatePolicyName(routes[i].name)));
        }
      }
    }
    return routes;
  }

  private compile(policy: RateLimitPolicy): RoutePolicy {
    let compiled = this.compiled.get(policy);
    if (compiled !== undefined) return compiled;
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
    return compiled;
  }
}
