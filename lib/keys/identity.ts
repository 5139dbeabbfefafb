import type { ExecutionContext } from '@nestjs/common';
import type { KeySource } from '../policy/policy.types.js';
import { normalizeIp } from './ip.js';

/** The parts of an Express request or a Fastify request the key sources read. */
export interface KeyedRequest {
  ip?: string;
  headers: Record<string, string | string[] | undefined>;
  user?: { id?: unknown; sub?: unknown } | null;
}

/**
 * The identity a request is limited as: the first source of `sources` that yields, as
 * `<source>:<value>` (`user:42`, `api-key:abc`, `ip:1.2.3.4`, `header:x-tenant:acme`,
 * `custom:...` for a function). When none yields, the IP. A request with no usable IP is
 * `ip:unknown`: one bucket for all such requests, never a bucket per garbage value.
 *
 * `RateLimiterService` takes the same strings, so code can reach a guard's bucket by name.
 */
export function resolveIdentity(
  sources: readonly KeySource[],
  request: KeyedRequest,
  context: ExecutionContext,
  apiKeyHeader: string,
): string {
  for (const source of sources) {
    const identity = fromSource(source, request, context, apiKeyHeader);
    if (identity !== undefined) return identity;
  }
  return `ip:${normalizeIp(request.ip) ?? 'unknown'}`;
}

function fromSource(
  source: KeySource,
  request: KeyedRequest,
  context: ExecutionContext,
  apiKeyHeader: string,
): string | undefined {
  if (typeof source === 'function') {
    const value = source(context);
    return typeof value === 'string' && value.length > 0 ? `custom:${value}` : undefined;
  }
  switch (source) {
    case 'ip':
      return `ip:${normalizeIp(request.ip) ?? 'unknown'}`;
    case 'user': {
      const user = request.user;
      const id = user?.id ?? user?.sub;
      return id === undefined || id === null || id === '' ? undefined : `user:${String(id)}`;
    }
    case 'api-key': {
      const value = headerValue(request, apiKeyHeader);
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
export function headerValue(request: { headers: KeyedRequest['headers'] }, name: string): string | undefined {
  const raw = request.headers[name];
  const value = Array.isArray(raw) ? raw[0] : raw;
  return typeof value === 'string' && value.length > 0 ? value : undefined;
}
