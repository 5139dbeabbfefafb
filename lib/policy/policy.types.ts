import type { ExecutionContext } from '@nestjs/common';
import type { Algorithm, Rule } from '../algorithms/algorithm.types.js';

/**
 * A request as the key, cost and `skipIf` sources read it: an Express or Fastify request fits as
 * it is, and a context's seam hands one over for every kind of request it limits (GraphQL: the
 * operation's HTTP request; a gateway: the connection; a microservice message: none of them,
 * `headers` is `{}`).
 */
export interface LimitedRequest {
  ip?: string;
  headers: Record<string, string | string[] | undefined>;
  user?: { id?: unknown; sub?: unknown } | null;
  /** Parsed query parameters (`'query:<name>'` costs). */
  query?: Record<string, unknown>;
  /** The parsed body where the transport has one (an HTTP request's, as the app's body parser left it), for a cost function's estimate. */
  body?: unknown;
}

/**
 * Where a policy takes the client's identity from.
 *
 * - `'ip'`: the framework's `req.ip` (the app's trust-proxy setting decides), IPv4-mapped IPv6
 *   folded to IPv4, IPv6 grouped by /64. Always yields.
 * - `'user'`: `req.user.id ?? req.user.sub`, as set by the app's own auth guard.
 * - `'api-key'`: the header named by the module's `apiKeyHeader` (default `x-api-key`).
 * - `'header:<name>'`: any request header.
 * - a function of the execution context returning a string, or `undefined` to pass; or a promise
 *   of either, awaited for at most the module's `timeout` (milliseconds). Past it the module's
 *   `failMode` answers: `'open'` lets the request through uncharged, `'closed'` refuses it as
 *   unavailable (503 on HTTP), `'local'` goes on to the next source (the IP when none is left).
 *   A function that throws, or whose promise rejects, fails the request.
 *
 * @example key: ['user', 'api-key', 'ip']   // the first source that yields wins
 * @example key: async (ctx) => (await tenants.byHost(ctx.switchToHttp().getRequest().hostname))?.id
 */
export type KeySource =
  | 'ip'
  | 'user'
  | 'api-key'
  | `header:${string}`
  | ((context: ExecutionContext) => string | undefined | Promise<string | undefined>);

/**
 * Tokens one request takes: a number, a request header or query parameter (parsed as a decimal
 * number; `defaultCost` when absent, not numeric, not finite or not positive), or a function of
 * the execution context and the request (sync or async). A policy that settles (see
 * `RateLimitPolicy.settle`) may take 0 up front: its cost is then its estimate of the real one.
 *
 * @example cost: 'header:x-request-weight'
 * @example cost: (ctx, request) => estimateTokens(request.body)
 */
export type CostSource =
  | number
  | `header:${string}`
  | `query:${string}`
  | ((context: ExecutionContext, request: LimitedRequest) => number | Promise<number>);

/**
 * A request's real cost under a policy that settles, from what its handler returned (for a
 * stream, its last value): tokens, charged (or given back) as `actual - already charged` when the
 * request ends. Called once, only when the handler returned something; a value that is not a
 * finite number >= 0 (or a function that throws or rejects) leaves the charge as it stands.
 *
 * @example settle: (result: ChatCompletion) => result.usage.total_tokens
 */
export type SettleSource = (result: any, context: ExecutionContext) => number | Promise<number>;

/**
 * Where a tiered policy reads a request's tier: `'user:<field>'` is `req.user[field]` (as the
 * app's auth set it, say a JWT claim), or a function of the execution context (sync or async: a
 * promise is awaited for at most the module's `timeout`, milliseconds). A value that names no
 * tier, `undefined`, a function that throws or rejects, or a promise past `timeout`: the policy's
 * `defaultTier`.
 *
 * @example tier: 'user:plan'
 * @example tier: async (ctx) => (await plans.of(ctx.switchToHttp().getRequest().user))?.tier
 */
export type TierSource =
  `user:${string}` | ((context: ExecutionContext) => string | undefined | Promise<string | undefined>);

