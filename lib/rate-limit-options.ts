import type { HeaderFamily } from './headers/rate-limit-headers.js';
import { DEFAULT_IPV6_SUBNET } from './keys/ip.js';
import type { KeySource, ResolvedPolicy, SkipIf } from './policy/policy.types.js';
import {
  HEADER_NAME_CHARS,
  InvalidPolicyError,
  isHeaderName,
  MAX_NAME_LENGTH,
  parseWindow,
  resolveKeySources,
  resolvePolicy,
} from './policy/resolve-policy.js';
import {
  expectedSharesOption,
  invalidOption,
  invalidOptions,
  invalidOptionsObject,
  withoutPassword,
} from './rate-limit.messages.js';
import type {
  ContextType,
  ErrorFormat,
  ExceptionFactory,
  FailMode,
  RateLimitModuleOptions,
} from './rate-limit-options.interface.js';
import type { RateLimitStore } from './stores/rate-limit-store.interface.js';
import { isRedisClient } from './stores/store-owner.js';
import { MAX_TIMER_MS } from './utils/wake-queue.js';

/**
 * The module's options after validation, with every default filled in: plain values only. The
 * store they choose is opened by `StoreOwner`.
 */
export interface ResolvedOptions {
  prefix: string;
  policies: readonly ResolvedPolicy[];
  key: readonly KeySource[];
  apiKeyHeader: string;
  ipv6Subnet: number;
  headers: readonly HeaderFamily[];
  failMode: FailMode;
  timeout: number;
  mode: 'enforce' | 'shadow';
  guard: boolean;
  runAs: 'guard' | 'interceptor';
  contexts: readonly ContextType[];
  skipIf: SkipIf | undefined;
  retryAfterJitter: number;
  metrics: boolean;
  errorFormat: ErrorFormat;
  exceptionFactory: ExceptionFactory | undefined;
  /** Hot-key shares (see `RateLimitModuleOptions.shares`); `undefined`: off. */
  shares: ResolvedShares | undefined;
}

/** The module's `shares` option with its defaults: decisions a second past which a key is hot, and the longest hold, ms. */
export interface ResolvedShares {
  after: number;
  holdMs: number;
}

/** What `shares: true` means. */
const DEFAULT_SHARES: ResolvedShares = { after: 50, holdMs: 1000 };
/** Bounds of a share's `hold`, ms. */
const HOLD_MS = { least: 10, most: 60_000 };

const HEADER_FAMILIES: readonly HeaderFamily[] = ['ietf', 'legacy', 'x-ratelimit', 'dimensions'];
const FAIL_MODES: readonly FailMode[] = ['open', 'closed', 'local'];
const CONTEXT_TYPES: readonly ContextType[] = ['http', 'graphql', 'ws', 'rpc'];
/** Every option there is: any other key is a typo, refused rather than ignored. */
const OPTIONS = new Set<string>([
  'store',
  'redis',
  'prefix',
  'policies',
  'key',
  'apiKeyHeader',
  'ipv6Subnet',
  'headers',
  'failMode',
  'timeout',
  'mode',
  'guard',
  'runAs',
  'contexts',
  'skipIf',
  'retryAfterJitter',
  'metrics',
  'errorFormat',
  'exceptionFactory',
  'shares',
]);
/** Longest `prefix`, characters: it is in every bucket key, as the policy name is (see `MAX_NAME_LENGTH`). */
const MAX_PREFIX_LENGTH = MAX_NAME_LENGTH;

/**
 * Validates the module's options (the store they choose included) and fills in defaults.
 *
 * @throws Error naming the option (or the policy and field) that does not hold
 */
