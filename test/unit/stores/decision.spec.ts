import type { Outcome } from '../../../lib/algorithms/algorithm.types.js';
import {
  type Charge,
  chargedCost,
  restoreCharge,
  settledCharge,
  takeCharge,
  toDecision,
} from '../../../lib/stores/decision.js';
import type { RateLimitDecision, RateLimitRequest } from '../../../lib/stores/rate-limit-store.interface.js';

const REQUEST: RateLimitRequest = {
  key: 'rl:p:tb:1',
  policy: 'p',
  rule: { algorithm: 'token_bucket', rps: 1, burst: 2 },
  cost: 1,
};
const CHARGED_AT = 1_767_225_600_000;
const OUTCOME: Outcome = {
  allowed: true,
  remaining: 1,
  retryMs: 0,
  fullMs: 1_000,
  nextMs: 0,
  delayMs: 0,
  blockedMs: 0,
  at: CHARGED_AT,
};
/** What an admitted decision of `REQUEST` took; what a refund puts back when it failed. */
const CHARGE: Charge = { request: REQUEST, at: CHARGED_AT };

const admitted = (): RateLimitDecision => toDecision(REQUEST, OUTCOME);
const refused = (): RateLimitDecision => toDecision(REQUEST, { ...OUTCOME, allowed: false, retryMs: 1_000 });

/**
 * The charge record behind refunds, step by step: a refund takes it (`take`), and one that failed
 * puts it back (`restore`). Each row lists what every `take` got.
 */
describe('the charge record of a decision', () => {
  it.each<[string, () => RateLimitDecision, ('take' | 'restore')[], (Charge | undefined)[]]>([
    ['an admitted decision is given back once', admitted, ['take', 'take'], [CHARGE, undefined]],
    [
      'a refund that failed puts it back: the next refund gives it back, once',
      admitted,
      ['take', 'restore', 'take', 'take'],
      [CHARGE, CHARGE, undefined],
    ],
    [
      'a refund that failed twice puts it back twice',
      admitted,
      ['take', 'restore', 'take', 'restore', 'take', 'take'],
      [CHARGE, CHARGE, CHARGE, undefined],
    ],
    [
      'a refused decision took nothing, and is given nothing to give back',
      refused,
      ['take', 'restore', 'take'],
      [undefined, undefined],
    ],
    [
      'a copy of a decision carries no charge, and is given none',
      () => ({ ...admitted() }),
      ['take', 'restore', 'take'],
      [undefined, undefined],
    ],
  ])('%s', (_name, make, steps, taken) => {
    const decision = make();
    const got: (Charge | undefined)[] = [];
    for (const step of steps) {
      if (step === 'take') got.push(takeCharge(decision));
      else restoreCharge(decision, CHARGE);
    }
    expect(got).toEqual(taken);
  });
});

describe('a settled charge', () => {
  const after = (allowed: boolean, at: number): Outcome => ({ ...OUTCOME, allowed, remaining: 0, at });

  it('holds what the request cost in all, and the time of a settle that took more', () => {
    const up = settledCharge(CHARGE, 3, after(false, CHARGED_AT + 5_000));
    expect(up.charge).toEqual({ request: REQUEST, at: CHARGED_AT + 5_000, cost: 3 });
    expect(chargedCost(up.charge)).toBe(3);
    // less: given back to where it was last taken, so its time stays
    const down = settledCharge(up.charge, 0.5, after(true, CHARGED_AT + 9_000));
    expect(down.charge).toEqual({ request: REQUEST, at: CHARGED_AT + 5_000, cost: 0.5 });
    expect(chargedCost(CHARGE)).toBe(REQUEST.cost);
  });

  it('answers the bucket after it with a decision that took nothing: refunding that gives nothing back', () => {
    const { decision } = settledCharge(CHARGE, 3, after(true, CHARGED_AT));
    expect(decision).toEqual({
      allowed: true,
      policy: 'p',
      limit: 2,
      remaining: 0,
      resetAfter: 0,
      fullAfter: 1,
      retryAfter: 0,
      delay: 0,
    });
    expect(takeCharge(decision)).toBeUndefined();
  });

  it('carries what the bucket owes past empty, and nothing of a debt where there is none', () => {
    const owing = { ...after(false, CHARGED_AT), retryMs: 3_000, debt: 3 };
    expect(settledCharge(CHARGE, 5, owing).decision).toMatchObject({ allowed: false, remaining: 0, debt: 3 });
    expect(toDecision(REQUEST, owing)).toMatchObject({ allowed: false, remaining: 0, debt: 3 });
    // every other decision keeps its shape
    expect(admitted()).not.toHaveProperty('debt');
    expect(toDecision(REQUEST, { ...OUTCOME, debt: 0 })).not.toHaveProperty('debt');
  });
});