/** The limit fields one tier sets, as a policy says them. */
export type TierLimits = Pick<
  RateLimitPolicy,
  'algorithm' | 'rps' | 'tokensPerSecond' | 'burst' | 'limit' | 'window' | 'anchor' | 'lease' | 'period' | 'timeZone'
>;

/**
 * A quota's own period start for a request's identity (a customer's billing date): a `Date` or
 * Unix ms, or a promise of either (awaited for at most the module's `timeout`, milliseconds);
 * `undefined`, an invalid date, a function that throws or rejects, or a promise past `timeout`:
 * the calendar's own start (the 1st of the month). Called once per request. In
 * `RateLimiterService` (no request there) it is called with neither argument.
 *
 * @example anchor: (ctx, request) => billingDates.get(String(request.user?.id))
 */
export type QuotaAnchor = (
  context: ExecutionContext,
  request: LimitedRequest,
) => Date | number | undefined | Promise<Date | number | undefined>;

/**
 * A block (`RateLimitPolicy.blockFor`) with what its end does to the bucket.
 *
 * @example { duration: '15m', then: 'reset' } // 15 minutes refused, then the whole limit again
 */
export interface BlockFor {
  /** How long a block lasts: seconds, or a string such as `'30s'`, `'15m'`, `'1h'` (as the plain form). */
  duration: number | string;
  /**
   * What the bucket is when the block ends: `'keep'`, as the charges and refusals before the block
   * left it (the plain form's behaviour); `'reset'`, full again, its count started from nothing
   * (as `@nestjs/throttler` counts after a `blockDuration`). Default `'keep'`.
   */
  then?: 'keep' | 'reset';
}

/**
 * One rate limit, as written in `@RateLimit(...)` or the module's `policies`.
 * Say it as `rps` + `burst` or as `limit` per `window`, not both.
 *
 * @example { algorithm: 'token_bucket', rps: 10, burst: 50 }        // 10 tokens/s, bucket of 50
 * @example { limit: 1000, window: '1h', key: 'ip', name: 'per-ip' }   // rps = 1000/3600, burst = 1000
 */
