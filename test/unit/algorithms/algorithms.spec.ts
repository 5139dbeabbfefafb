import fc from 'fast-check';
import { ALGORITHMS, type Held, type Rule } from '../../../lib/algorithms/algorithm.types.js';
import { decideAll, expiresAt, modelOf, MODELS, settleState } from '../../../lib/algorithms/decide.js';
import { tokenBucket } from '../../../lib/algorithms/token-bucket.js';
import { type Charge, chargedCost, settledCharge, toDecision } from '../../../lib/stores/decision.js';
import { CASE_EPOCH, CASES, longestTtlMs, monthlyBillionSteps, ruleOf } from '../../cases/index.js';

describe.each(CASES)('%s (pure, fixed instants)', (_algorithm, cases) => {
  describe.each(cases)('$name', ({ rule, steps }) => {
    it('decides every step as the table says', () => {
      let state: Held | undefined;
      // what each admitted step took, and when (its charged state's `at`), for a later `release` or `settle`
      const charges = new Map<number, Charge>();
      steps.forEach(({ at, cost = 1, rule: changed = rule, release, settle, expect: expected }, step) => {
        // as the stores do: a charge of nothing (a reservation of 0) gives nothing back
        if (release !== undefined && chargedCost(charges.get(release)!) > 0) {
          const charge = charges.get(release)!;
          const { rule: charged } = charge.request;
          const model = modelOf(charged);
          const current = model.current(state, CASE_EPOCH + at, charged);
          // as the stores do: nothing given back leaves the stored state as it was
          const refunded = model.refund(current, charged, chargedCost(charge), charge.at);
          if (refunded !== current) state = refunded;
        }
        if (settle !== undefined) {
          const charge = charges.get(settle.step)!;
          const {
            next,
            changed: moved,
            outcome,
          } = settleState(state, CASE_EPOCH + at, charge.request.rule, chargedCost(charge), settle.actual, charge.at);
          // as the stores do: a bucket full again is no key
          if (moved) state = outcome.fullMs === 0 ? undefined : next;
          const settled = settledCharge(charge, settle.actual, outcome);
          charges.set(settle.step, settled.charge);
          expect({ step, settled: settled.decision }).toMatchObject({ step, settled: settle.expect ?? {} });
          // a debt exactly: none where the table gives none
          expect({ step, settled: settled.decision.debt }).toEqual({ step, settled: settle.expect?.debt });
        }
        const verdict = decideAll([{ state, rule: changed, cost }], CASE_EPOCH + at, true);
        // as the stores do: a bucket full (a reservation of 0 that found nothing taken) is no key
        if (verdict.allowed || verdict.blocks?.[0])
          state = verdict.outcomes[0].fullMs === 0 ? undefined : verdict.next[0];
        const request = { key: 'k', policy: 'p', rule: changed, cost };
        if (verdict.allowed) charges.set(step, { request, at: verdict.next[0].at });
        const decision = toDecision(request, verdict.outcomes[0]);
        expect({ step, ...decision }).toMatchObject({ step, ...expected });
        expect({ step, debt: decision.debt }).toEqual({ step, debt: expected.debt });
      });
    });
  });
});

describe.each(ALGORITHMS.map((algorithm) => [algorithm]))('%s (pure)', (algorithm) => {
  const tight = ruleOf(algorithm, 1, 2);
  const loose = ruleOf('token_bucket', 100, 100);

  it('charges no policy when one refuses, and every policy when all admit', () => {
    let states: Array<Held | undefined> = [undefined, undefined];
    const request = () => {
      const verdict = decideAll(
        [
          { state: states[0], rule: tight, cost: 1 },
          { state: states[1], rule: loose, cost: 1 },
        ],
        CASE_EPOCH,
        true,
      );
      if (verdict.allowed) states = verdict.next;
      return verdict.outcomes.map((o) => [o.allowed, o.remaining]);
    };
    expect(request()).toEqual([
      [true, 1],
      [true, 99],
    ]);
    expect(request()).toEqual([
      [true, 0],
      [true, 98],
    ]);
    expect(request()).toEqual([
      [false, 0],
      [true, 98],
    ]);
    expect(request()).toEqual([
      [false, 0],
      [true, 98],
    ]);
  });

  it('with blockFor, starts a block only when the policy itself refuses, and never on a peek', () => {
    const blocking: Rule = { ...tight, blockMs: 60_000 };
    let states: Array<Held | undefined> = [undefined, undefined];
    const request = (rules: Rule[], now: number, charge = true) => {
      const verdict = decideAll(
        rules.map((rule, i) => ({ state: states[i], rule, cost: 1 })),
        CASE_EPOCH + now,
        charge,
      );
      if (verdict.allowed) states = verdict.next;
      else verdict.blocks?.forEach((starts, i) => starts && (states[i] = verdict.next[i]));
      return verdict;
    };
    const once: Rule = ruleOf('fixed_window', 1 / 3600, 1);
    expect(request([blocking, once], 0).allowed).toBe(true);
    // refused by the other policy alone: nothing to store, no block
    const other = request([blocking, once], 0);
    expect([other.allowed, other.blocks]).toEqual([false, undefined]);
    expect(request([blocking], 0).outcomes[0]).toMatchObject({ allowed: true, remaining: 0 });
    // a peek sees the refusal coming, and starts nothing
    expect(request([blocking], 0, false).blocks).toBeUndefined();
    // a cost above burst is refused as never admittable, without a block
    const never = decideAll([{ state: states[0], rule: blocking, cost: 3 }], CASE_EPOCH, true);
    expect([never.outcomes[0].retryMs, never.blocks]).toEqual([-1, undefined]);
    const refused = request([blocking], 0);
    expect(refused.blocks).toEqual([true]);
    expect(refused.outcomes[0]).toMatchObject({
      allowed: false,
      remaining: 0,
      retryMs: 60_000,
      fullMs: 60_000,
      nextMs: 60_000,
    });
    // retrying during the block does not lengthen it, and the key lives until it ends
    expect(request([blocking], 30_000).outcomes[0]).toMatchObject({ allowed: false, retryMs: 30_000 });
    expect(expiresAt(MODELS[algorithm], states[0]!, blocking)).toBe(CASE_EPOCH + 60_000);
    expect(request([blocking], 60_000).outcomes[0]).toMatchObject({ allowed: true, remaining: 1 });
  });

  it('only looks when not charging', () => {
    const verdict = decideAll([{ state: undefined, rule: tight, cost: 2 }], CASE_EPOCH, false);
    expect(verdict.outcomes[0]).toMatchObject({ allowed: true, remaining: 2 });
    expect(decideAll([{ state: verdict.next[0], rule: tight, cost: 2 }], CASE_EPOCH, true).allowed).toBe(true);
  });

  it('keeps remaining within [0, burst] and the key within the time from empty to full, whatever the clock does', () => {
    const rule: Rule = ruleOf(algorithm, 3, 4);
    const model = MODELS[algorithm];
    let state: Held | undefined;
    let latest = 0;
    for (const at of [1_000, 900, 5_000, 4_000, 5_001, 0, 5_001, 5_002, 9_000, 2_000]) {
      const verdict = decideAll([{ state, rule, cost: 1 }], CASE_EPOCH + at, true);
      if (verdict.allowed) {
        state = verdict.next[0];
        latest = Math.max(latest, CASE_EPOCH + at);
        // counted from the latest time the key has seen, which a clock gone back does not undo
        const lives = expiresAt(model, state, rule) - latest;
        expect(lives).toBeGreaterThanOrEqual(1);
        expect(lives).toBeLessThanOrEqual(longestTtlMs(rule));
      }
      expect(verdict.outcomes[0].remaining).toBeGreaterThanOrEqual(0);
      expect(verdict.outcomes[0].remaining).toBeLessThanOrEqual(rule.burst);
    }
  });
});

