import type { ExecutionContext } from '@nestjs/common';
import type { KeySource, LimitedRequest } from '../policy/policy.types.js';
import { normalizeIp } from './ip.js';

export type { LimitedRequest } from '../policy/policy.types.js';

/** The module options the key sources depend on. */
export interface KeyOptions {
  /** Header of the `'api-key'` source, lower case. */
  apiKeyHeader: string;
  /** IPv6 prefix length clients are grouped by. */
  ipv6Subnet: number;
}

/**
 * The identity a request is limited as: the first source of `sources` that yields, as
 * `<source>:<value>` (`user:42`, `api-key:abc`, `ip:1.2.3.4`, `header:x-tenant:acme`,
 * `custom:...` for a function). When none yields, the IP. A request with no usable IP (a Unix
 * socket, a test harness) is `ip:unknown`: a kind of its own that no address can take, one
 * bucket for all such requests, never a bucket per garbage value.
 *
 * `RateLimiterService` takes the same strings, so code can reach a guard's bucket by name.
 */
export function resolveIdentity(
  sources: readonly KeySource[],
  request: LimitedRequest,
  context: ExecutionContext,
  options: KeyOptions,
): string {
  for (const source of sources) {
    const identity = fromSource(source, request, context, options);
    if (identity !== undefined) return identity;
  }
  return ipIdentity(request, options);
}

/** IPv4 clients whose identity is remembered, at most; the cache is emptied when it is full. */
const CACHED_IPS = 16_384;
/**
 * The identities of recent IPv4 (and IPv4-mapped) addresses, by the address as the framework gave
 * it: a client's next request skips parsing it, and its identity is the same string, whose hash
 * the digest cache (see `digest`) finds at once. IPv6 identities depend on `ipv6Subnet`: not kept.
 */
const ipIdentities = new Map<string, string>();

function ipIdentity(request: LimitedRequest, { ipv6Subnet }: KeyOptions): string {
  const ip = request.ip;
  const known = typeof ip === 'string' ? ipIdentities.get(ip) : undefined;
  if (known !== undefined) return known;
  const address = normalizeIp(ip, ipv6Subnet);
  const identity = `ip:${address ?? 'unknown'}`;
  if (address !== undefined && !address.includes('/')) {
    if (ipIdentities.size >= CACHED_IPS) ipIdentities.clear();
    ipIdentities.set(ip as string, identity);
  }
  return identity;
}

function fromSource(
  source: KeySource,
  request: LimitedRequest,
  context: ExecutionContext,
  options: KeyOptions,
): string | undefined {
  if (typeof source === 'function') {
    const value = source(context);
    return typeof value === 'string' && value.length > 0 ? `custom:${value}` : undefined;
  }
  switch (source) {
    case 'ip':
      return ipIdentity(request, options);
    case 'user': {
      const user = request.user;
      const id = user?.id ?? user?.sub;
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
