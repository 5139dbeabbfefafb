import type { ExecutionContext } from '@nestjs/common';
import type { QuotaAnchor } from '../policy/policy.types.js';
import type { LimitedRequest } from './identity.js';
import { isThenable, withinTimeout } from './source-promise.js';

type Anchored = number | undefined | Promise<number | undefined>;

/** A run of the guard as an anchor function reads it (see `LimitedCall`): its request, and the record its anchors are kept on. */
interface AnchorReader {
  readonly request: LimitedRequest;
  readonly context: ExecutionContext;
  readonly record: { anchors?: Map<QuotaAnchor, Anchored> };
}

/**
 * The period start a quota's `anchor` names for a request, Unix ms, or `undefined` for the
 * calendar's own: called once per request (its answer, or its promise, is kept on the run's
 * record for every policy and every run of the guard on the request that reads it). A `Date` or
 * a finite number names a start; anything else, an invalid date, a function that throws or
 * rejects, and a promise that does not settle within `timeoutMs` (the module's `timeout`), names
 * none: the quota then counts in the calendar's periods, never not at all.
 */
export function resolveQuotaAnchor(
  source: QuotaAnchor,
  { request, context, record }: AnchorReader,
  timeoutMs: number,
): Anchored {
  const memo = (record.anchors ??= new Map<QuotaAnchor, Anchored>());
  if (memo.has(source)) return memo.get(source);
  const anchored = callAnchor(() => source(context, request), timeoutMs);
  memo.set(source, anchored);
  return anchored;
}

/** What a late anchor's promise is rejected with: named by no one, so made once. */
const LATE = new Error('an anchor function did not answer within the timeout');

/** An anchor function's answer as Unix ms (see `resolveQuotaAnchor`), from `call` that runs it. */
export function callAnchor(call: () => ReturnType<QuotaAnchor>, timeoutMs: number): Anchored {
  let raw: unknown;
  try {
    raw = call();
  } catch {
    return undefined;
  }
  if (!isThenable(raw)) return anchorMs(raw);
  return withinTimeout(raw, timeoutMs, () => LATE).then(anchorMs, () => undefined);
}

/** A `Date` or a finite number as Unix ms; anything else `undefined`. */
function anchorMs(value: unknown): number | undefined {
  const ms = value instanceof Date ? value.getTime() : value;
  return typeof ms === 'number' && Number.isFinite(ms) ? ms : undefined;
}
