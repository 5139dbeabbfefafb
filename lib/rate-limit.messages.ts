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

/** `Controller.handler`, as messages name the route a context runs. */
export function routeName(context: { getClass(): { name: string }; getHandler(): { name: string } }): string {
  return `${context.getClass().name}.${context.getHandler().name}`;
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

/**
 * A policy that holds a slot per request in flight (`concurrency`) on a GraphQL subscription's own
 * handler: a subscription is limited neither when it starts nor per event, so it would hold none.
 */
export function slotOnSubscription(name: string): string {
  return (
    `policy "${name}" holds a slot while a request is in flight, but this handler is a GraphQL subscription, which ` +
    `is limited at no point of its life (neither when it starts nor per event): it would hold nothing; limit the ` +
    `query or mutation that leads to it, or the gateway that carries its events`
  );
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

/**
 * Logged once per quota policy whose `anchor` function named a time no period can start from in
 * its time zone (a timestamp in ns, say): such requests count in the calendar's own periods.
 */
export function unplaceableAnchor(policy: string, anchor: number, timeZone: string): string {
  return (
    `Quota policy ${JSON.stringify(policy)}: its anchor named ${anchor}, which is no date in ${timeZone} (an anchor ` +
    `is a Date or Unix ms); its requests count in the calendar's own periods until it names one`
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

/**
 * A Redis that runs no script for the store's client: start fails with this (or it is logged,
 * found after start), as no decision could ever be made there.
 */
export function redisRefusesScripts(reply: string): string {
  return `Redis refuses to run scripts for this client ("${reply}"): RedisStore decides each request in one Lua script (EVALSHA, EVAL or FCALL of its function library). Allow the client's ACL user @scripting (ACL SETUSER <user> +@scripting), or use a server where those commands are not renamed away`;
}

/** Logged once per outage, when the circuit breaker of the store (or of one of its servers, `node`) first opens. */
export function storeFailing(cause: string, failMode: string, probeMs: number, node = ''): string {
  const calls = node === '' ? 'store calls' : `calls to Redis node ${node} (the keys it holds; other nodes go on)`;
  return `${cause.replace(/\.$/, '')}. Stopping ${calls}; failMode '${failMode}' decides until a probe every ${probeMs} ms succeeds`;
}

/** Logged once per outage, when the store (or its server `node`) has answered again for a while. */
export function storeBack(node = ''): string {
  return node === ''
    ? 'Rate limit store answers again: limiting with it'
    : `Redis node ${node} answers again: limiting with it`;
}

/**
 * Logged when the store fails to give back a request's slots (`concurrency`) as it ends, and no
 * other release was being tried again: each is tried again, with a growing wait, until it lands
 * or its lease ends (the store lets a slot go then itself).
 */
export function releasesFailing(cause: string): string {
  return `Could not give slots back to the rate limit store (${cause}); trying each again until it lands or its lease ends`;
}

/** Logged when the last release being tried again has landed or lapsed. */
export function releasesSettled(landed: number, lapsed: number): string {
  return `Slots given back again: ${landed} release${landed === 1 ? '' : 's'} landed after a retry, ${lapsed} lapsed with their lease`;
}

/** `RateLimiterService.resetAll()` on a store without `resetAll(prefix)`. */
export const resetAllUnsupported =
  'RateLimiterService.resetAll() needs a store with resetAll(prefix), as MemoryStore and RedisStore have: this store has none';

/** A meter's `add` or `set` given an amount that is not a finite number >= 0. */
export function meterAmount(call: 'add' | 'set', n: unknown): string {
  return `RateLimitMeter.${call}: the amount must be a finite number >= 0, got ${show(n)}`;
}

/** A policy's `settle` that gave no cost a request can be charged (it threw, or gave no finite number >= 0). */
export function settleUnusable(policy: string, what: unknown): string {
  const said = what instanceof Error ? `threw ${what.message}` : `returned ${show(what)}`;
  return `The settle of policy '${policy}' ${said}: the request keeps its reservation. Warned once per policy.`;
}

/** Why a `@RateLimitMeter()` parameter got a meter that charges nothing. */
export function meterUnavailable(
  context: { getClass(): { name: string }; getHandler(): { name: string } },
  policy: string | undefined,
): string {
  const route = `${context.getClass().name}.${context.getHandler().name}`;
  return `${route}: no request meter${policy === undefined ? '' : ` for policy '${policy}'`} (the rate limit module does not limit this call): counts are not charged`;
}

// Policies: what validation tells of a field (`expected`, framed by `invalidPolicyField` as
// `"<field>" <expected>, got <value>`) or of a policy as a whole (`problem`, framed by
// `invalidPolicy`). Each has a row in test/unit/policy/validation.spec.ts.

/** Names quoted and listed as a message offers a choice: `'a'`, `'a' or 'b'`, `'a', 'b' or 'c'`. */
function oneOf(names: readonly string[]): string {
  const quoted = names.map((name) => `'${name}'`);
  return quoted.length < 2 ? quoted.join('') : `${quoted.slice(0, -1).join(', ')} or ${quoted.at(-1)}`;
}

/** What an HTTP header name may hold (an RFC 9110 token), as messages say it. */
export const HEADER_NAME_CHARS = "letters, digits and !#$%&'*+-.^_`|~ only";

/** A field a policy does not have (a typo, refused rather than ignored). */
export function expectedPolicyField(fields: Iterable<string>): string {
  return `is not a policy field (the fields are ${[...fields].join(', ')})`;
}

/** A `'header:<name>'` cost whose name is not a header name. */
export function expectedCostHeader(): string {
  return `must be 'header:<name>' with an HTTP header name such as 'header:x-request-weight': ${HEADER_NAME_CHARS}`;
}

/** A `'query:'` cost without a parameter name. */
export function expectedCostQuery(): string {
  return `must be 'query:<name>' with a parameter name such as 'query:weight'`;
}

/** A cost that is none of the sources of one. */
export function expectedCost(): string {
  return `must be a positive number, 'header:<name>', 'query:<name>' or a function (0 too on a policy that settles)`;
}

/** A `defaultCost` that is not a positive number. */
export function expectedDefaultCost(): string {
  return 'must be a positive number';
}

/** A `'header:<name>'` key source whose name is not a header name. */
export function expectedKeyHeader(): string {
  return `must be 'header:<name>' with an HTTP header name such as 'header:x-tenant-id': ${HEADER_NAME_CHARS}`;
}

/** A key that is none of the key sources, or a list with one that is not. */
export function expectedKeySources(): string {
  return `must be 'ip', 'user', 'api-key', 'header:<name>', a function, or a non-empty list of those`;
}

/** A `scope` that is neither `'client'` nor `'route'`. */
export function expectedScope(): string {
  return `must be 'client' (one bucket per client across the routes it covers) or 'route' (one per client per route)`;
}

/** A policy `name` unfit for the bucket key and the headers; `maxLength` in characters. */
export function expectedPolicyName(maxLength: number): string {
  return `must be a string of 1 to ${maxLength} visible ASCII characters, without spaces or braces`;
}

/** An `algorithm` that names none of `algorithms`. */
export function expectedAlgorithm(algorithms: readonly string[]): string {
  return `must be one of ${algorithms.map((algorithm) => `'${algorithm}'`).join(', ')}`;
}

/** `rps` (or `tokensPerSecond`) that is not a positive number. */
export function expectedRate(): string {
  return 'must be a positive number (tokens per second)';
}

/** `rps` (or `tokensPerSecond`) above the highest rate, `maxRps` tokens per second. */
export function expectedRateAtMost(maxRps: number): string {
  return `must be at most ${maxRps} (tokens per second)`;
}

/** A `limit` or `burst` that is not a whole number >= 1. */
export function expectedCount(): string {
  return 'must be a whole number >= 1';
}

/** A `limit` or `burst` above `maxCount`, the largest whole number a double holds exactly. */
export function expectedCountAtMost(maxCount: number): string {
  return `must be at most ${maxCount} (Number.MAX_SAFE_INTEGER): above it a double cannot count by whole tokens`;
}

/** A `window` that is not a duration. */
export function expectedWindow(): string {
  return `must be a positive number of seconds or a duration such as '10s', '1m', '1h', '1d'`;
}

/** A duration (`window`, `lease`, `blockFor`) longer than `days`, the longest anything is kept. */
export function expectedDaysAtMost(days: number): string {
  return `must be at most ${days} days`;
}

/** A `lease` that is not a duration of at least 1 ms. */
export function expectedLease(): string {
  return `must be a duration of at least 1 ms: seconds, or a string such as '30s', '5m', '1h'`;
}

/** A `@RateLimitMeter()` whose route has no policy of that name that settles. */
export function meterWithoutSettle(policy: string | undefined, settling: readonly string[]): string {
  if (policy === undefined)
    return settling.length === 0
      ? '@RateLimitMeter() needs a policy on the route that settles (with settle, maxDebt or settleEvery); it has none'
      : `@RateLimitMeter() must name one of the route's policies that settle: ${settling.map((name) => `'${name}'`).join(', ')}`;
  return `@RateLimitMeter('${policy}') names no policy of the route that settles (with settle, maxDebt or settleEvery)${settling.length === 0 ? '' : `; those that do: ${settling.map((name) => `'${name}'`).join(', ')}`}`;
}

/** `settle`: what it must be. */
export function expectedSettle(): string {
  return "must be a function of the handler's result (and the execution context) returning the real cost, a number >= 0";
}

/** The module's `shares` option: what it must be. */
export function expectedSharesOption(): string {
  return "must be true, false or { after?: decisions a second (> 0), hold?: '10ms' to '60s' }";
}

/** A policy's `shares`: what it may be. */
export function expectedShares(): string {
  return "may only be false: a policy opts out of the module's shares, which the module's shares option turns on";
}

/** `maxDebt`: what it must be. */
export function expectedMaxDebt(): string {
  return 'must be a whole number >= 0: how far past empty (cost units) a settle may take a bucket';
}

/** `settleEvery`: what it must be. */
export function expectedSettleEvery(): string {
  return `must be a duration of at least 1 s: seconds, or a string such as '10s', '1m'`;
}

/** `unit`: what it must be. */
export function expectedUnit(): string {
  return `must be a word of letters, digits and '-' (up to 32), such as 'requests' or 'tokens'`;
}

/** A field only the `algorithms` take (`lease`, `period`, `anchor`), on a policy of `algorithm`. */
export function expectedOnlyFor(algorithms: readonly string[], algorithm: string): string {
  return `applies to ${oneOf(algorithms)} only, and the algorithm is '${algorithm}'`;
}

/** A `period` that is none of `periods`. */
export function expectedPeriod(periods: readonly string[]): string {
  return `must be ${oneOf(periods)}`;
}

/** A `timeZone` that is not an IANA time zone. */
export function expectedTimeZone(): string {
  return `must be an IANA time zone such as 'UTC', 'Europe/Berlin' or 'America/New_York'`;
}

/** An `anchor` that is not a function, on an algorithm whose anchor is one (an identity's period start). */
export function expectedAnchorFunction(): string {
  return `must be a function (ctx, request) => Date | number | undefined (or a promise of one): an identity's own period start, such as its billing date`;
}

/**
 * An `anchor` function where only the `algorithms` take one: on a policy of `algorithm`, or
 * (`undefined`) beside tiers none of which has one of them.
 */
export function expectedAnchorFunctionOnlyFor(algorithms: readonly string[], algorithm: string | undefined): string {
  const but =
    algorithm === undefined ? `no tier's algorithm is ${oneOf(algorithms)}` : `the algorithm is '${algorithm}'`;
  return `can be a function for ${oneOf(algorithms)} only (a period's start), and ${but}`;
}

/** An `anchor` function given in a tier. */
export function expectedAnchorOnPolicy(): string {
  return `must be given on the policy, not a tier: one function gives every tier's period start`;
}

/** An `anchor` that is neither `'clock'` nor `'first-request'`. */
export function expectedAnchor(): string {
  return `must be 'clock' (windows on the clock's grid) or 'first-request' (a window starts at a client's first request)`;
}

/** A field that `blockFor` as an object does not have. */
export function expectedBlockField(fields: readonly string[]): string {
  return `is not a field of blockFor (the fields are ${fields.join(', ')})`;
}

/** `blockFor` as an object without its `duration`. */
export function expectedBlockDurationGiven(): string {
  return `is required: seconds, or a string such as '30s', '15m', '1h', '1d'`;
}

/** A block's duration under 1 ms or not a duration; `plain`: `blockFor` itself, which may be an object too. */
export function expectedBlockDuration(plain: boolean): string {
  const orObject = plain ? `, or { duration, then: 'keep' | 'reset' }` : '';
  return `must be a duration of at least 1 ms: seconds, or a string such as '30s', '15m', '1h', '1d'${orObject}`;
}

/** A block's `then` that is neither `'keep'` nor `'reset'`. */
export function expectedBlockThen(): string {
  return `must be 'keep' (the bucket as the refusals left it when the block ends) or 'reset' (full again)`;
}

/**
 * A factor of `rps` (`adaptive.min`, a `setScale` factor) below `least`, at which `who` (the
 * policy, a tier, every policy) would take more than `days` to refill.
 */
export function expectedFactorAtLeast(least: number, who: string, days: number): string {
  return `must be at least ${least}: below it ${who} would take more than ${days} days to refill, the longest a bucket may take`;
}

/** A `count` that is neither `'all'` nor `'failures'`. */
export function expectedCountMode(): string {
  return `must be 'all' or 'failures'`;
}

/** A policy's `skipIf` that is not a function. */
export function expectedSkipIf(): string {
  return 'must be a function of the execution context returning a boolean';
}

/** `adaptive` that is not an object. */
export function expectedAdaptive(): string {
  return 'must be an object such as { latency: 250, min: 0.1 }';
}

/** `adaptive.latency` that is not a positive number. */
export function expectedAdaptiveLatency(): string {
  return 'must be a positive number of milliseconds';
}

/** `adaptive.min` that is not a factor above 0 and at most 1. */
export function expectedAdaptiveMin(): string {
  return 'must be a factor of rps above 0 and at most 1';
}

/** `tiers` that is not an object of limits with at least one tier. */
export function expectedTiers(): string {
  return 'must be an object of limits by tier name, such as { free: { rps: 10, burst: 20 } }';
}

/** A `tier` that is neither `'user:<field>'` nor a function. */
export function expectedTierSource(): string {
  return `must be 'user:<field>' or a function naming a request's tier`;
}

/** A `defaultTier` that names none of `tiers`. */
export function expectedDefaultTier(tiers: readonly string[]): string {
  return `must name one of the tiers (${tiers.join(', ')})`;
}

/** A tier's name unfit for the bucket key, as a policy's name; `maxLength` in characters. */
export function expectedTierName(maxLength: number): string {
  return `must name each tier with 1 to ${maxLength} visible ASCII characters, without spaces or braces`;
}

/** A tier that is not an object of limits. */
export function expectedTierLimits(): string {
  return 'must be an object of limits such as { rps: 10, burst: 20 }';
}

/** A field that a tier does not have. */
export function expectedTierField(fields: readonly string[]): string {
  return `is not a tier field (the fields are ${fields.join(', ')})`;
}

/** What a message calls the policy it is about, or (`tier` given) one of its tiers. */
export function policyOrTier(tier: string | undefined): string {
  return tier === undefined ? 'the policy' : `tier "${tier}"`;
}

/** A problem of one tier's limits, as the policy's problem. */
export function problemInTier(tier: string, problem: string): string {
  return `tier "${tier}": ${problem}`;
}

/** A window algorithm whose window, `burst / rps` seconds, is under the 1 ms it counts in. */
export function windowUnderOneMs(algorithm: string, burst: number, rps: number): string {
  return `"${algorithm}" counts in windows of whole milliseconds, and burst / rps = ${burst} / ${rps} s is under 1 ms; lower "rps" or raise "burst"`;
}

/** A fixed `cost` above the capacity (`capacity` names its field, `burst` or `limit`): no request could pass. */
export function costAboveCapacity(cost: number, capacity: string, burst: number): string {
  return `"cost" ${cost} is more than "${capacity}" ${burst}, so no request could ever pass; lower "cost" or raise "${capacity}"`;
}

/** A `defaultCost` above the capacity: every request without a usable cost would be refused. */
export function defaultCostAboveCapacity(defaultCost: number, capacity: string, burst: number): string {
  return `"defaultCost" ${defaultCost} is more than "${capacity}" ${burst}, so every request without a usable cost would be refused; lower "defaultCost" or raise "${capacity}"`;
}

/** A policy option `algorithm` cannot honour, and `why` (its descriptor's `refuses`). */
export function optionNotFor(option: string, algorithm: string, why: string): string {
  return `"${option}" does not apply to "${algorithm}": ${why}`;
}

/** A rate field (`rps`, `burst`, `window`) on an algorithm said as `limit` with a `lease` or a `period`. */
export function rateFieldNotFor(field: string, algorithm: string, saidAs: 'lease' | 'period'): string {
  const sayIt =
    saidAs === 'lease'
      ? `"limit" requests in flight, each for at most "lease", such as { limit: 2, lease: '5m' }`
      : `"limit" per "period", such as { limit: 10000, period: 'month' }`;
  return `"${field}" does not apply to "${algorithm}": say it as ${sayIt}`;
}

/** An algorithm said as `limit` with a `lease` or a `period`, without its `limit`. */
export function countedLimitMissing(algorithm: string, saidAs: 'lease' | 'period'): string {
  const allowed = saidAs === 'lease' ? 'in flight' : 'per period';
  return `"${algorithm}" needs a "limit", the requests allowed ${allowed}`;
}

/** An algorithm said as `limit` with a `lease`, without its `lease`. */
export function leaseMissing(algorithm: string): string {
  return `"${algorithm}" needs a "lease", the longest a request holds its slot, such as '5m' (a slot held longer is reclaimed)`;
}

/** An algorithm said as `limit` per `period`, without its `period`, one of `periods`. */
export function periodMissing(algorithm: string, periods: readonly string[]): string {
  return `"${algorithm}" needs a "period": ${oneOf(periods)}`;
}

/** `rps` and `tokensPerSecond` both given, and different. */
export function rateGivenTwice(): string {
  return `"rps" and "tokensPerSecond" are the same setting; give one`;
}

/** A rate (`rateField`) and a `limit` or `window` (`other`) both given. */
export function rateAndWindowGiven(rateField: string, other: string): string {
  return `both "${rateField}" and "${other}" given; say it as rps + burst or as limit + window`;
}

/** A bucket that would take more than `days` to refill, `burst / rate` seconds. */
export function refillTooLong(burst: number, rate: number, rateField: string, days: number): string {
  return `burst / rps = ${burst} / ${rate} s is more than ${days} days, the longest a bucket may take to refill; raise "${rateField}" or lower "burst"`;
}

/** A policy that says no limit at all. */
export function rateMissing(): string {
  return 'give "rps" (and "burst") or "limit" and "window"';
}

/** `burst` with `limit` and `window`, where the burst is the limit. */
export function burstWithWindow(): string {
  return `"burst" goes with "rps"; with "limit" and "window" the burst is the limit`;
}

/** A `window` without its `limit`. */
export function windowWithoutLimit(): string {
  return `"window" needs a "limit", the requests allowed per window`;
}

/** A `limit` without its `window`. */
export function limitWithoutWindow(): string {
  return `"limit" needs a "window" such as '1m'`;
}

/** `limit` per `window` above the highest rate, `maxRps` tokens per second. */
export function windowRateTooHigh(limit: number, seconds: number, maxRps: number): string {
  return `limit / window = ${limit} / ${seconds} s is more than ${maxRps} tokens per second; lower "limit" or lengthen "window"`;
}

/** `tier` or `defaultTier` (`field`) without `tiers`. */
export function tierFieldWithoutTiers(field: string): string {
  return `"${field}" goes with "tiers", the limits of each tier`;
}

/** A limit field (`field`) of the policy itself beside `tiers`. */
export function limitBesideTiers(field: string): string {
  return `"${field}" is given beside "tiers"; give the limits in each tier`;
}

/** `tiers` without the `tier` that picks one per request. */
export function tiersWithoutTier(): string {
  return `"tiers" needs a "tier": 'user:<field>' or a function naming a request's tier`;
}

// Quota calendars: `periodAt`'s errors (a caller's bug, or a time the calendar cannot place).

/** A `periodAt` argument (`now`, `anchor`) that is not a finite Unix time. */
export function calendarTimeNotFinite(argument: string, value: number): string {
  return `periodAt: ${argument} must be a finite Unix time in ms, got ${value}`;
}

/** A `periodAt` period that is none of `periods`. */
export function calendarPeriodUnknown(period: unknown, periods: readonly string[]): string {
  return `periodAt: period must be one of ${periods.join(', ')}, got ${String(period)}`;
}

/** A `periodAt` time zone that is not an IANA one. */
export function calendarZoneUnknown(timeZone: unknown): string {
  return `periodAt: timeZone must be an IANA time zone, got ${String(timeZone)}`;
}

/**
 * A `periodAt` time the calendar cannot place: no `period` in `timeZone` (from `anchor`, when one
 * is given) with finite bounds holds `now`.
 */
export function calendarCannotPlace(period: string, timeZone: string, now: number, anchor?: number): string {
  const from = anchor === undefined ? '' : ` anchored at ${anchor}`;
  const outside = anchor === undefined ? 'that time' : 'the anchor';
  return `periodAt: no ${period} in ${timeZone}${from} holds ${now}: ${outside} is outside the dates the calendar can place`;
}

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
    'must be a Redis client (ioredis or iovalkey Redis or Cluster, node-redis v5), as in new RedisStore({ client: redis })',
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
 * Logged once per Redis server (`node`: a Cluster master's address) whose `maxmemory-policy` can
 * evict the store's keys (`maxmemory` 0: no limit set yet).
 */
export function evictingRedis(policy: string, maxmemory: number, node?: string): string {
  const limit = maxmemory > 0 ? `maxmemory ${maxmemory} bytes` : 'a maxmemory (none is set now)';
  return (
    `Redis${node === undefined ? '' : ` ${node}`} has maxmemory-policy ${policy}: once it reaches ${limit} it evicts ` +
    "keys, this store's among them (each has a TTL), and a limit whose key is evicted starts again from nothing " +
    '(a full burst, a fresh window or quota, no slots held), admitting more than it allows. Give the limiter a Redis ' +
    'whose maxmemory-policy is noeviction (see "Memory and eviction" in docs/08-redis-in-production.md)'
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

/**
 * A cost of a request whose rule settles (`Rule.debt`) that is not a finite number >= 0; `argument`
 * names what holds it (`requests[1].cost`).
 */
export function invalidReservedCost(where: string, argument: string, cost: unknown): string {
  return invalidArgument(
    where,
    argument,
    cost,
    'must be a finite number >= 0 (the tokens the request reserves: one whose policy settles may reserve none)',
  );
}

/** A store's `settle` given `settles` that is not a list. */
export function invalidSettles(where: string, settles: unknown): string {
  return invalidArgument(where, 'settles', settles, 'must be a list of settles such as { decision, actual }');
}

/** A settle of a store's `settle` call that is not `{ decision, actual }`. */
export function invalidSettle(where: string, index: number, settle: unknown): string {
  return invalidArgument(where, `settles[${index}]`, settle, 'must be a settle such as { decision, actual }');
}

/** A settle's `actual` that is not a finite number >= 0; `argument` names it (`settles[0].actual`). */
export function invalidSettleActual(where: string, argument: string, actual: unknown): string {
  return invalidArgument(where, argument, actual, 'must be a finite number >= 0 (the tokens the request costs in all)');
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
  return invalidOption('redis', withoutPassword(redis), 'needs the "ioredis" package: npm install ioredis');
}

/** A `redis` option as a message may show it: a URL's credentials and an options object's `password` as `***`. */
export function withoutPassword(redis: unknown): unknown {
  if (typeof redis === 'string') return redis.replace(/\/\/[^/@]*@/, '//***@');
  if (typeof redis === 'object' && redis !== null && 'password' in redis) return { ...redis, password: '***' };
  return redis;
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
