import type { Rule } from '../algorithms/algorithm.types.js';
import {
  invalidCost,
  invalidRepeatedKey,
  invalidRequest,
  invalidRequestKey,
  invalidRequests,
  invalidReservedCost,
  invalidSettle,
  invalidSettleActual,
  invalidSettles,
} from '../rate-limit.messages.js';
import type { RateLimitDecision, RateLimitRequest, RateLimitSettle } from './rate-limit-store.interface.js';

/**
 * Requests of one call up to which a repeated key is looked for by comparing every pair: a
 * request has a few policies, and a few comparisons cost less than a `Set`.
 */
const PAIRWISE_UP_TO = 8;

/**
 * Checks a cost, the one rule for the engine and every store: a finite number > 0, tokens
 * (fractions allowed); or >= 0 for a request of a rule that settles (`Rule.debt`), which may
 * reserve nothing up front and be charged its real cost when it ends. Anything else would reach an
 * algorithm as NaN, give tokens back (a negative cost) or fail a Redis script call, with every
 * request batched in it.
 *
 * @param where the call, for the message (`RateLimiterService.consume`)
 * @param argument what holds the cost (`cost`, `requests[1].cost`)
 * @param settles whether the request's rule settles (has a `debt`): a cost of 0 is then valid
 * @throws TypeError for a cost that is not a number, RangeError for a number that is not finite
 * and > 0 (>= 0 when `settles`)
 * @example checkCost(request.cost, 'MyStore.consume', 'requests[0].cost', request.rule.debt !== undefined)
 */
export function checkCost(cost: unknown, where: string, argument: string, settles = false): asserts cost is number {
  if (validCost(cost, settles)) return;
  throw typeof cost !== 'number'
    ? new TypeError(costMessage(where, argument, cost, settles))
    : new RangeError(costMessage(where, argument, cost, settles));
}

/** Whether `checkCost` takes `cost`: what a caller that names the argument only for a bad one asks first. */
function validCost(cost: unknown, settles: boolean): cost is number {
  return typeof cost === 'number' && (settles ? cost >= 0 : cost > 0) && cost < Infinity;
}

/** What a bad cost's error says: a reservation's rule when the request settles. */
function costMessage(where: string, argument: string, cost: unknown, settles: boolean): string {
  return settles ? invalidReservedCost(where, argument, cost) : invalidCost(where, argument, cost);
}

/**
 * Checks a settle's `actual`, what a request costs in all: a finite number >= 0, tokens.
 *
 * @throws TypeError for one that is not a number, RangeError for a number that is not finite and >= 0
 */
function checkActual(actual: unknown, where: string, argument: string): asserts actual is number {
  if (typeof actual !== 'number') throw new TypeError(invalidSettleActual(where, argument, actual));
  if (!(actual >= 0 && actual < Infinity)) throw new RangeError(invalidSettleActual(where, argument, actual));
}

/**
 * Checks the settles of a store's `settle` call, before anything is taken or given back: a list of
 * `{ decision, actual }`, each `actual` a finite number >= 0.
 *
 * @param where the call, for messages (`MemoryStore.settle`)
 * @throws TypeError or RangeError naming the bad settle and field (never `RateLimitStoreError`)
 * @example checkSettles(settles, 'MyStore.settle');
 */
export function checkSettles(settles: readonly RateLimitSettle[], where: string): void {
  // a JavaScript caller may pass anything: checked apart, as `Array.isArray` would narrow `settles` to `any[]`
  const list: unknown = settles;
  if (!Array.isArray(list)) throw new TypeError(invalidSettles(where, list));
  for (let i = 0; i < settles.length; i++) {
    const settle: unknown = settles[i];
    if (typeof settle !== 'object' || settle === null || typeof (settle as RateLimitSettle).decision !== 'object')
      throw new TypeError(invalidSettle(where, i, settle));
    checkActual((settle as RateLimitSettle).actual, where, `settles[${i}].actual`);
  }
}

