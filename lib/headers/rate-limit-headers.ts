import type { HeaderFamily } from '../rate-limit-options.interface.js';
import type { RateLimitDecision } from '../stores/rate-limit-store.interface.js';

/** A policy's decision with the window it is described by (`w` in `RateLimit-Policy`). */
export interface DescribedDecision {
  decision: RateLimitDecision;
  /** The policy's window in whole seconds. */
  windowSeconds: number;
}

/**
 * The rate-limit response headers for a request's decisions, as `[name, value]` pairs.
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
export function rateLimitHeaders(
  families: readonly HeaderFamily[],
  described: readonly DescribedDecision[],
  nowMs: number,
): Array<[string, string]> {
  const headers: Array<[string, string]> = [];
  if (families.length === 0 || described.length === 0) return headers;
  if (families.includes('ietf')) {
    headers.push(
      ['RateLimit-Policy', described.map(({ decision: d, windowSeconds }) => `${sfString(d.policy)};q=${d.limit};w=${windowSeconds}`).join(', ')],
      ['RateLimit', described.map(({ decision: d }) => `${sfString(d.policy)};r=${d.remaining};t=${d.resetAfter}`).join(', ')],
    );
  }
  const closest = closestToRefusing(described.map(({ decision }) => decision));
  if (families.includes('x-ratelimit')) {
    headers.push(
      ['X-RateLimit-Limit', String(closest.limit)],
      ['X-RateLimit-Remaining', String(closest.remaining)],
      ['X-RateLimit-Reset', String(Math.ceil(nowMs / 1000) + closest.fullAfter)],
    );
  }
  if (families.includes('legacy')) {
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
