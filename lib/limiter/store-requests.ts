import { type RoutePolicy, storeRequest } from '../routes/route-policy.js';
import type { RateLimitRequest } from '../stores/rate-limit-store.interface.js';

/**
 * Puts the store request of `policy` at `requests[i]` once its identity, cost and tier (any of
 * them a promise) have settled; rejects with the first rejection.
 */
export function settleRequest(
  requests: RateLimitRequest[],
  i: number,
  policy: RoutePolicy,
  identity: string | Promise<string>,
  cost: number | Promise<number>,
  tier: string | undefined | Promise<string | undefined>,
): Promise<unknown> {
  return Promise.all([identity, cost, tier]).then(
    ([key, tokens, named]) => (requests[i] = storeRequest(policy, key, tokens, named)),
  );
}

/** `requests` once every one of `pending` has settled it (see `settleRequest`). */
export function settledRequests(
  requests: RateLimitRequest[],
  pending: Promise<unknown>[],
): Promise<RateLimitRequest[]> {
  return Promise.all(pending).then(() => requests);
}
