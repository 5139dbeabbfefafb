/**
 * Every message this package throws or logs, as small factories, so the wording lives in one
 * place and tests can assert it.
 */

function show(value: unknown): string {
  if (typeof value === 'function') return `a function`;
  if (typeof value === 'string') return JSON.stringify(value.length > 64 ? `${value.slice(0, 64)}…` : value);
  if (typeof value === 'number' || typeof value === 'boolean' || value == null) return String(value);
  try {
    return JSON.stringify(value);
  } catch {
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
