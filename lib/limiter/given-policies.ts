import { callAnchor } from '../keys/quota-anchor.js';
import type { QuotaAnchor, RateLimitPolicy } from '../policy/policy.types.js';
import { InvalidPolicyError, resolvePolicy } from '../policy/resolve-policy.js';
import { duplicatePolicyName, invalidArgument, invalidPolicy, invalidPolicyField } from '../rate-limit.messages.js';
import { checkCost } from '../stores/distinct-requests.js';
import type { RateLimitRequest } from '../stores/rate-limit-store.interface.js';
import { type RouteDefaults, type RoutePolicy, routePolicy, storeRequest } from '../routes/route-policy.js';
import type { Scales } from './scales.js';

/**
 * The policies code hands `RateLimiterService` (`consume`, `peek`, `reset`), each validated once
 * (kept by the object given), and the store requests they make for an identity: the same buckets
 * as a guard policy of the same name, under the same factors. A quota's `anchor` is called with no
 * context and no request (there are none here), once per call.
 */
export class GivenPolicies {
  /** Each policy given, as it applies to requests. */
  private readonly compiled = new WeakMap<RateLimitPolicy, RoutePolicy>();

  constructor(
    private readonly defaults: RouteDefaults & { timeout: number },
    private readonly scales: Scales,
    /** The store's clock: a quota's period is the one that holds its time. */
    private readonly clock: { now(): number },
  ) {}

  /** How long an anchor function's promise is awaited, ms: the module's `timeout`. */
  private get timeoutMs(): number {
    return this.defaults.timeout;
  }

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
  ): RateLimitRequest[] | Promise<RateLimitRequest[]> {
    const routes = this.routePolicies(where, identity, policies, cost, tier);
    // no context nor request here: a quota's anchor is called with neither (see `QuotaAnchor`)
    const anchors = routes.map(({ quotaAnchor }) =>
      quotaAnchor === undefined
        ? undefined
        : callAnchor(() => (quotaAnchor as unknown as () => ReturnType<QuotaAnchor>)(), this.timeoutMs),
    );
    const build = (anchored: readonly (number | undefined)[]): RateLimitRequest[] =>
      routes.map((policy, i) =>
        storeRequest(
          policy,
          identity,
          cost,
          tier,
          policy.quota ? { now: this.clock.now(), anchor: anchored[i] } : undefined,
        ),
      );
    return anchors.some((anchor) => typeof anchor === 'object')
      ? Promise.all(anchors.map((anchor) => Promise.resolve(anchor))).then(build)
      : build(anchors as (number | undefined)[]);
  }

  /** The buckets' keys of `identity` under `policies`, for `reset` (no quota's period needed). */
  keys(
    where: string,
    identity: string,
    policies: RateLimitPolicy | RateLimitPolicy[],
    tier: string | undefined,
  ): string[] {
    return this.routePolicies(where, identity, policies, 1, tier).map(
      (policy) => storeRequest(policy, identity, 1, tier).key,
    );
  }

  /** The policies, checked and under their factors, as they apply to requests (see `requests`). */
  private routePolicies(
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
      return this.scales.scaled(compiled);
    });
    // a policy's name is its bucket: two of one name would be one bucket under two rules, as a route refuses
    for (let i = 1; i < requests.length; i++) {
      for (let j = 0; j < i; j++) {
        if (requests[j].name === requests[i].name) {
          throw new InvalidPolicyError(invalidPolicy('RateLimiterService', duplicatePolicyName(requests[i].name)));
        }
      }
    }
    return requests;
  }
}
