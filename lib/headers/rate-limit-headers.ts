import { type Algorithm, ALGORITHMS } from '../algorithms/algorithm.types.js';
import { ALGORITHM_DESCRIPTORS } from '../algorithms/registry.js';
import { limitOf } from '../stores/decision.js';
import type { RateLimitDecision } from '../stores/rate-limit-store.interface.js';

/**
 * Header families the guard can send. `'dimensions'` adds, per unit its policies count
 * (`RateLimitPolicy.unit`), `x-ratelimit-limit-<unit>`, `x-ratelimit-remaining-<unit>` and
 * `x-ratelimit-reset-<unit>` (`'6m0s'`, until full again), as LLM API clients read them.
 */
export type HeaderFamily = 'ietf' | 'legacy' | 'x-ratelimit' | 'dimensions';

/**
 * What the headers need of a rule: its capacity and rate, a scaled window's limit, and its
 * algorithm (how its limit is said: slots in flight have no window).
 */
export type DescribedRule = { rps: number; burst: number; limit?: number; algorithm?: string };

/**
 * What the headers need of a policy: its name, its rule (each tier's, for a tiered one), and
 * whether a rule of it counts per calendar period (`Obligations.period`: a quota, whose window is
 * its request's period).
 */
export interface DescribedPolicy {
  name: string;
  rule: DescribedRule;
  tiers?: { byName: ReadonlyMap<string, { rule: DescribedRule }> } | undefined;
  owes?: { readonly period: boolean };
  /** What its cost counts (`RateLimitPolicy.unit`); absent: `'requests'`. */
  unit?: string;
}

/**
 * What a route's headers need that never changes, worked out once per route: the whole
 * `RateLimit-Policy` value and the start of each policy's `RateLimit` member, so a request only
 * fills in its numbers.
 */
export interface HeaderPlan {
  /** `RateLimit-Policy` (with every tiered policy at its default tier), `undefined` without `'ietf'`. */
  policy: string | undefined;
  /**
   * With `'ietf'` and a tiered policy: per policy, its `RateLimit-Policy` member, by tier for a
   * tiered one, so a request only picks its tiers' members. `undefined` on an untiered route.
   */
  tiered: Array<string | ReadonlyMap<string, string>> | undefined;
  /**
   * With `'ietf'` and a quota: per policy, its `RateLimit-Policy` member, or for a quota its name,
   * its member made from each request's rule (its `w` is the period the request falls in: a month is 28 to 31
   * days). `undefined` on a route without a quota.
   */
  periodic: Array<string | { quota: string; unit?: string }> | undefined;
  /** Per policy, `"<name>";r=`: its `RateLimit` member up to the remaining. */
  members: string[];
  xRateLimit: boolean;
  legacy: boolean;
  /** With `'dimensions'`: each unit's header names and the indexes of its policies. */
  dimensions: Dimension[] | undefined;
}

/** The `x-ratelimit-*-<unit>` headers of one unit, and the policies that count in it. */
interface Dimension {
  limit: string;
  remaining: string;
  reset: string;
  policies: number[];
}

/** The plan of a route's headers, `undefined` when no family is sent. */
export function headerPlan(
  families: readonly HeaderFamily[],
  policies: readonly DescribedPolicy[],
): HeaderPlan | undefined {
  if (families.length === 0 || policies.length === 0) return undefined;
  const ietf = families.includes('ietf');
  const tiered = ietf && policies.some(({ tiers }) => tiers !== undefined);
  const periodic = ietf && policies.some(isPeriodic);
  return {
    policy: ietf ? policies.map(({ name, rule, unit }) => policyMember(name, rule, unit)).join(', ') : undefined,
    tiered: tiered
      ? policies.map(({ name, rule, tiers, unit }) =>
          tiers === undefined
            ? policyMember(name, rule, unit)
            : new Map([...tiers.byName].map(([tier, { rule }]) => [tier, policyMember(name, rule, unit)])),
        )
      : undefined,
    periodic: periodic
      ? policies.map((policy) =>
          isPeriodic(policy)
            ? { quota: policy.name, unit: policy.unit }
            : policyMember(policy.name, policy.rule, policy.unit),
        )
      : undefined,
    members: policies.map(({ name }) => `${sfString(name)};r=`),
    xRateLimit: families.includes('x-ratelimit'),
    legacy: families.includes('legacy'),
    dimensions: families.includes('dimensions') ? dimensionsOf(policies) : undefined,
  };
}

