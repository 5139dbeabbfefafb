import type { KeySource, RateLimitPolicy, SkipIf } from './policy/policy.types.js';
import type { HeaderFamily } from './headers/rate-limit-headers.js';
import type { RateLimitStore } from './stores/rate-limit-store.interface.js';
import type { RedisOption } from './stores/store-owner.js';

/** What happens when the store fails or takes longer than `timeout`. */
export type FailMode = 'open' | 'closed' | 'local';

/** A kind of Nest context (`context.getType()`) the module can limit. */
export type ContextType = 'http' | 'graphql' | 'ws' | 'rpc';

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
}
