/**
 * Every message this package throws or logs, as small factories, so the wording lives in one
 * place and tests can assert it.
 */

/** Longest part of a bad value a message quotes, in characters. */
const SHOWN = 64;

const clip = (text: string): string => (text.length > SHOWN ? `${text.slice(0, SHOWN)}…` : text);

/**
 * A bad value as a message shows it: strings quoted, long ones cut (a message must not carry a
 * whole config), and an instance of a class by its class name (JSON of a client object would be
 * huge, or circular).
 */
function show(value: unknown): string {
  if (typeof value === 'function') return `a function`;
  if (typeof value === 'string') return JSON.stringify(clip(value));
  if (typeof value !== 'object' || value === null) return String(value);
  const prototype: unknown = Object.getPrototypeOf(value);
  if (prototype !== Object.prototype && prototype !== null && !Array.isArray(value)) {
    return `an instance of ${value.constructor?.name || 'a class'}`;
  }
  try {
    return clip(
      JSON.stringify(value, (_key, inner: unknown) => (typeof inner === 'function' ? '(a function)' : inner)),
    );
  } catch {
    // eslint-disable-next-line @typescript-eslint/no-base-to-string -- what JSON cannot show (circular, or holding a bigint) is shown as String shows it: an array by its items, a plain object as [object Object]
    return String(value);
  }
}

/** A policy field that does not hold; `where` names the controller and handler. */
export function invalidPolicyField(where: string, field: string, value: unknown, expected: string): string {
  return `Invalid @RateLimit policy on ${where}: "${field}" ${expected}, got ${show(value)}`;
}

/** A policy as a whole that does not hold (conflicting or missing fields). */
export function invalidPolicy(where: string, problem: string): string {
  return `Invalid @RateLimit policy on ${where}: ${problem}`;
}

/** A module option that does not hold. */
export function invalidOption(option: string, value: unknown, expected: string): string {
  return `Invalid RateLimitModule option "${option}": ${expected}, got ${show(value)}`;
}

/** A store constructor's option that does not hold. */
export function invalidStoreOption(store: string, option: string, value: unknown, expected: string): string {
  return `Invalid ${store} option "${option}": ${expected}, got ${show(value)}`;
}

/**
 * An argument of a call to the engine or a store (`RateLimiterService.consume`,
 * `MemoryStore.peek`) that does not hold; `argument` names it (`cost`, `requests[1].cost`).
 */
export function invalidArgument(where: string, argument: string, value: unknown, expected: string): string {
  return `Invalid argument to ${where}: "${argument}" ${expected}, got ${show(value)}`;
}

/** Two requests of one store call for the same bucket key that do not agree on its rule or their cost. */
export function invalidRepeatedKey(
  where: string,
  first: number,
  second: number,
  key: string,
  field: 'rule' | 'cost',
): string {
  return `Invalid argument to ${where}: requests[${first}] and requests[${second}] are for the same key ${show(key)} with a different ${field}; a key is one bucket, decided once per call: give each key once`;
}

/** The module's options as a whole, or two of them together, that do not hold. */
export function invalidOptions(problem: string): string {
  return `Invalid RateLimitModule options: ${problem}`;
}

/** Options (or what a `forRootAsync` factory returned) that are not an object at all. */
export function invalidOptionsObject(value: unknown): string {
  return invalidOptions(
    `they must be an object such as { policies: [{ rps: 10, burst: 20 }] } (does the forRootAsync factory return them?), got ${show(value)}`,
  );
}

/** `RateLimitModule.forRootAsync()` without a usable way to make the options. */
export function invalidAsyncOptions(problem: string, options: unknown): string {
  return `Invalid RateLimitModule.forRootAsync options: ${problem}, got ${show(options)}`;
}

/** A `@RateLimit` argument, or an entry of the module's `policies`, that is not a policy object. */
export function invalidPolicyValue(where: string, value: unknown): string {
  return invalidPolicy(where, `a policy must be an object such as { rps: 10, burst: 20 }, got ${show(value)}`);
}