describe.each(ALGORITHMS.map((algorithm) => [algorithm]))('%s (pure, rule changed between requests)', (algorithm) => {
  // larger and smaller bursts, faster and slower rates, longer and shorter windows
  const rules = [
    ruleOf(algorithm, 10, 100),
    ruleOf(algorithm, 1, 30),
    ruleOf(algorithm, 2, 20),
    ruleOf(algorithm, 0.5, 5),
  ];

  it('reports remaining within [0, burst] and every time within what the current rule can need', () => {
    const steps = fc.array(
      fc.record({
        after: fc.integer({ min: 0, max: 5_000 }),
        cost: fc.integer({ min: 1, max: 100 }),
        rule: fc.nat(rules.length - 1),
      }),
      { maxLength: 30 },
    );
    fc.assert(
      fc.property(steps, (history) => {
        let state: Held | undefined;
        let now = CASE_EPOCH;
        for (const [step, { after, cost, rule: which }] of history.entries()) {
          now += after;
          const rule = rules[which];
          const verdict = decideAll([{ state, rule, cost }], now, true);
          if (verdict.allowed) state = verdict.next[0];
          const { remaining, retryMs, fullMs, nextMs, delayMs } = verdict.outcomes[0];
          // the time from empty to full, the longest any key of this rule lives
          const longest = longestTtlMs(rule);
          const within = (ms: number) => ms >= 0 && ms <= longest;
          expect({ step, remaining: remaining >= 0 && remaining <= rule.burst }).toEqual({ step, remaining: true });
          expect({ step, retryMs: retryMs === -1 || within(retryMs) }).toEqual({ step, retryMs: true });
          expect({ step, fullMs: within(fullMs), nextMs: within(nextMs), delayMs: within(delayMs) }).toEqual({
            step,
            fullMs: true,
            nextMs: true,
            delayMs: true,
          });
          // and what a refusal says holds: the same request, that much later, is admitted
          if (retryMs > 0) {
            const later = decideAll([{ state, rule, cost }], now + retryMs, false).outcomes[0];
            expect({ step, admittedAfterRetry: later.allowed }).toEqual({ step, admittedAfterRetry: true });
          }
        }
      }),
      { numRuns: 500 },
    );
  });
});

describe('tokenBucket', () => {
  it('never lets `at` move backwards', () => {
    const rule = ruleOf('token_bucket', 3, 4);
    let state = tokenBucket.current(undefined, 1_000, rule);
    for (const now of [900, 5_000, 4_000, 5_001, 0]) state = tokenBucket.current(state, now, rule);
    expect(state.at).toBe(5_001);
  });

  it('lives until full again', () => {
    const rule = ruleOf('token_bucket', 10, 50);
    expect(expiresAt(tokenBucket, { tokens: 0, at: 0, blockedUntil: 0 }, rule)).toBe(5_000);
    expect(expiresAt(tokenBucket, { tokens: 49.5, at: 0, blockedUntil: 0 }, rule)).toBe(50);
    expect(expiresAt(tokenBucket, { tokens: 50, at: 0, blockedUntil: 0 }, rule)).toBe(1);
  });
});

describe('the 1e9-a-month table rows', () => {
  it('expect 3,858 of the 5,000 requests after the spend: 10 s of 1e9 / 2,592,000 tokens a second', () => {
    const [spend, ...rest] = monthlyBillionSteps();
    expect(spend.cost).toBe(1e9);
    expect(rest).toHaveLength(5_000);
    expect(rest.filter((step) => step.expect.allowed).length).toBe(Math.floor((10 * 1e9) / 2_592_000));
  });
});