/** Each unit the policies count in, with its header names and its policies, in the order first named. */
function dimensionsOf(policies: readonly DescribedPolicy[]): Dimension[] {
  const byUnit = new Map<string, Dimension>();
  policies.forEach(({ unit = 'requests' }, i) => {
    let dimension = byUnit.get(unit);
    if (dimension === undefined) {
      const [limit, remaining, reset] = ['limit', 'remaining', 'reset'].map((kind) => `x-ratelimit-${kind}-${unit}`);
      byUnit.set(unit, (dimension = { limit, remaining, reset, policies: [] }));
    }
    dimension.policies.push(i);
  });
  return [...byUnit.values()];
}

/**
 * The `x-ratelimit-*-<unit>` headers: per unit, the figures of its policy closest to refusing (see
 * `limiting`); reset as LLM APIs write it, the time until that bucket is full again (`'1m30s'`).
 */
function writeDimensions(
  dimensions: readonly Dimension[],
  decisions: readonly RateLimitDecision[],
  set: (name: string, value: string) => void,
): void {
  for (const { limit, remaining, reset, policies } of dimensions) {
    const closest = limiting(policies.map((i) => decisions[i]));
    set(limit, String(closest.limit));
    set(remaining, String(closest.remaining));
    set(reset, durationText(closest.fullAfter));
  }
}

/** Whole seconds as `'45s'`, `'6m0s'`, `'1h0m5s'`. */
export function durationText(seconds: number): string {
  const h = Math.floor(seconds / 3600);
  const m = Math.floor((seconds % 3600) / 60);
  const s = seconds % 60;
  if (h > 0) return `${h}h${m}m${s}s`;
  return m > 0 ? `${m}m${s}s` : `${s}s`;
}

/**
 * The rate-limit response headers for a request's decisions (one per policy of `plan`), as
 * `[name, value]` pairs.
 *
 * - `'ietf'`: `RateLimit-Policy: "name";q=<limit>;w=<window s>` and
 *   `RateLimit: "name";r=<remaining>;t=<s until more quota>`, one list member per policy.
 * - `'x-ratelimit'`: `X-RateLimit-Limit`, `-Remaining`, `-Reset` (Unix seconds when full again)
 *   for the policy `limiting` picks: the one a refusal names.
 * - `'legacy'`: `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset` (delta seconds) for
 *   that same policy.
 *
 * `Retry-After` is not among them: the guard adds it to a 429 whatever the families.
 *
 * @param nowMs the time decisions were made at, Unix ms (the store's clock), that `X-RateLimit-Reset` counts from
 */
export function rateLimitHeaders(
  plan: HeaderPlan,
  decisions: readonly RateLimitDecision[],
  nowMs: number,
): Array<[string, string]> {
  const headers: Array<[string, string]> = [];
  writeRateLimitHeaders(plan, decisions, nowMs, (name, value) => headers.push([name, value]));
  return headers;
}

/** `rateLimitHeaders`, each handed to `set` as it is made: the guard's way, with no list and no pair per header. */
export function writeRateLimitHeaders(
  plan: HeaderPlan,
  decisions: readonly RateLimitDecision[],
  nowMs: number,
  set: (name: string, value: string) => void,
  rules?: readonly DescribedRule[],
): void {
  if (plan.policy !== undefined) {
    let members = '';
    for (let i = 0; i < decisions.length; i++) {
      const d = decisions[i];
      members += `${i === 0 ? '' : ', '}${plan.members[i]}${d.remaining};t=${d.resetAfter}`;
    }
    set(
      'RateLimit-Policy',
      plan.periodic !== undefined && rules !== undefined
        ? periodicPolicy(plan.periodic, plan.tiered, decisions, rules)
        : plan.tiered === undefined
          ? plan.policy
          : tieredPolicy(plan.tiered, decisions, plan.policy),
    );
    set('RateLimit', members);
  }
  if (plan.dimensions !== undefined) writeDimensions(plan.dimensions, decisions, set);
  if (!plan.xRateLimit && !plan.legacy) return;
  const closest = limiting(decisions);
  if (plan.xRateLimit) {
    set('X-RateLimit-Limit', String(closest.limit));
    set('X-RateLimit-Remaining', String(closest.remaining));
    set('X-RateLimit-Reset', String(Math.ceil(nowMs / 1000) + closest.fullAfter));
  }
  if (plan.legacy) {
    set('RateLimit-Limit', String(closest.limit));
    set('RateLimit-Remaining', String(closest.remaining));
    set('RateLimit-Reset', String(closest.resetAfter));
  }
}

