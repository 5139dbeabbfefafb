import type { Rule } from '../algorithms/algorithm.types.js';
import { keyOf, keyPrefix } from '../keys/bucket-key.js';
import type { CostSource, KeySource, ResolvedPolicy } from '../policy/policy.types.js';
import type { RateLimitRequest } from '../stores/rate-limit-store.interface.js';

/**
 * A policy as it applies to requests: validated, its key sources settled (the policy's own or
 * the module's) and the start of its bucket keys worked out once. The guard's steps receive it,
 * so a subclass that overrides one (say, `resolveIdentity`) reads the policy from it.
 */
export interface RoutePolicy {
  /** Its name, in headers and in its bucket keys. */
  readonly name: string;
  /** The rule its buckets follow. */
  readonly rule: Rule;
  readonly cost: CostSource;
  /** Cost used when a header, query or function cost is unusable. */
  readonly defaultCost: number;
  /** Identity sources, tried in order until one yields. */
  readonly keys: readonly KeySource[];
  /** What its bucket keys start with (see `keyPrefix`). */
  readonly keyPrefix: string;
}

/** The module options a policy's route form depends on. */
export interface RouteDefaults {
  /** Prefix of every store key. */
  prefix: string;
  /** Key sources of a policy that names none. */
  key: readonly KeySource[];
}

/** A validated policy as it applies to requests under the module's `prefix` and `key`. */
export function routePolicy({ name, rule, cost, defaultCost, key }: ResolvedPolicy, defaults: RouteDefaults): RoutePolicy {
  return { name, rule, cost, defaultCost, keys: key ?? defaults.key, keyPrefix: keyPrefix(defaults.prefix, name, rule.algorithm) };
}

/**
 * What a store decides for one policy of one request: the bucket of `identity` under the policy,
 * and the tokens to take. The guard and `RateLimiterService` both build their requests with it, so
 * code reaches the guard's bucket by the same identity.
 */
export function storeRequest(policy: RoutePolicy, identity: string, cost: number): RateLimitRequest {
  return { key: keyOf(policy.keyPrefix, identity), policy: policy.name, rule: policy.rule, cost };
}
