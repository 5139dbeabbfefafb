import type { Outcome } from '../../../lib/algorithms/algorithm.types.js';
import { type Charge, restoreCharge, takeCharge, toDecision } from '../../../lib/stores/decision.js';
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
