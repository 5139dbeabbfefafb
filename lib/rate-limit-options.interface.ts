import type { ExecutionContext } from '@nestjs/common';
import type { KeySource, RateLimitPolicy, SkipIf } from './policy/policy.types.js';
import type { HeaderFamily } from './headers/rate-limit-headers.js';
import type { RateLimitDecision, RateLimitStore } from './stores/rate-limit-store.interface.js';
import type { RedisOption } from './stores/store-owner.js';

/** What happens when the store fails or takes longer than `timeout`. */
export type FailMode = 'open' | 'closed' | 'local';

/** The body of an HTTP refusal: Nest's own form, or an RFC 9457 problem document. */
export type ErrorFormat = 'nest' | 'problem';

/**
 * Makes the error a refused request ends with, in place of the module's: `decision` is the
 * policy that frees up last (the one the headers describe), `context` the request's (its
 * `getType()` says which kind: return an error that kind answers with).
 */
export type ExceptionFactory = (decision: RateLimitDecision, context: ExecutionContext) => Error;

/** A kind of Nest context (`context.getType()`) the module can limit. */
export type ContextType = 'http' | 'graphql' | 'ws' | 'rpc';

/** How hot-key shares behave (module option `shares`). */
export interface SharesOptions {
  /** Decisions a second on one bucket, in this instance, past which it takes shares of it. Default 50. */
  after?: number;
  /**
   * Longest a share is held (seconds, or `'500ms'`, `'2s'`): then what is left of it goes back to
   * the store. Also how long a share keeps deciding while the store is unreachable. 10 ms to 60 s;
   * default `'1s'`.
   */
  hold?: number | string;
}

/**
 * Options of `RateLimitModule.forRoot()` (every one optional).
 *
 * @example RateLimitModule.forRoot({ redis: process.env.REDIS_URL, policies: [{ rps: 20, burst: 100 }] })
 */
export interface RateLimitModuleOptions {
  /** The store. Default: a `MemoryStore` (one per process). */
  store?: RateLimitStore;
  /**
   * Shortcut for a `RedisStore`: an ioredis `Redis` or `Cluster`, a `redis://` URL, or ioredis
   * options. A client the module creates is closed on shutdown; one passed in is not.
   */
  redis?: RedisOption;
  /** Prefix of every store key. Default `'rl:'`. */
  prefix?: string;
  /** Policies applied to every route not skipped; one bucket shared across routes. */
  policies?: RateLimitPolicy[];
  /** Key source or fallback chain for policies that name none. Default `['user', 'api-key', 'ip']`. */
  key?: KeySource | KeySource[];
  /** Header that carries the API key. Default `'x-api-key'`. */
  apiKeyHeader?: string;
  /**
   * IPv6 clients are keyed by this many leading bits of their address, 32 to 64: one subscriber
   * usually holds a whole /64, often a /56 or /48. Default `64`.
   */
  ipv6Subnet?: number;
  /** Header families to send, or `false`. Default `['ietf', 'x-ratelimit']`. */
  headers?: HeaderFamily[] | false;
  /** On store failure or timeout. Default `'open'`. */
  failMode?: FailMode;
  /** Longest a store decision may take, milliseconds. Default `100`. */
  timeout?: number;
  /** `'shadow'` decides, sends headers and never blocks. Default `'enforce'`. */
  mode?: 'enforce' | 'shadow';
  /**
   * Register the limiter globally (as `runAs` says). Default `true`; with `false`, use
   * `@UseGuards(RateLimitGuard)` or `@UseInterceptors(RateLimitInterceptor)` where wanted.
   */
  guard?: boolean;
  /**
   * How the limiter is registered globally: `'guard'` (`RateLimitGuard`, before the controller's
   * own guards) or `'interceptor'` (`RateLimitInterceptor`, after every guard, so `key: 'user'`
   * sees the user an auth guard sets). Default `'guard'`.
   */
  runAs?: 'guard' | 'interceptor';
  /**
   * The kinds of context limited: HTTP routes, GraphQL operations, gateway messages,
   * microservice messages. Any other passes untouched. Default `['http', 'graphql', 'ws', 'rpc']`.
   */
  contexts?: ContextType[];
  /** `true` lets a request pass every policy uncharged (an allow list). Called once per request. */
  skipIf?: SkipIf;
  /**
   * Spreads refused clients' retries: `Retry-After` (header and body) becomes
   * `ceil(wait * (1 + retryAfterJitter * u))`, `u` in [0, 1) fixed per identity. 0 to 1. Default 0.
   */
  retryAfterJitter?: number;
  /**
   * Record OpenTelemetry metrics (`ratelimit.requests`, `ratelimit.store.duration`, ...) through
   * `@opentelemetry/api`, when the app has it and registered an SDK before starting; without
   * either, nothing is recorded whatever this says. `false` records nothing even then. Default `true`.
   */
  metrics?: boolean;
  /**
   * The body of an HTTP 429 and 503: `'nest'` (`{ statusCode, error, message, policy, retryAfter }`)
   * or `'problem'`, an RFC 9457 document with the IETF RateLimit draft's problem types, sent as
   * `application/problem+json` (see `RateLimitProblem`). GraphQL, gateways and microservices keep
   * their own forms. Default `'nest'`.
   */
  errorFormat?: ErrorFormat;
  /**
   * Makes the error a refused request ends with, in every context, in place of the module's; the
   * headers (`RateLimit*`, `X-RateLimit-*`, `Retry-After`) are set before it is called and stay.
   * Not called for a 503 (a store that cannot decide is no refusal).
   *
   * @example exceptionFactory: (decision) => new HttpException({ code: 'SLOW_DOWN', retryIn: decision.retryAfter }, 429)
   */
  exceptionFactory?: ExceptionFactory;
  /**
   * Hot-key shares: an instance whose decisions on one bucket pass `after` a second takes a share
   * of it from the store (some tokens, or some of a window's count, charged like any decision) and
   * decides that key's requests in its own process, with no store call, until the share is spent
   * or `hold` ends; what is left goes back. Never more than the limit across instances (every
   * admission comes out of what the store gave); a share-holder's headers show the store's figure
   * when it took the share, less what the share has used since. For `token_bucket`, `gcra`,
   * `fixed_window`, `sliding_window_counter` and `quota` policies; a policy with `shares: false`,
   * a `blockFor`, or a request any of whose policies is not covered is decided by the store as
   * without shares. `true`: `{ after: 50, hold: '1s' }`. Default `false`.
   *
   * @example RateLimitModule.forRoot({ redis: process.env.REDIS_URL, shares: { after: 100, hold: '500ms' } })
   */
  shares?: boolean | SharesOptions;
}
