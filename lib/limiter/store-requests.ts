import { type RoutePolicy, storeRequest } from '../routes/route-policy.js';
import type { RateLimitRequest } from '../stores/rate-limit-store.interface.js';

/**
 * Puts the store request of `policy` at `requests[i]` once its identity, cost, tier and a quota's
 * anchor (any of them a promise) have settled, a quota's in the period of `clock`'s time then;
 * rejects with the first rejection.
 */
export function settleRequest(
  requests: RateLimitRequest[],
  i: number,
  policy: RoutePolicy,
  identity: string | Promise<string>,
  cost: number | Promise<number>,
  tier: string | undefined | Promise<string | undefined>,
  anchor: number | undefined | Promise<number | undefined>,
  clock: { now(): number },
): Promise<unknown> {
  return Promise.all([identity, cost, tier, anchor]).then(
    ([key, tokens, named, anchored]) =>
      (requests[i] = storeRequest(
        policy,
        key,
        tokens,
        named,
        policy.quota ? { now: clock.now(), anchor: anchored } : undefined,
      )),
  );
}

/** `requests` once every one of `pending` has settled it (see `settleRequest`). */
export function settledRequests(
  requests: RateLimitRequest[],
  pending: Promise<unknown>[],
): Promise<RateLimitRequest[]> {
  return Promise.all(pending).then(() => requests);
}
