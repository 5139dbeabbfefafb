import type { Outcome, Rule } from '../algorithms/algorithm.types.js';
import { ceilSeconds } from '../algorithms/conversions.js';
import { RELEASED } from '../algorithms/registry.js';
import type { RateLimitDecision, RateLimitRequest } from './rate-limit-store.interface.js';

/**
 * What an admitted decision took: its request, and when, ms on the store's clock (the charged state's
 * `at`); after a settle, what it has taken in all and when it last took more.
 */
export interface Charge {
  request: RateLimitRequest;
  at: number;
  /**
   * Tokens taken so far, once a settle (`RateLimitStore.settle`) made the request's cost up to
   * this; absent: `request.cost`, what it took up front. See `chargedCost`.
   */
  cost?: number;
}

/** Hands back the object it is given: a subclass constructed on it adds its private fields to that object. */
class OnTarget {
  constructor(target: object) {
    return target;
  }
}

/**
 * The charge behind each admitted decision a store made, kept on the decision object itself as a
 * private field: what a store's `refund(decisions)` gives back, and as of when (a window that has
 * ended since keeps nothing to give back; a log drops the entries taken at that ms). A refund
 * takes it, so a decision is given back once however often it is refunded, and a refund that
 * failed puts it back, so the next one tries again. A private
 * field is invisible to everything but this class (keys, JSON, `util.inspect`, deep equality),
 * so the public `RateLimitDecision` keeps its shape and its plain prototype, and it lives exactly
 * as long as the decision. A `WeakMap` would do the same at about 1 µs per decision (its entries
 * cost the garbage collector that much), three times what a memory-store decision costs; this
 * costs a few ns.
 */
class ChargeOf extends OnTarget {
  #charge: Charge | undefined;

  private constructor(decision: RateLimitDecision, charge: Charge) {
    super(decision);
    this.#charge = charge;
  }

  static stamp(decision: RateLimitDecision, charge: Charge): void {
    new ChargeOf(decision, charge);
  }

