import { type RoutePolicy, storeRequest } from '../routes/route-policy.js';
import type { RateLimitRequest } from '../stores/rate-limit-store.interface.js';

type Maybe<T> = T | Promise<T>;

/**
 * One store request per policy, from each policy's identity, cost and tier (`undefined`: none, or
 * its default tier): the requests themselves when every source answered at once, else a promise
 * of them, once every promise has settled (the first rejection rejects it).
 */
export function storeRequests(
  policies: readonly RoutePolicy[],
  identity: (policy: RoutePolicy) => Maybe<string>,
  cost: (policy: RoutePolicy) => Maybe<number>,
  tier: (policy: RoutePolicy) => Maybe<string | undefined>,
): RateLimitRequest[] | Promise<RateLimitRequest[]> {
  const requests: RateLimitRequest[] = new Array<RateLimitRequest>(policies.length);
  let pending: Promise<unknown>[] | undefined;
  for (let i = 0; i < policies.length; i++) {
    const policy = policies[i];
    const key = identity(policy);
    const tokens = cost(policy);
    const named = tier(policy);
    if (typeof key === 'string' && typeof tokens === 'number' && (named === undefined || typeof named === 'string')) {
      requests[i] = storeRequest(policy, key, tokens, named);
      continue;
    }
    const settled = Promise.all([key, tokens, named]).then(
      ([k, t, n]) => (requests[i] = storeRequest(policy, k, t, n)),
    );
    (pending ??= []).push(settled);
  }
  return pending === undefined ? requests : Promise.all(pending).then(() => requests);
}
