import type { ExecutionContext } from '@nestjs/common';
import type { CostSource } from '../policy/policy.types.js';
import { headerValue, type LimitedRequest } from './identity.js';

/** A decimal number, as a cost header or query parameter must be written. */
const DECIMAL = /^\d{1,15}(\.\d{1,15})?$/;

/**
 * Tokens a request takes under a policy's `cost`. A header or query value must be a positive
 * decimal number; anything else (absent, `abc`, `-1`, `1e400`, `0`) is `defaultCost`, never an
 * error, and so is whatever a cost function returns that is not a finite number > 0. Under a
 * policy that settles (`orNothing`), 0 is a cost too: an estimate of nothing up front.
 */
export function resolveCost(
  cost: CostSource,
  defaultCost: number,
  request: LimitedRequest,
  context: ExecutionContext,
  orNothing = false,
): number | Promise<number> {
  if (typeof cost === 'number') return cost;
  if (typeof cost === 'function') {
    const raw = cost(context, request);
    const pending = typeof (raw as PromiseLike<unknown> | undefined)?.then === 'function';
    return pending
      ? Promise.resolve(raw).then((value) => validCost(value, defaultCost, orNothing))
      : validCost(raw, defaultCost, orNothing);
  }
  let raw: unknown;
  if (cost.startsWith('header:')) raw = headerValue(request, cost.slice('header:'.length).toLowerCase());
  else {
    const value = request.query?.[cost.slice('query:'.length)];
    raw = Array.isArray(value) ? value[0] : value;
  }
  return validCost(raw, defaultCost, orNothing);
}

/** A cost as read from the request or a function: a positive finite number (or 0, `orNothing`), else `defaultCost`. */
function validCost(raw: unknown, defaultCost: number, orNothing: boolean): number {
  const parsed = typeof raw === 'string' ? (DECIMAL.test(raw) ? Number(raw) : NaN) : raw;
  return typeof parsed === 'number' && Number.isFinite(parsed) && (parsed > 0 || (orNothing && parsed === 0))
    ? parsed
    : defaultCost;
}