/** A `@SkipRateLimit` argument that cannot be a policy name. */
export function invalidSkip(where: string, name: unknown): string {
  return `Invalid @SkipRateLimit on ${where}: policy names must be non-empty strings, got ${show(name)}`;
}

/** Logged at start for a `@SkipRateLimit` name that matches none of the policies where it stands. */
export function unknownSkip(where: string, name: string, names: readonly string[]): string {
  const known = names.length === 0 ? 'none' : names.map((n) => JSON.stringify(n)).join(', ');
  return `@SkipRateLimit(${show(name)}) on ${where} names no policy that applies there (policies: ${known}), so it skips nothing; check the name`;
}

/** Logged once at start when quota policies count in the memory store, which a restart empties. */
export function quotaInMemory(names: readonly string[]): string {
  const list = names.map((name) => JSON.stringify(name)).join(', ');
  return (
    `Quota polic${names.length === 1 ? 'y' : 'ies'} ${list} count in the memory store: each process counts its own, ` +
    `and a restart forgets every count, so a quota outlives neither; give the module a RedisStore to keep them`
  );
}

/** Logged once when `X-Forwarded-For` arrives and `req.ip` is still the connection's address. */
export function forwardedForIgnored(address: string): string {
  return (
    `A request carried X-Forwarded-For, but req.ip is the connection's own address (${address}): ` +
    `the app does not trust the proxy that sent it, so 'ip' keys are the proxy's address and every client ` +
    `behind it shares one bucket. Behind a proxy, trust it (Express: app.set('trust proxy', <hops or addresses>); ` +
    `Fastify: new FastifyAdapter({ trustProxy: <hops or addresses> })). Without one, clients can send the ` +
    `header themselves and it is rightly ignored. (Logged once.)`
  );
}

/** Logged once when a `'user'` key finds no user on a request that carries `Authorization`. */
export function userNotYetSet(route: string): string {
  return (
    `A request to ${route} carried Authorization, but its 'user' key found no req.user, so it was limited by ` +
    `the next key source (often its IP). Nest runs global guards before a controller's own, so the app's auth ` +
    `guard had not run yet: use RateLimitModule.forRoot({ runAs: 'interceptor' }), which runs after every ` +
    `guard, or register the auth guard globally before this module. (Logged once.)`
  );
}

/** Logged once when a socket.io handshake carries `X-Forwarded-For`: a gateway's `ip` is always the connection's address. */
export function gatewayForwardedFor(address: string): string {
  return (
    `A socket.io handshake carried X-Forwarded-For, but a gateway client's address is its connection's own ` +
    `(${address}): behind a proxy, 'ip' keys are the proxy's address and every client behind it shares one ` +
    `bucket. Key gateway messages by 'user', 'api-key' or a function (for instance of the address the proxy ` +
    `sets, read from client.handshake.headers, when the app trusts it). (Logged once.)`
  );
}

/** Logged once when a resolver's GraphQL context holds no HTTP request to read keys from. */
export const graphqlWithoutRequest =
  `A GraphQL resolver's context holds no HTTP request (Apollo: context.req; Mercurius: context.reply), so ` +
  `its operations share one bucket per policy whatever their client. If the GraphQL module sets its own ` +
  `"context", keep the request in it: context: ({ req, res }) => ({ req, res, ... }). (Logged once.)`;

/** The 429 message. */
export function limitExceeded(policy: string, retryAfter: number): string {
  return `Rate limit exceeded for policy "${policy}". Try again in ${retryAfter} second${retryAfter === 1 ? '' : 's'}.`;
}

/** The 429 message for a request whose cost exceeds the policy's burst. */
export function costExceedsBurst(policy: string, cost: number, burst: number): string {
  return `Request cost ${cost} exceeds the capacity ${burst} of policy "${policy}": it can never be admitted.`;
}

