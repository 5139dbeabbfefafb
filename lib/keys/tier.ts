import type { ExecutionContext } from '@nestjs/common';
import type { TierSource } from '../policy/policy.types.js';
import type { LimitedRequest } from './identity.js';
import { isThenable, withinTimeout } from './source-promise.js';

type Named = string | undefined | Promise<string | undefined>;

/** A run of the guard as a tier source reads it (see `LimitedCall`): its request, and the record its tiers are kept on. */
interface TierReader {
  readonly request: LimitedRequest;
  readonly context: ExecutionContext;
  readonly record: { tiers?: Map<TierSource, Named> };
}

/**
 * The tier a request names through `source`, or `undefined` when it names none: `'user:<field>'`
 * reads `req.user[field]`; a function is called once per request: its answer, or its promise,
 * is kept on the run's record (see `CallRecord.tiers`) for every policy and every run of the guard
 * on the request that reads it. A string or a finite number names a tier; anything
 * else, a function that throws or rejects, and a promise that does not settle within `timeoutMs`
 * (the module's `timeout`), names none (the policy's `defaultTier` applies).
 */
export function resolveTier(source: TierSource, { request, context, record }: TierReader, timeoutMs: number): Named {
  if (typeof source !== 'function')
    return tierName((request.user as Record<string, unknown> | null | undefined)?.[source.slice('user:'.length)]);
  const memo = (record.tiers ??= new Map<TierSource, Named>());
  if (memo.has(source)) return memo.get(source);
  const named = callTier(source, context, timeoutMs);
  memo.set(source, named);
  return named;
}

/** What a late tier's promise is rejected with: named by no one, so made once. */
const LATE = new Error('a tier function did not answer within the timeout');

function callTier(source: Exclude<TierSource, string>, context: ExecutionContext, timeoutMs: number): Named {
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
