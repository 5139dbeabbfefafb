import type { ExecutionContext } from '@nestjs/common';
import type { TierSource } from '../policy/policy.types.js';
import type { LimitedRequest } from './identity.js';
import { isThenable, withinTimeout } from './source-promise.js';

/**
 * Where a request keeps the tiers its tier functions named: on its target (the object the guard
 * charges once, see `RateLimitContext.target`; a symbol property costs next to nothing), so
 * every policy that reads one function, and every run of the guard on one request, shares one call.
 */
const TIERS = Symbol('nestjs-ratelimit tiers');

type Named = string | undefined | Promise<string | undefined>;

interface WithTiers {
  [TIERS]?: Map<TierSource, Named>;
}

/**
 * The tier a request names through `source`, or `undefined` when it names none: `'user:<field>'`
 * reads `req.user[field]`; a function is called once per `target` (its answer, or its promise,
 * kept for the other policies that read it). A string or a finite number names a tier; anything
 * else, a function that throws or rejects, and a promise that does not settle within `timeoutMs`
 * (the module's `timeout`), names none (the policy's `defaultTier` applies).
 */
export function resolveTier(
  source: TierSource,
  request: LimitedRequest,
  context: ExecutionContext,
  target: object,
  timeoutMs: number,
): Named {
  if (typeof source !== 'function') return tierName((request.user as Record<string, unknown> | null | undefined)?.[source.slice('user:'.length)]);
  const memo = ((target as WithTiers)[TIERS] ??= new Map());
  if (memo.has(source)) return memo.get(source);
  const named = callTier(source, context, timeoutMs);
  memo.set(source, named);
  return named;
}

/** What a late tier's promise is rejected with: named by no one, so made once. */
const LATE = new Error('a tier function did not answer within the timeout');

function callTier(source: Extract<TierSource, Function>, context: ExecutionContext, timeoutMs: number): Named {
  let raw: unknown;
  try {
    raw = source(context);
  } catch {
    return undefined;
  }
  if (!isThenable(raw)) return tierName(raw);
  return withinTimeout(raw, timeoutMs, () => LATE).then(tierName, () => undefined);
}

function tierName(value: unknown): string | undefined {
  if (typeof value === 'string') return value.length > 0 ? value : undefined;
  return typeof value === 'number' && Number.isFinite(value) ? String(value) : undefined;
}