  static take(decision: RateLimitDecision): Charge | undefined {
    if (!(#charge in decision)) return undefined;
    const stamped = decision as unknown as ChargeOf;
    const charge = stamped.#charge;
    stamped.#charge = undefined;
    return charge;
  }

  static peek(decision: RateLimitDecision): Charge | undefined {
    return #charge in decision ? (decision as unknown as ChargeOf).#charge : undefined;
  }

  static restore(decision: RateLimitDecision, charge: Charge): void {
    // only on a decision `toDecision` stamped: no other can be made to give back what it never took
    if (#charge in decision) (decision as unknown as ChargeOf).#charge = charge;
  }
}

/**
 * A rule's limit in whole tokens, as decisions and headers show it (`limit`, `q`,
 * `X-RateLimit-Limit`): `burst`, or a scaled window's `Rule.limit` rounded down, and at least 1,
 * as a window that holds nothing admits a request of any cost up to `burst` (see `windowLimit`).
 */
export function limitOf(rule: Pick<Rule, 'burst' | 'limit'>): number {
  return rule.limit === undefined ? rule.burst : Math.max(1, Math.floor(rule.limit));
}

/**
 * Turns an algorithm's millisecond outcome into the public decision, the same for every store. A
 * `concurrency` policy's slot comes back when a request ends, not with time: refused, it says
 * retry in 1 s, and its `resetAfter` is 0 while a slot is left, else 1.
 */
export function toDecision(request: RateLimitRequest, outcome: Outcome): RateLimitDecision {
  const decision = decisionOf(request, outcome);
  if (outcome.allowed && outcome.at !== undefined) ChargeOf.stamp(decision, { request, at: outcome.at });
  return decision;
}

/**
 * Makes a decision object with its eight fields, in `RateLimitDecision`'s order: a plain object (its
 * prototype is `Object.prototype`, as a literal's), made by a constructor rather than as a literal
 * because V8 then leaves room inside the object for a few more fields. The charge a store stamps on
 * an admitted decision (see `ChargeOf`) goes there, where on a literal, sized to its eight fields, it
 * would add a property array of its own: 40 bytes more per decision.
 */
const PlainDecision = function (
  this: RateLimitDecision,
  allowed: boolean,
  policy: string,
  limit: number,
  remaining: number,
  resetAfter: number,
  fullAfter: number,
  retryAfter: number,
  delay: number,
) {
  this.allowed = allowed;
  this.policy = policy;
  this.limit = limit;
  this.remaining = remaining;
  this.resetAfter = resetAfter;
  this.fullAfter = fullAfter;
  this.retryAfter = retryAfter;
  this.delay = delay;
} as unknown as new (...fields: [boolean, string, number, number, number, number, number, number]) => RateLimitDecision;
PlainDecision.prototype = Object.prototype;

/** `toDecision` without the charge record: a decision that took nothing (a settle's answer). */
function decisionOf(request: RateLimitRequest, outcome: Outcome): RateLimitDecision {
  // a slot (`concurrency`) comes back when a request ends, which no time tells: ask again in a second
  const released = RELEASED.has(request.rule.algorithm);
  const decision = new PlainDecision(
    outcome.allowed,
    request.policy,
    limitOf(request.rule),
    outcome.remaining,
    released ? (outcome.remaining > 0 ? 0 : 1) : ceilSeconds(outcome.nextMs),
    ceilSeconds(outcome.fullMs),
    outcome.allowed ? 0 : outcome.retryMs < 0 ? Infinity : released ? 1 : Math.max(1, ceilSeconds(outcome.retryMs)),
    outcome.delayMs / 1000,
  );
  if (request.tier !== undefined) decision.tier = request.tier;
  // only when owed: every other decision keeps its shape
  if (outcome.debt !== undefined && outcome.debt > 0) decision.debt = outcome.debt;
  return decision;
}

/**
 * What an admitted decision of `consume` took, for its refund, taken off the decision: a second
 * call gets `undefined`, so a decision refunded twice (say, in a `catch` and again in a
 * `finally`) gives its charge back once. `undefined` too for a refused decision (it took
 * nothing) and for one `toDecision` did not make: a store of your own that decides with
 * `nestjs-ratelimit/store` gets the same record as the built-in ones.
 */
export function takeCharge(decision: RateLimitDecision): Charge | undefined {
  return ChargeOf.take(decision);
}

/**
 * When the store took what `decision` admitted, ms on the store's clock (its charge's `at`), without
 * taking the charge; `undefined` for a decision that holds none (refused, given back, another
 * store's). What a share of a bucket (see `Shares`) reads to know the window it was taken in.
 */
export function chargedAt(decision: RateLimitDecision): number | undefined {
  return ChargeOf.peek(decision)?.at;
}

/**
 * Puts back on `decision` the charge `takeCharge` took off it, for a refund that failed (its
 * server out of reach): the next refund of the decision tries again. A store puts back only what
 * its failed call was to give back; what it gave back stays taken, so it is given back once.
 * Does nothing to a decision `toDecision` did not stamp.
 *
 * @example
 * const charge = takeCharge(decision);
 * if (charge !== undefined) await giveBack(charge).catch((error) => { restoreCharge(decision, charge); throw error; });
 */
export function restoreCharge(decision: RateLimitDecision, charge: Charge): void {
  ChargeOf.restore(decision, charge);
}

/**
 * Tokens a charge has taken so far: what a settle made it (`Charge.cost`), else what its request
 * took up front. What a refund gives back, and what a settle makes up the difference from.
 *
 * @example const refunded = model.refund(current, rule, chargedCost(charge), charge.at);
 */
export function chargedCost(charge: Charge): number {
  return charge.cost ?? charge.request.cost;
}

/**
 * What a settle of `charge` to `actual` tokens leaves, from `outcome`, the bucket after it (as
 * `settleState` reports it, or a Redis refund call): the charge to put back on its decision
 * (`restoreCharge`), now `actual` tokens, and as of the settle's time (`outcome.at`) when it took
 * more, so that a later give-back comes from the window it was taken in; and the decision the
 * settle answers, the bucket as a peek of a request of cost 0 sees it, which records no charge
 * (refunding it gives nothing back).
 *
 * @example
 * const { next, changed, outcome } = settleState(state, now, charge.request.rule, chargedCost(charge), actual, charge.at);
 * const settled = settledCharge(charge, actual, outcome);
 * restoreCharge(decision, settled.charge);
 * return settled.decision;
 */
export function settledCharge(
  charge: Charge,
  actual: number,
  outcome: Outcome,
): { charge: Charge; decision: RateLimitDecision } {
  const at = actual > chargedCost(charge) && outcome.at !== undefined ? outcome.at : charge.at;
  return { charge: { request: charge.request, at, cost: actual }, decision: decisionOf(charge.request, outcome) };
}
