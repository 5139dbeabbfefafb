import type { HeaderFamily } from '../rate-limit-options.interface.js';
import type { RateLimitDecision } from '../stores/rate-limit-store.interface.js';

/** What the headers need of a policy: its name, capacity and window. */
export interface DescribedPolicy {
  name: string;
  limit: { burst: number };
  /** The policy's window in whole seconds (`w` in `RateLimit-Policy`). */
  windowSeconds: number;
}

/**
 * What a route's headers need that never changes, worked out once per route: the whole
 * `RateLimit-Policy` value and the start of each policy's `RateLimit` member, so a request only
 * fills in its numbers.
 */
export interface HeaderPlan {
  /** `RateLimit-Policy`, `undefined` without `'ietf'`. */
  policy: string | undefined;
  /** Per policy, `"<name>";r=`: its `RateLimit` member up to the remaining. */
  members: string[];
  xRateLimit: boolean;
  legacy: boolean;
}

/** The plan of a route's headers, `undefined` when no family is sent. */
export function headerPlan(families: readonly HeaderFamily[], policies: readonly DescribedPolicy[]): HeaderPlan | undefined {
  if (families.length === 0 || policies.length === 0) return undefined;
  const ietf = families.includes('ietf');
  return {
    policy: ietf ? policies.map(({ name, limit, windowSeconds }) => `${sfString(name)};q=${limit.burst};w=${windowSeconds}`).join(', ') : undefined,
    members: policies.map(({ name }) => `${sfString(name)};r=`),
    xRateLimit: families.includes('x-ratelimit'),
    legacy: families.includes('legacy'),
  };
}

/**
 * The rate-limit response headers for a request's decisions (one per policy of `plan`), as
 * `[name, value]` pairs.
 *
 * - `'ietf'`: `RateLimit-Policy: "name";q=<limit>;w=<window s>` and
 *   `RateLimit: "name";r=<remaining>;t=<s until more quota>`, one list member per policy.
 * - `'x-ratelimit'`: `X-RateLimit-Limit`, `-Remaining`, `-Reset` (Unix seconds when full again)
 *   for the policy closest to refusing.
 * - `'legacy'`: `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset` (delta seconds) for
 *   that same policy.
 *
 * `Retry-After` is not among them: the guard adds it to a 429 whatever the families.
 *
 * @param nowMs wall-clock time, ms, that `X-RateLimit-Reset` counts from
 */
export function rateLimitHeaders(plan: HeaderPlan, decisions: readonly RateLimitDecision[], nowMs: number): Array<[string, string]> {
  const headers: Array<[string, string]> = [];
  if (plan.policy !== undefined) {
    let members = '';
    for (let i = 0; i < decisions.length; i++) {
      const d = decisions[i];
      members += `${i === 0 ? '' : ', '}${plan.members[i]}${d.remaining};t=${d.resetAfter}`;
    }
    headers.push(['RateLimit-Policy', plan.policy], ['RateLimit', members]);
  }
  if (!plan.xRateLimit && !plan.legacy) return headers;
  const closest = closestToRefusing(decisions);
  if (plan.xRateLimit) {
    headers.push(
      ['X-RateLimit-Limit', String(closest.limit)],
      ['X-RateLimit-Remaining', String(closest.remaining)],
      ['X-RateLimit-Reset', String(Math.ceil(nowMs / 1000) + closest.fullAfter)],
    );
  }
  if (plan.legacy) {
    headers.push(
      ['RateLimit-Limit', String(closest.limit)],
      ['RateLimit-Remaining', String(closest.remaining)],
      ['RateLimit-Reset', String(closest.resetAfter)],
    );
  }
  return headers;
}

/** The refusing policy, else the one with the lowest remaining / limit (first on ties). */
export function closestToRefusing(decisions: readonly RateLimitDecision[]): RateLimitDecision {
  let closest = decisions[0];
  for (const decision of decisions) {
    const tighter =
      closest.allowed && !decision.allowed
        ? true
        : closest.allowed === decision.allowed && decision.remaining / decision.limit < closest.remaining / closest.limit;
    if (tighter) closest = decision;
  }
  return closest;
}

/** An RFC 8941 sf-string (policy names are visible ASCII, checked at start). */
function sfString(value: string): string {
  return `"${value.replace(/["\\]/g, '\\$&')}"`;
}