export interface RateLimitPolicy {
  /** Default `'token_bucket'`. */
  algorithm?: Algorithm;
  /** Sustained rate, tokens per second (may be fractional). */
  rps?: number;
  /** Alias of `rps`. */
  tokensPerSecond?: number;
  /** Capacity in tokens, a whole number >= 1. Default: `rps` rounded up (at least 1). */
  burst?: number;
  /** Requests (tokens) per `window`; means `burst = limit`, `rps = limit / window`. */
  limit?: number;
  /** Seconds, or a string such as `'10s'`, `'1m'`, `'1h'`, `'1d'`. */
  window?: number | string;
  /**
   * `fixed_window` only: where its windows start. `'clock'` (default): on the clock's grid,
   * `floor(now / window)`, the same for every client. `'first-request'`: at a client's first request
   * while no window of its bucket is live, lasting `window`; the first request after it ends starts
   * the next (as `@nestjs/throttler`'s Redis storages, express-rate-limit and rate-limiter-flexible
   * count). Either way headers count `t` and `X-RateLimit-Reset` to the window's end. On a tiered
   * policy, each tier says its own. Changing it starts fresh buckets.
   *
   * `quota` only: a function (see `QuotaAnchor`) giving an identity's own period start, such as
   * its billing date: its months then start on that day (on the last day of a shorter month).
   * @example { algorithm: 'fixed_window', limit: 100, window: '1m', anchor: 'first-request' }
   */
  anchor?: 'clock' | 'first-request' | QuotaAnchor;
  /**
   * `concurrency` only, and required there: the longest a request holds its slot, seconds or a
   * string such as `'30s'`, `'5m'`. A slot is given back when its request ends, however it ends;
   * one held longer (its instance died mid-request) is reclaimed then, so none leaks.
   *
   * @example { name: 'exports', algorithm: 'concurrency', limit: 2, key: 'api-key', lease: '5m' }
   */
  lease?: number | string;
  /**
   * `quota` only, and required there: the calendar period `limit` is counted per, in `timeZone`:
   * `'day'` (from midnight), `'week'` (ISO: from Monday), `'month'` (from the 1st), `'year'`; or
   * from each identity's own `anchor`.
   *
   * @example { name: 'monthly', algorithm: 'quota', limit: 10_000, period: 'month', timeZone: 'Europe/Berlin' }
   */
  period?: 'day' | 'week' | 'month' | 'year';
  /** `quota` only: the IANA time zone its periods are in, such as `'Europe/Berlin'`. Default `'UTC'`. */
  timeZone?: string;
  /** Tokens one request takes. Default 1. */
  cost?: CostSource;
  /** Cost used when a header/query cost is unusable. Default 1. */
  defaultCost?: number;
  /** Identity source or fallback chain. Default: the module's `key`. */
  key?: KeySource | KeySource[];
  /**
   * Whose bucket a request of a route takes, for a policy of the module's `policies` or on a
   * controller class: `'client'` (default), one bucket per client, shared by every route the
   * policy covers; `'route'`, one per client per route (the bucket key carries the route,
   * `Controller.handler`), as `@nestjs/throttler` keys every limit. A route is a handler in every
   * context: an HTTP route, a GraphQL resolver's field (charged once per operation, as a module or
   * class policy always is), a gateway's message, a microservice's pattern. On a handler's own
   * policy, `'route'` changes something only for a name several handlers share (each then has
   * its own buckets). `RateLimiterService` has no route: it refuses `'route'`.
   *
   * @example RateLimitModule.forRoot({ policies: [{ limit: 100, window: '1m', scope: 'route' }] })
   */
  scope?: 'client' | 'route';
  /**
   * Name used in headers and in the bucket key. Default: `Controller.handler` on a handler,
   * `Controller` on a class (one bucket shared by its routes), `'default'` in the module options.
   */
  name?: string;
  /**
   * Limits per tier name, in place of the policy's own (`algorithm`, `rps`/`burst` or
   * `limit`/`window`): each tier has its own buckets. Needs `tier` and `defaultTier`.
   *
   * @example tiers: { free: { rps: 10, burst: 20 }, enterprise: { algorithm: 'sliding_window_counter', limit: 100_000, window: '1h' } }
   */
  tiers?: Record<string, TierLimits>;
  /** Which tier of `tiers` a request is limited by (see `TierSource`). */
  tier?: TierSource;
  /** The tier of a request whose `tier` names none of `tiers`. */
  defaultTier?: string;
  /**
   * After this policy refuses a request, the client stays refused by it for this long, whatever
   * refills meanwhile (`Retry-After` says when the block ends): seconds, or a string such as
   * `'15m'`, `'1h'`. Retrying during a block does not lengthen it. Default: no block.
   *
   * When the block ends, the bucket is as the charges and refusals before it left it; as
   * `{ duration, then: 'reset' }` the bucket starts full again instead (see `BlockFor`).
   *
   * @example { name: 'login', limit: 5, window: '15m', key: 'ip', count: 'failures', blockFor: '1h' }
   * @example { name: 'login', limit: 5, window: '15m', key: 'ip', blockFor: { duration: '1h', then: 'reset' } }
   */
  blockFor?: number | string | BlockFor;
  /**
   * `'failures'`: the cost is taken on entry and given back when the request succeeds (HTTP status
   * < 400; elsewhere, its handler ends without an error), so only failures stay counted (failed
   * logins). Parallel failures never pass the limit: each is charged before it runs. Default `'all'`.
   */
  count?: 'all' | 'failures';
  /** `true` lets the request pass this policy uncharged (an allow list). Called once per request. */
  skipIf?: SkipIf;
  /**
   * The module steers this policy's rate from the latency of the requests it admits: its `rps` is
   * scaled down (not below `min`, a factor) while their p99 is above `latency` (milliseconds), and
   * back up to the full rate while it is below. See `RateLimiterService.setScale`.
   */
  adaptive?: AdaptiveRate;
  /**
   * The request's real cost, known when it ends (see `SettleSource`): `cost` is then only what is
   * taken up front (an estimate; may be 0), and the difference is taken (past the limit, into
   * debt: the next requests wait until time pays it back) or given back when the request ends.
   * A handler can count its cost itself with `@RateLimitMeter()` instead (a stream). Not for
   * `concurrency`.
   * @example { name: 'tpm', limit: 40_000, window: '1m', key: 'api-key', unit: 'tokens', cost: 500, settle: (result) => result.usage.total_tokens }
   */
  settle?: SettleSource;
  /**
   * How far past empty, in cost units, a settle may take this policy's buckets: the debt the next
   * requests pay back. Giving it (without `settle`) makes a policy settle too, from a meter.
   * Default (for a policy that settles): its `burst` (or `limit`).
   */
  maxDebt?: number;
  /**
   * With a meter (`@RateLimitMeter()`): also settle what the handler has counted so far at this
   * interval, seconds or a string such as `'10s'`, so a long stream counts against the time it
   * runs in. Makes a policy settle. Default: only when the request ends.
   */
  settleEvery?: number | string;
  /**
   * What the cost counts: `'requests'` (default), `'tokens'`, or another word (letters, digits, `-`).
   * Written as `qu` in `RateLimit-Policy`, and the suffix of the per-dimension headers
   * (`x-ratelimit-remaining-tokens`; module option `headers: [..., 'dimensions']`).
   */
  unit?: string;
  /**
   * `false`: no instance takes a share of this policy's buckets to decide from in its own process,
   * even when the module's `shares` option is on; every request of it is decided by the store.
   * Default: shares as the module says.
   * @example { name: 'billing', limit: 100, window: '1m', shares: false }
   */
  shares?: false;
}

