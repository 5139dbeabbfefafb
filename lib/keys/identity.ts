import type { ExecutionContext } from '@nestjs/common';
import type { KeySource, LimitedRequest } from '../policy/policy.types.js';
import { keyTimedOut } from '../rate-limit.messages.js';
import { isDottedQuad, normalizeIp } from './ip.js';
import { isThenable, KeyTimeoutError, withinTimeout } from './source-promise.js';

export type { LimitedRequest } from '../policy/policy.types.js';
export { KeyTimeoutError } from './source-promise.js';

/** The module options the key sources depend on. */
export interface KeyOptions {
  /** Header of the `'api-key'` source, lower case. */
  apiKeyHeader: string;
  /** IPv6 prefix length clients are grouped by. */
  ipv6Subnet: number;
  /** Longest a key function's promise is awaited, milliseconds. */
  timeout: number;
  /** What a key function past `timeout` makes of the request (see `KeySource`). */
  failMode: 'open' | 'closed' | 'local';
}

/**
 * The identity a request is limited as: the first source of `sources` that yields, as
 * `<source>:<value>` (`user:42`, `api-key:abc`, `ip:1.2.3.4`, `header:x-tenant:acme`,
 * `custom:...` for a function). When none yields, the IP. A request with no usable IP (a Unix
 * socket, a test harness) is `ip:unknown`: a kind of its own that no address can take, one
 * bucket for all such requests, never a bucket per garbage value.
 *
 * A promise only when a key function answers with one: it is awaited for at most `timeout`.
 * Past it, with `failMode` `'local'` the next source is tried; otherwise the promise rejects with
 * `KeyTimeoutError`, for `failMode` to answer. A function that throws, or whose promise rejects,
 * fails the request with its error.
 *
 * `RateLimiterService` takes the same strings, so code can reach a guard's bucket by name.
 */
export function resolveIdentity(
  sources: readonly KeySource[],
  request: LimitedRequest,
  context: ExecutionContext,
  options: KeyOptions,
): string | Promise<string> {
  return identityFrom(0, sources, request, context, options);
}

/** The identity from the first source at or after `start` that yields, else the IP. */
function identityFrom(
  start: number,
  sources: readonly KeySource[],
  request: LimitedRequest,
  context: ExecutionContext,
  options: KeyOptions,
): string | Promise<string> {
  for (let i = start; i < sources.length; i++) {
    const source = sources[i];
    if (typeof source !== 'function') {
      const identity = fromSource(source, request, options);
      if (identity !== undefined) return identity;
      continue;
    }
    const value = source(context);
    if (isThenable(value)) return awaited(value, i, sources, request, context, options);
    const identity = customIdentity(value);
    if (identity !== undefined) return identity;
  }
  return ipIdentity(request, options);
}

/** The identity a key function's promise names, or the next source's when it names none (or, under `failMode: 'local'`, is too late). */
async function awaited(
  value: PromiseLike<unknown>,
  at: number,
  sources: readonly KeySource[],
  request: LimitedRequest,
  context: ExecutionContext,
  options: KeyOptions,
): Promise<string> {
  let identity: string | undefined;
  try {
    identity = customIdentity(
      await withinTimeout(value, options.timeout, () => new KeyTimeoutError(keyTimedOut(options.timeout))),
    );
  } catch (error) {
    if (!(error instanceof KeyTimeoutError) || options.failMode !== 'local') throw error;
  }
  return identity ?? identityFrom(at + 1, sources, request, context, options);
}

/** What a key function returned, as an identity: a non-empty string, else none. */
function customIdentity(value: unknown): string | undefined {
  return typeof value === 'string' && value.length > 0 ? `custom:${value}` : undefined;
}

function ipIdentity(request: LimitedRequest, { ipv6Subnet }: KeyOptions): string {
  const ip = request.ip;
  // an IPv4 address, most clients', is its own identity: checked in one pass, nothing kept for it
  // (a cache of them cost a new client more than it spared a known one)
  if (typeof ip === 'string' && isDottedQuad(ip)) return `ip:${ip}`;
  return `ip:${normalizeIp(ip, ipv6Subnet) ?? 'unknown'}`;
}

function fromSource(
  source: Extract<KeySource, string>,
  request: LimitedRequest,
  options: KeyOptions,
): string | undefined {
  switch (source) {
    case 'ip':
      return ipIdentity(request, options);
    case 'user': {
      const user = request.user;
      const id = user?.id ?? user?.sub;
      // eslint-disable-next-line @typescript-eslint/no-base-to-string -- an id is whatever the app's auth guard set: a string, a number, or an object whose own toString names it (a MongoDB ObjectId)
      return id === undefined || id === null || id === '' ? undefined : `user:${String(id)}`;
    }
    case 'api-key': {
      const value = headerValue(request, options.apiKeyHeader);
      return value === undefined ? undefined : `api-key:${value}`;
    }
    default: {
      const name = source.slice('header:'.length).toLowerCase();
      const value = headerValue(request, name);
      return value === undefined ? undefined : `header:${name}:${value}`;
    }
  }
}

/** A header's value as one non-empty string (the first when repeated), else `undefined`. */
export function headerValue(request: { headers: LimitedRequest['headers'] }, name: string): string | undefined {
  const raw = request.headers[name];
  const value = Array.isArray(raw) ? raw[0] : raw;
  return typeof value === 'string' && value.length > 0 ? value : undefined;
}