/** Whether two rules are the same in every field, a scaled window's limit included: the one test of a rule for a bucket. */
export function sameRule(a: Rule, b: Rule): boolean {
  return (
    a.algorithm === b.algorithm &&
    a.rps === b.rps &&
    a.burst === b.burst &&
    a.blockMs === b.blockMs &&
    a.blockResets === b.blockResets &&
    a.anchor === b.anchor &&
    a.origin === b.origin &&
    a.limit === b.limit &&
    a.debt === b.debt
  );
}

/** A store call's requests with each key once. */
export interface DistinctRequests {
  /** The requests to decide, each key once, in the order first given. */
  requests: readonly RateLimitRequest[];
  /**
   * For each request given, the index of its key's request in `requests`; `undefined` when no
   * key repeats (the common case: then `requests` is the list given).
   */
  positions: number[] | undefined;
}

/**
 * Checks the requests of a store call (`consume` or `peek`) and gives each bucket key once: a
 * key repeated with the same rule and cost is decided once, and each of its requests gets
 * that decision; one repeated with another rule or cost is refused. Two entries for one key
 * would otherwise each read the bucket as it was and each write it back: charged once or twice
 * depending on the algorithm and the store, and in memory two rows for one key.
 *
 * @param where the call, for messages (`MemoryStore.consume`)
 * @throws TypeError or RangeError naming the bad request and field (never `RateLimitStoreError`:
 * the caller's mistake, not the store's failure)
 */
export function distinctRequests(requests: readonly RateLimitRequest[], where: string): DistinctRequests {
  if (!repeatsKeys(requests, where)) return { requests, positions: undefined };
  const n = requests.length;
  const distinct: RateLimitRequest[] = [];
  /** Index in `requests` of each distinct request, for messages. */
  const given: number[] = [];
  const at = new Map<string, number>();
  const positions: number[] = new Array<number>(n);
  for (let i = 0; i < n; i++) {
    const request = requests[i];
    const seen = at.get(request.key);
    if (seen === undefined) {
      at.set(request.key, (positions[i] = distinct.length));
      distinct.push(request);
      given.push(i);
      continue;
    }
    const first = distinct[seen];
    if (!sameRule(first.rule, request.rule)) {
      throw new TypeError(invalidRepeatedKey(where, given[seen], i, request.key, 'rule'));
    }
    if (first.cost !== request.cost)
      throw new TypeError(invalidRepeatedKey(where, given[seen], i, request.key, 'cost'));
    positions[i] = seen;
  }
  return { requests: distinct, positions };
}

/**
 * The decisions for the requests as given, from those for their distinct keys: each its own
 * copy, with its own request's policy name.
 */
export function spreadDecisions(
  decisions: readonly RateLimitDecision[],
  requests: readonly RateLimitRequest[],
  positions: readonly number[],
): RateLimitDecision[] {
  return requests.map((request, i) => ({ ...decisions[positions[i]], policy: request.policy }));
}

/**
 * The checks of `distinctRequests`, with no object made for a call that repeats no key (every call
 * the module makes): whether some bucket key is given twice.
 *
 * @throws TypeError or RangeError naming the bad request and field
 */
export function repeatsKeys(requests: readonly RateLimitRequest[], where: string): boolean {
  // a JavaScript caller may pass anything: checked apart, as `Array.isArray` would narrow `requests` to `any[]`
  const list: unknown = requests;
  if (!Array.isArray(list)) throw new TypeError(invalidRequests(where, list));
  const n = requests.length;
  let repeated = false;
  for (let i = 0; i < n; i++) {
    const request = requests[i];
    if (typeof request !== 'object' || request === null) {
      throw new TypeError(invalidRequest(where, i, request));
    }
    if (typeof request.key !== 'string') throw new TypeError(invalidRequestKey(where, i, request.key));
    // a JavaScript caller may give no rule: the cost is checked as one that does not settle
    const settles = (request.rule as Rule | undefined)?.debt !== undefined;
    // the argument's name is made only for a bad cost: a string per request cost more than the check
    if (!validCost(request.cost, settles)) checkCost(request.cost, where, `requests[${i}].cost`, settles);
    if (n <= PAIRWISE_UP_TO) for (let j = 0; j < i && !repeated; j++) repeated = requests[j].key === request.key;
  }
  if (n > PAIRWISE_UP_TO) repeated = new Set(requests.map((request) => request.key)).size < n;
  return repeated;
}