/**
 * The one decision that speaks for a request wherever one policy is named (the `X-RateLimit-*`
 * trio, the legacy trio, `Retry-After`, the 429's body), so they all name the same policy. Of the
 * refusing ones, the one that frees up last (a never-admittable one, `retryAfter` infinite,
 * first): the request passes only once it does. When none refuses, the one closest to refusing,
 * with the lowest remaining / limit (the first on ties).
 */
export function limiting(decisions: readonly RateLimitDecision[]): RateLimitDecision {
  let closest = decisions[0];
  for (const decision of decisions) {
    const tighter =
      closest.allowed !== decision.allowed
        ? !decision.allowed
        : decision.allowed
          ? decision.remaining / decision.limit < closest.remaining / closest.limit
          : decision.retryAfter > closest.retryAfter;
    if (tighter) closest = decision;
  }
  return closest;
}

/** `RateLimit-Policy` with each tiered policy's member for the tier it decided in (the default tier's when its store named none). */
function tieredPolicy(
  tiered: ReadonlyArray<string | ReadonlyMap<string, string>>,
  decisions: readonly RateLimitDecision[],
  byDefault: string,
): string {
  let value = '';
  for (let i = 0; i < tiered.length; i++) {
    const member = tiered[i];
    const tier = decisions[i].tier;
    const chosen = typeof member === 'string' ? member : tier === undefined ? undefined : member.get(tier);
    if (chosen === undefined) return byDefault;
    value += `${i === 0 ? '' : ', '}${chosen}`;
  }
  return value;
}

/**
 * A policy's `RateLimit-Policy` member: `"name";q=<limit>;w=<window s>`, with the draft's quota
 * unit for a unit other than requests (`;qu="tokens"`), and for slots in flight (`concurrency`)
 * that unit in place of a window: `"name";q=<limit>;qu="concurrent-requests"`.
 */
function policyMember(name: string, rule: DescribedRule, unit = 'requests'): string {
  if (saidAs(rule) === 'lease') return `${sfString(name)};q=${limitOf(rule)};qu="concurrent-requests"`;
  const member = `${sfString(name)};q=${limitOf(rule)};w=${windowSeconds(rule)}`;
  return unit === 'requests' ? member : `${member};qu=${sfString(unit)}`;
}

/** How a rule's limit is said, when it is not a rate (see `AlgorithmDescriptor.saidAs`). */
function saidAs({ algorithm }: DescribedRule): 'lease' | 'period' | undefined {
  return algorithm !== undefined && ALGORITHMS.includes(algorithm as Algorithm)
    ? ALGORITHM_DESCRIPTORS[algorithm as Algorithm].saidAs
    : undefined;
}

/** Whether a policy is a quota (any tier), whose member's window is its request's period. */
function isPeriodic({ owes }: DescribedPolicy): boolean {
  return owes?.period === true;
}

/**
 * `RateLimit-Policy` on a route with a quota: each quota's member from its request's rule (its
 * period's length as `w`), the others as planned (a tiered one's for its tier).
 */
function periodicPolicy(
  periodic: ReadonlyArray<string | { quota: string; unit?: string }>,
  tiered: ReadonlyArray<string | ReadonlyMap<string, string>> | undefined,
  decisions: readonly RateLimitDecision[],
  rules: readonly DescribedRule[],
): string {
  let value = '';
  for (let i = 0; i < periodic.length; i++) {
    const planned = periodic[i];
    const byTier = tiered?.[i];
    const tier = decisions[i].tier;
    const member =
      typeof planned === 'object'
        ? policyMember(planned.quota, rules[i], planned.unit)
        : typeof byTier === 'object' && tier !== undefined
          ? (byTier.get(tier) ?? planned)
          : planned;
    value += `${i === 0 ? '' : ', '}${member}`;
  }
  return value;
}

/**
 * A policy's window in whole seconds (`w` in `RateLimit-Policy`): `burst / rps`, rounded up, at
 * least 1. A window given as `limit` per `window` comes back as that window: the division's last
 * bit of rounding (3600.0000000000005) is not a second more.
 */
export function windowSeconds({ rps, burst }: { rps: number; burst: number }): number {
  return Math.max(1, Math.ceil((burst / rps) * (1 - 1e-12)));
}

/** An RFC 8941 sf-string (policy names are visible ASCII, checked at start). */
function sfString(value: string): string {
  return `"${value.replace(/["\\]/g, '\\$&')}"`;
}
