import { once } from 'node:events';
import type { Cluster, Redis, RedisOptions } from 'ioredis';
import type { KeySource, ResolvedPolicy } from './policy/policy.types.js';
import { InvalidPolicyError, resolveKeySources, resolvePolicy } from './policy/resolve-policy.js';
import { DEFAULT_IPV6_SUBNET } from './keys/ip.js';
import { invalidOption } from './rate-limit.errors.js';
import type { FailMode, HeaderFamily, RateLimitModuleOptions } from './rate-limit-options.interface.js';
import { MemoryStore } from './stores/memory/memory.store.js';
import type { RateLimitStore } from './stores/rate-limit-store.interface.js';
import { RedisStore } from './stores/redis/redis.store.js';

/** The module's options after validation, with every default filled in. */
export interface ResolvedOptions {
  store: RateLimitStore;
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
  /** What the module opened itself and so closes on shutdown. */
  owned: { store?: RateLimitStore; client?: Redis | Cluster };
}

/** How long start waits for a Redis client the module created to connect, ms. */
const READY_WAIT_MS = 1_000;
/** Longest wait between reconnection attempts of a client the module created, ms. */
const RECONNECT_MAX_MS = 250;

const HEADER_FAMILIES: readonly HeaderFamily[] = ['ietf', 'legacy', 'x-ratelimit'];
const FAIL_MODES: readonly FailMode[] = ['open', 'closed', 'local'];

/**
 * Validates the module's options, fills in defaults and creates the store.
 *
 * @throws Error naming the option (or the policy and field) that does not hold
 */
export async function resolveOptions(options: RateLimitModuleOptions = {}): Promise<ResolvedOptions> {
  const fail = (option: string, value: unknown, expected: string): never => {
    throw new Error(invalidOption(option, value, expected));
  };
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
    policies = [],
  } = options;

  if (typeof prefix !== 'string' || /[{}]/.test(prefix)) fail('prefix', prefix, 'must be a string without braces');
  if (typeof apiKeyHeader !== 'string' || !/^[!#$%&'*+.^_`|~0-9a-z-]+$/i.test(apiKeyHeader)) {
    fail('apiKeyHeader', apiKeyHeader, 'must be a header name');
  }
  if (!Number.isInteger(ipv6Subnet) || ipv6Subnet < 32 || ipv6Subnet > 64) {
    fail('ipv6Subnet', ipv6Subnet, 'must be a whole number of bits from 32 to 64');
  }
  if (headers !== false && (!Array.isArray(headers) || !headers.every((h) => HEADER_FAMILIES.includes(h)))) {
    fail('headers', headers, `must be false or a list of 'ietf', 'legacy', 'x-ratelimit'`);
  }
  if (!FAIL_MODES.includes(failMode)) fail('failMode', failMode, `must be 'open', 'closed' or 'local'`);
  if (typeof timeout !== 'number' || !Number.isFinite(timeout) || timeout <= 0) {
    fail('timeout', timeout, 'must be a positive number of milliseconds');
  }
  if (mode !== 'enforce' && mode !== 'shadow') fail('mode', mode, `must be 'enforce' or 'shadow'`);
  if (typeof guard !== 'boolean') fail('guard', guard, 'must be true or false');
  if (!Array.isArray(policies)) fail('policies', policies, 'must be a list of policies');
  if (options.store !== undefined && options.redis !== undefined) {
    fail('redis', '(given)', 'cannot be combined with "store"; give one');
  }

  const resolvedPolicies = policies.map((policy, i) => resolvePolicy(policy, `RateLimitModule policies[${i}]`, 'default'));
  const names = new Set<string>();
  for (const policy of resolvedPolicies) {
    if (names.has(policy.name)) {
      throw new InvalidPolicyError(invalidOption('policies', policy.name, 'must have distinct names; name each policy'));
    }
    names.add(policy.name);
  }

  const { store, owned } = await createStore(options, timeout);
  return {
    store,
    prefix,
    policies: resolvedPolicies,
    key: resolveKeySources(key, (expected) => fail('key', key, expected)),
    apiKeyHeader: apiKeyHeader.toLowerCase(),
    ipv6Subnet,
    headers: headers === false ? [] : headers,
    failMode,
    timeout,
    mode,
    guard,
    owned,
  };
}

async function createStore(
  options: RateLimitModuleOptions,
  timeout: number,
): Promise<{ store: RateLimitStore; owned: ResolvedOptions['owned'] }> {
  if (options.store !== undefined) {
    const { store } = options;
    if (typeof store?.consume !== 'function' || typeof store.peek !== 'function' || typeof store.reset !== 'function') {
      throw new Error(invalidOption('store', store, 'must implement RateLimitStore (consume, peek, reset)'));
    }
    return { store, owned: {} };
  }
  if (options.redis === undefined) {
    const store = new MemoryStore();
    return { store, owned: { store } };
  }
  if (isRedisClient(options.redis)) {
    const store = new RedisStore({ client: options.redis });
    return { store, owned: { store } };
  }
  const client = await createRedisClient(options.redis, timeout);
  const store = new RedisStore({ client });
  return { store, owned: { store, client } };
}

function isRedisClient(value: unknown): value is Redis | Cluster {
  return typeof value === 'object' && value !== null && typeof (value as Redis).defineCommand === 'function';
}

/**
 * A client fit for a limiter: a request must never wait on Redis longer than the limiter's
 * timeout, and a command must never run late. So commands are not queued while disconnected
 * (they fail at once and `failMode` decides), each has a timeout, none is retried or resent
 * after a reconnect, reconnecting is tried every 250 ms at most, and a READONLY or LOADING reply
 * (a primary turned replica, a server still loading) makes it reconnect. Through Sentinel it
 * follows a failover when the sentinels announce it.
 */
async function createRedisClient(redis: string | RedisOptions, timeout: number): Promise<Redis> {
  if (typeof redis !== 'string' && (typeof redis !== 'object' || redis === null)) {
    throw new Error(invalidOption('redis', redis, 'must be an ioredis client, a redis:// URL or ioredis options'));
  }
  let Client: typeof Redis;
  try {
    ({ Redis: Client } = await import('ioredis'));
  } catch {
    throw new Error(invalidOption('redis', redis, 'needs the "ioredis" package: npm install ioredis'));
  }
  const limiterDefaults: RedisOptions = {
    enableOfflineQueue: false,
    commandTimeout: timeout,
    maxRetriesPerRequest: 0,
    autoResendUnfulfilledCommands: false,
    retryStrategy: (attempt) => Math.min(attempt * 50, RECONNECT_MAX_MS),
    reconnectOnError: (error) => /READONLY|LOADING/.test(error.message),
    // with `sentinels`: follow a failover as the sentinels announce it, not once the old primary answers READONLY
    failoverDetector: true,
  };
  const client = typeof redis === 'string' ? new Client(redis, limiterDefaults) : new Client({ ...limiterDefaults, ...redis });
  // The limiter logs when its calls start and stop failing; ioredis would print every retry.
  client.on('error', () => undefined);
  // Without an offline queue, requests before the first connection would all fall to failMode:
  // give it a moment at start. A Redis that is down does not stop the app from starting.
  await once(client, 'ready', { signal: AbortSignal.timeout(READY_WAIT_MS) }).catch(() => undefined);
  return client;
}