/**
 * Whether a request passes a policy (or, as the module's `skipIf`, every policy) uncharged.
 * `request` is what the key sources read, in every context (HTTP, GraphQL, gateways,
 * microservices): its `ip`, `headers` (`{}` where the transport has none) and `user`.
 *
 * @example skipIf: (ctx, request) => request.ip === '10.0.0.1'
 * @example skipIf: async (ctx, request) => allowList.has(request.ip)
 */
export type SkipIf = (context: ExecutionContext, request: LimitedRequest) => boolean | Promise<boolean>;

/** A target latency and the least factor of `rps` the module may scale a policy down to. */
export interface AdaptiveRate {
  /** Target p99 latency of the admitted requests, milliseconds. */
  latency: number;
  /** Lowest factor of `rps`, 0 < min <= 1. Default 0.1. */
  min?: number;
}

/** A policy after validation: everything defaulted, its rule in one form. */
export interface ResolvedPolicy {
  name: string;
  rule: Rule;
  cost: CostSource;
  defaultCost: number;
  /** `undefined`: use the module's `key`. */
  key: readonly KeySource[] | undefined;
  /** Whether its buckets are per route (`'route'`) or shared by the routes it covers. */
  scope: 'client' | 'route';
  /** With `tiers`: each tier's rule (`rule` is the default tier's). */
  tiers?: ResolvedTiers;
  count: 'all' | 'failures';
  skipIf: SkipIf | undefined;
  adaptive: Required<AdaptiveRate> | undefined;
  /** A quota's anchor (see `QuotaAnchor`); `undefined` for every other policy, and a quota without one. */
  quotaAnchor?: QuotaAnchor;
  /** How it settles a request's real cost; `undefined` for a policy that does not. */
  settles?: ResolvedSettle;
  /** What its cost counts (`'requests'` by default). */
  unit: string;
  /** `true` when it said `shares: false` (see `RateLimitPolicy.shares`); absent otherwise. */
  unshared?: true;
}

/** How a policy settles (see `RateLimitPolicy.settle`): every rule of it carries its `debt`. */
export interface ResolvedSettle {
  /** The real cost from the handler's result; `undefined`: from a meter only. */
  result: SettleSource | undefined;
  /** Interval settles of a meter, ms; `undefined`: at the end only. */
  everyMs: number | undefined;
}

/** A tiered policy's tiers after validation. */
export interface ResolvedTiers {
  rules: ReadonlyMap<string, Rule>;
  source: TierSource;
  defaultTier: string;
}