export function resolveOptions(options: RateLimitModuleOptions | undefined): ResolvedOptions {
  // forRoot() gives {}; undefined comes from a forRootAsync factory that returns nothing
  if (typeof options !== 'object' || options === null || Array.isArray(options)) {
    throw new Error(invalidOptionsObject(options));
  }
  const fail = (option: string, value: unknown, expected: string): never => {
    throw new Error(invalidOption(option, value, expected));
  };
  for (const option of Object.keys(options)) {
    if (!OPTIONS.has(option)) {
      fail(
        option,
        (options as Record<string, unknown>)[option],
        `is not an option (the options are ${[...OPTIONS].join(', ')})`,
      );
    }
  }
  const {
    prefix = 'rl:',
    key = ['user', 'api-key', 'ip'],
    apiKeyHeader = 'x-api-key',
    ipv6Subnet = DEFAULT_IPV6_SUBNET,
    headers = ['ietf', 'x-ratelimit'],
    failMode = 'open',
    timeout = 100,
    mode = 'enforce',
    guard = true,
    runAs = 'guard',
    contexts = CONTEXT_TYPES,
    policies = [],
  } = options;

  if (typeof prefix !== 'string' || /[{}]/.test(prefix) || prefix.length > MAX_PREFIX_LENGTH) {
    fail('prefix', prefix, `must be a string of at most ${MAX_PREFIX_LENGTH} characters, without braces`);
  }
  if (!isHeaderName(apiKeyHeader)) {
    fail('apiKeyHeader', apiKeyHeader, `must be an HTTP header name such as 'x-api-key': ${HEADER_NAME_CHARS}`);
  }
  if (!Number.isInteger(ipv6Subnet) || ipv6Subnet < 32 || ipv6Subnet > 64) {
    fail('ipv6Subnet', ipv6Subnet, 'must be a whole number of bits from 32 to 64');
  }
  if (headers !== false && (!Array.isArray(headers) || !headers.every((h) => HEADER_FAMILIES.includes(h)))) {
    fail('headers', headers, `must be false or a list of 'ietf', 'legacy', 'x-ratelimit', 'dimensions'`);
  }
  if (!FAIL_MODES.includes(failMode)) fail('failMode', failMode, `must be 'open', 'closed' or 'local'`);
  if (typeof timeout !== 'number' || !(timeout > 0 && timeout <= MAX_TIMER_MS)) {
    fail(
      'timeout',
      timeout,
      `must be a positive number of milliseconds, at most ${MAX_TIMER_MS} (the longest a timer can wait)`,
    );
  }
  if (mode !== 'enforce' && mode !== 'shadow') fail('mode', mode, `must be 'enforce' or 'shadow'`);
  if (typeof guard !== 'boolean') fail('guard', guard, 'must be true or false');
  if (runAs !== 'guard' && runAs !== 'interceptor') fail('runAs', runAs, `must be 'guard' or 'interceptor'`);
  if (
    !Array.isArray(contexts) ||
    !contexts.every((type: unknown) => (CONTEXT_TYPES as readonly unknown[]).includes(type))
  ) {
    fail('contexts', contexts, `must be a list of 'http', 'graphql', 'ws', 'rpc'`);
  }
  if (!Array.isArray(policies)) fail('policies', policies, 'must be a list of policies');
  if (options.store !== undefined && options.redis !== undefined) {
    throw new Error(
      invalidOptions('"store" and "redis" are both given; give one ("redis" is a shortcut that makes a RedisStore)'),
    );
  }
  const { store: given, redis } = options;
  if (given !== undefined && !isStore(given))
    fail('store', given, 'must implement RateLimitStore (consume, peek, reset)');
  if (typeof redis === 'string' && !(/^rediss?:\/\//i.test(redis) && URL.canParse(redis))) {
    fail('redis', withoutPassword(redis), `must be a redis:// or rediss:// URL such as 'redis://localhost:6379'`);
  }
  if (redis !== undefined && typeof redis !== 'string' && !isRedisClient(redis) && !isPlainObject(redis)) {
    fail(
      'redis',
      redis,
      'must be a Redis client (ioredis, iovalkey, node-redis v5), a redis:// URL or ioredis options',
    );
  }

  const resolvedPolicies = policies.map((policy, i) =>
    resolvePolicy(policy, `RateLimitModule policies[${i}]`, 'default'),
  );
  const first = new Map<string, number>();
  resolvedPolicies.forEach(({ name }, i) => {
    if (first.has(name)) {
      throw new InvalidPolicyError(
        invalidOptions(
          `policies[${first.get(name)}] and policies[${i}] are both named "${name}"; give each policy its own "name"`,
        ),
      );
    }
    first.set(name, i);
  });
  const keys = resolveKeySources(key, fail);

  return {
    prefix,
    policies: resolvedPolicies,
    key: keys,
    apiKeyHeader: apiKeyHeader.toLowerCase(),
    ipv6Subnet,
    // a family listed twice is sent once
    headers: headers === false ? [] : [...new Set(headers)],
    failMode,
    timeout,
    mode,
    guard,
    runAs,
    contexts: [...new Set(contexts)],
    ...resolveGuardOptions(options, fail),
    ...resolveTelemetryOptions(options, fail),
    ...resolveResponseOptions(options, fail),
    shares: resolveShares(options.shares, fail),
  };
}

/** `shares`: off, on with the defaults, or with what it says. */
function resolveShares(
  shares: RateLimitModuleOptions['shares'],
  fail: (option: string, value: unknown, expected: string) => never,
): ResolvedShares | undefined {
  if (shares === undefined || shares === false) return undefined;
  if (shares === true) return DEFAULT_SHARES;
  if (!isPlainObject(shares) || Object.keys(shares).some((field) => field !== 'after' && field !== 'hold'))
    return fail('shares', shares, expectedSharesOption());
  const { after = DEFAULT_SHARES.after, hold } = shares;
  if (typeof after !== 'number' || !(after > 0 && after < Infinity))
    fail('shares.after', after, expectedSharesOption());
  const holdSeconds = hold === undefined ? DEFAULT_SHARES.holdMs / 1000 : parseWindow(hold);
  if (holdSeconds === undefined || holdSeconds * 1000 < HOLD_MS.least || holdSeconds * 1000 > HOLD_MS.most)
    return fail('shares.hold', hold, expectedSharesOption());
  return { after, holdMs: Math.round(holdSeconds * 1000) };
}

/** `skipIf` and `retryAfterJitter`: what the guard does besides deciding. */
function resolveGuardOptions(
  { skipIf, retryAfterJitter = 0 }: RateLimitModuleOptions,
  fail: (option: string, value: unknown, expected: string) => never,
): Pick<ResolvedOptions, 'skipIf' | 'retryAfterJitter'> {
  if (skipIf !== undefined && typeof skipIf !== 'function')
    fail('skipIf', skipIf, 'must be a function of the execution context returning a boolean');
  if (typeof retryAfterJitter !== 'number' || !(retryAfterJitter >= 0 && retryAfterJitter <= 1)) {
    fail('retryAfterJitter', retryAfterJitter, 'must be a number from 0 to 1 (a share of the wait)');
  }
  return { skipIf, retryAfterJitter };
}

/** `metrics`: whether the module records OpenTelemetry metrics, when an SDK is there. */
function resolveTelemetryOptions(
  { metrics = true }: RateLimitModuleOptions,
  fail: (option: string, value: unknown, expected: string) => never,
): Pick<ResolvedOptions, 'metrics'> {
  if (typeof metrics !== 'boolean') fail('metrics', metrics, 'must be true or false');
  return { metrics };
}

/** `errorFormat` and `exceptionFactory`: how a refusal answers. */
function resolveResponseOptions(
  { errorFormat = 'nest', exceptionFactory }: RateLimitModuleOptions,
  fail: (option: string, value: unknown, expected: string) => never,
): Pick<ResolvedOptions, 'errorFormat' | 'exceptionFactory'> {
  if (errorFormat !== 'nest' && errorFormat !== 'problem') {
    fail(
      'errorFormat',
      errorFormat,
      `must be 'nest' (Nest's error body) or 'problem' (RFC 9457, application/problem+json)`,
    );
  }
  if (exceptionFactory !== undefined && typeof exceptionFactory !== 'function') {
    fail(
      'exceptionFactory',
      exceptionFactory,
      'must be a function of the decision and the execution context returning an Error',
    );
  }
  return { errorFormat, exceptionFactory };
}

function isStore(value: unknown): value is RateLimitStore {
  const store = value as RateLimitStore | null;
  return typeof store?.consume === 'function' && typeof store.peek === 'function' && typeof store.reset === 'function';
}

/** An object literal, as ioredis options are (not a client of another library, not a list). */
function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== 'object' || value === null) return false;
  const prototype: unknown = Object.getPrototypeOf(value);
  return prototype === Object.prototype || prototype === null;
}