/** Logged in shadow mode for each request enforcing would have refused. */
export function shadowRefusal(policy: string, route: string, retryAfter: number): string {
  const retry = Number.isFinite(retryAfter) ? `retry after ${retryAfter} s` : 'its cost exceeds the capacity';
  return `Shadow mode: policy "${policy}" would refuse a request to ${route} (${retry})`;
}

/** The 503 message when the store fails and `failMode` is `'closed'`. */
export const storeUnavailable = 'Rate limiter unavailable. Try again later.';

/** What is wrong with a list of policies where two share `name` (they would be one bucket under two rules). */
export function duplicatePolicyName(name: string): string {
  return `two policies are named "${name}"; give each policy its own "name"`;
}

/** Why a request waiting its `leaky_bucket` turn got a 503 (the exception's cause). */
export const shuttingDown =
  'The application is shutting down: a request waiting its turn was answered without running, and its turn given back';

/** The message of the 499 a request ends with when its client went away while it waited its turn (nobody reads it). */
export const clientClosedRequest =
  'The client closed the connection while its request waited its turn; the turn was given back';

/** A store call that took longer than `timeout`. */
export function storeTimedOut(timeoutMs: number): string {
  return `Rate limit store did not answer within ${timeoutMs} ms`;
}

/** A store call that failed. */
export function storeFailed(cause: unknown): string {
  return `Rate limit store failed: ${cause instanceof Error ? cause.message : String(cause)}`;
}

/** A call not sent because the store failed repeatedly and is being probed. */
export const circuitOpen = 'Rate limit store is failing: calls are stopped until a probe succeeds';

/** Logged once when the circuit breaker opens. */
export function storeFailing(cause: string, failMode: string, probeMs: number): string {
  return `${cause}. Stopping store calls; failMode '${failMode}' decides until a probe every ${probeMs} ms succeeds`;
}

/** Logged once when a probe succeeds. */
export const storeBack = 'Rate limit store answers again: limiting with it';

/** `RateLimiterService.resetAll()` on a store without `resetAll(prefix)`. */
export const resetAllUnsupported =
  'RateLimiterService.resetAll() needs a store with resetAll(prefix), as MemoryStore and RedisStore have: this store has none';

// Stores

/** A store's `clock` option that is none of the forms it takes (`forms`). */
export function invalidStoreClock(store: string, clock: unknown, forms: string): string {
  return invalidStoreOption(store, 'clock', clock, `must be ${forms}`);
}

/** `MemoryStore`'s `maxKeys` option that is not a whole number >= 1. */
export function invalidMaxKeys(maxKeys: unknown): string {
  return invalidStoreOption('MemoryStore', 'maxKeys', maxKeys, 'must be a whole number >= 1');
}

/** A `RedisStore` without an ioredis client (or given the client itself as its options). */
export function invalidRedisClient(client: unknown): string {
  return invalidStoreOption(
    'RedisStore',
    'client',
    client,
    'must be an ioredis Redis or Cluster client, as in new RedisStore({ client: redis })',
  );
}

/** `RedisStore`'s `cacheRefusals` option that is not a boolean. */
export function invalidCacheRefusals(cacheRefusals: unknown): string {
  return invalidStoreOption('RedisStore', 'cacheRefusals', cacheRefusals, 'must be true or false');
}

/** An option the store does not have: a typo, refused rather than ignored. */
export function unknownStoreOption(store: string, option: string, value: unknown, options: Iterable<string>): string {
  return invalidStoreOption(store, option, value, `is not an option (the options are ${[...options].join(', ')})`);
}

/** Logged once by a `RedisStore` whose client sets ioredis's `commandTimeout` (`ms`). */
export function clientCommandTimeout(ms: number): string {
  return (
    `The Redis client sets commandTimeout (${ms} ms): ioredis then fails a command whose reply came while this app was busy ` +
    '(a heavy request, a collection pause) before reading it, and failMode decides requests Redis had answered. ' +
    "Leave it unset: the store bounds each call by the module's timeout itself, from when the call is sent"
  );
}

/**
 * A decide call's verdict that the app, reading the buckets as the call read them, does not come to
 * (a bug: the script and the model it mirrors differ).
 */
export function storeReplyDisagrees(policies: readonly string[], redisAllowed: boolean): string {
  return (
    `Redis ${redisAllowed ? 'admitted' : 'refused'} a request (policies ${policies.join(', ')}) that the app, ` +
    `reading the buckets Redis read, ${redisAllowed ? 'refuses' : 'admits'}: the store's script and its model differ`
  );
}

/** A call Redis ran after its caller had stopped waiting: it decided and charged nothing. */
export function staleStoreCall(timeoutMs: number): string {
  return `Redis ran the call more than ${timeoutMs} ms after it was sent, when its caller had stopped waiting; it was dropped`;
}

/** A cost that is not a finite number > 0; `argument` names what holds it (`cost`, `requests[1].cost`). */
export function invalidCost(where: string, argument: string, cost: unknown): string {
  return invalidArgument(where, argument, cost, 'must be a finite number > 0 (the tokens the request takes)');
}

/** A store call's `requests` that is not a list. */
export function invalidRequests(where: string, requests: unknown): string {
  return invalidArgument(where, 'requests', requests, 'must be a list of requests');
}

/** A request of a store call that is not an object. */
export function invalidRequest(where: string, index: number, request: unknown): string {
  return invalidArgument(where, `requests[${index}]`, request, 'must be a request such as { key, policy, rule, cost }');
}

/** A request of a store call whose key is not a string. */
export function invalidRequestKey(where: string, index: number, key: unknown): string {
  return invalidArgument(where, `requests[${index}].key`, key, 'must be a string');
}

/** The module's `redis` option given where the optional `ioredis` package is not installed. */
export function ioredisMissing(redis: unknown): string {
  return invalidOption('redis', redis, 'needs the "ioredis" package: npm install ioredis');
}

/** An argument of the `nestjs-ratelimit simulate` command line that does not hold; `value` undefined: not given. */
export function invalidSimulateArgument(flag: string, value: unknown, expected: string): string {
  return `Invalid nestjs-ratelimit simulate argument ${flag}: ${expected}${value === undefined ? '' : `, got ${show(value)}`}`;
}

/** A key function whose promise did not settle within `timeout`: `failMode` answered for the request. */
export function keyTimedOut(timeoutMs: number): string {
  return `A rate-limit key function did not answer within ${timeoutMs} ms: the request was answered as failMode says`;
}

// nestjs-ratelimit/throttler

/** @nestjs/throttler's refusal message (its `throttlerMessage`), when `errorMessage` does not say otherwise. */
export const throttlerMessage = 'ThrottlerException: Too Many Requests';

/** A throttler's `limit`, `ttl` or `blockDuration` that resolved to no number (`ThrottlerGuard`). */
export function invalidThrottlerValue(option: string, throttler: string, value: unknown): string {
  return `Invalid "${option}" for the "${throttler}" throttler: expected a number, got ${show(value)}.`;
}

/** Logged at start by a `ThrottlerGuard` whose module declares no throttler. */
export const noThrottlers = 'ThrottlerModule has no throttlers: no request is limited. Give forRoot() at least one.';

/** `ThrottlerModule.forRootAsync` options that give none of the three ways to make the options. */
export const throttlerAsyncOptionsMissing =
  'ThrottlerModule.forRootAsync: give one of useFactory, useClass or useExisting';

/** A `RateLimitThrottlerStorage` option that does not hold, in the words the module's own options use. */
export function invalidThrottlerStorageOption(option: string, value: unknown, expected: string): string {
  return `Invalid RateLimitThrottlerStorage option "${option}": must be ${expected}, got ${show(value)}`;
}
