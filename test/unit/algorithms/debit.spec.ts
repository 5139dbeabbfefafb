import fc from 'fast-check';
import { ALGORITHMS, type Held, type Rule } from '../../../lib/algorithms/algorithm.types.js';
import { decideAll, expiresAt, modelOf, settleState } from '../../../lib/algorithms/decide.js';
import { ALGORITHM_DESCRIPTORS } from '../../../lib/algorithms/registry.js';
import { CASE_EPOCH, longestTtlMs, ruleOf } from '../../cases/index.js';

/**
 * What a settle may do to a bucket, whatever came before: the model's `debit` (more taken, past
 * empty down to the rule's debt) and `settleState` (a settle up or down), on random histories of
 * charges, reservations of 0 and settles. The tables of cases (test/cases) say what each does at
 * fixed instants; this holds what no table can list.
 */

/** The algorithms whose policies may settle, by their descriptors. */
const SETTLING = ALGORITHMS.filter((algorithm) => ALGORITHM_DESCRIPTORS[algorithm].refuses?.settle === undefined);

describe.each(SETTLING.map((algorithm) => [algorithm]))('%s debit', (algorithm) => {
  const burst = 6;
  /** Every need a request may have, from a reservation of nothing to the whole burst. */
  const needs = Array.from({ length: burst + 1 }, (_, need) => need);

  const step = fc.record({
    after: fc.integer({ min: 0, max: 3_000 }),
    kind: fc.constantFrom('charge', 'charge', 'settle up', 'settle down'),
    cost: fc.constantFrom(0, 0.5, 1, 2, 3, 6, 20),
  });

  it('takes, never gives back, goes no further past empty than the debt, and keeps every time it reports', () => {
    fc.assert(
      fc.property(fc.constantFrom(0, 1, 3, 6, 12), fc.array(step, { maxLength: 20 }), (debt, history) => {
        const rule: Rule = { ...ruleOf(algorithm, 2, burst), debt };
        const model = modelOf(rule);
        let state: Held | undefined;
        let now = CASE_EPOCH;
        /** The last admitted request's charge: what it took, and when. */
        let charge: { cost: number; at: number } | undefined;
        for (const [i, { after, kind, cost }] of history.entries()) {
          now += after;
          if (kind === 'charge') {
            const verdict = decideAll([{ state, rule, cost: Math.min(cost, burst) }], now, true);
            if (verdict.allowed) {
              state = verdict.outcomes[0].fullMs === 0 ? undefined : verdict.next[0];
              charge = { cost: Math.min(cost, burst), at: verdict.next[0].at };
            }
            continue;
          }
          if (charge === undefined) continue;
          const before = model.current(state, now, rule);
          const actual = kind === 'settle up' ? charge.cost + cost : Math.max(0, charge.cost - cost);
          const { next, changed, outcome } = settleState(state, now, rule, charge.cost, actual, charge.at);
          if (kind === 'settle up') {
            // more taken: no need is met sooner than before
            for (const need of needs)
              expect({ i, need, later: model.waitMs(next, rule, need) >= model.waitMs(before, rule, need) }).toEqual({
                i,
                need,
                later: true,
              });
            // at the debt's end, nothing more is taken
            const capped = model.debit!(before, rule, 2 * burst + debt);
            expect(model.debit!(capped, rule, 1)).toBe(capped);
          }
          if (changed) state = outcome.fullMs === 0 ? undefined : next;
          charge = { cost: actual, at: actual > charge.cost ? outcome.at! : charge.at };
          // never below 0 nor above burst; in debt (a reservation of 0 refused) only with a debt
          expect({ i, remaining: outcome.remaining >= 0 && outcome.remaining <= burst }).toEqual({
            i,
            remaining: true,
          });
          // (the sliding window counter's debt bounds this window's count: the last one's weight may add to it)
          if (debt === 0 && algorithm !== 'sliding_window_counter')
            expect({ i, inDebt: !outcome.allowed }).toEqual({ i, inDebt: false });
          // what it owes: whole tokens, reported exactly while a reservation of 0 is refused, with nothing left
          const owed = model.debt!(next, rule);
          expect({ i, debt: outcome.debt, whole: Number.isInteger(owed) }).toEqual({
            i,
            debt: owed > 0 ? owed : undefined,
            whole: true,
          });
          expect({ i, owes: owed > 0, remaining: owed > 0 ? outcome.remaining : 0 }).toEqual({
            i,
            owes: !outcome.allowed,
            remaining: 0,
          });
          if (algorithm !== 'sliding_window_counter') expect({ i, atMost: owed <= debt }).toEqual({ i, atMost: true });
          // the key lives no longer than the time from its debt's end to full
          const lives = expiresAt(model, next, rule) - next.at;
          expect({ i, lives: lives >= 1 && lives <= Math.max(1, longestTtlMs(rule)) }).toEqual({ i, lives: true });
          // and what a refusal says holds: that much later, the request is admitted
          for (const need of needs) {
            const wait = model.waitMs(next, rule, need);
            if (wait === 0) continue;
            const later = decideAll([{ state: next, rule, cost: need }], next.at + wait, false).outcomes[0];
            expect({ i, need, admittedAfterWait: later.allowed }).toEqual({ i, need, admittedAfterWait: true });
          }
        }
      }),
      { numRuns: 300 },
    );
  });

  it('a rule without a debt takes no further than empty', () => {
    const rule = ruleOf(algorithm, 2, burst);
    const model = modelOf(rule);
    const full = model.current(undefined, CASE_EPOCH, rule);
    const spent = model.debit!(full, rule, 100);
    expect(model.remaining(spent, rule)).toBe(0);
    expect(model.waitMs(spent, rule, 0)).toBe(0);
    expect(model.debt!(spent, rule)).toBe(0);
    expect(model.debit!(spent, rule, 1)).toBe(spent);
  });
});

/**
 * What each model's `debt` says at fixed instants: 10 tokens, one a second (windows of 10 s), a
 * debt of 5; all 10 taken, then a settle of 2.5 more. Per algorithm, the debt right after, 1 s and
 * 2.5 s later, 11 s later (in the next window), and once a settle of 100 more has gone as far as it may.
 */
const OWED: Record<string, readonly [number, number, number, number, number]> = {
  // 2.5 below empty, rounded up; refilled at 1 a second
  token_bucket: [3, 2, 0, 0, 5],
  gcra: [3, 2, 0, 0, 5],
  leaky_bucket: [3, 2, 0, 0, 5],
  // 12.5 counted, past the limit of 10 until the window ends
  fixed_window: [3, 3, 3, 0, 5],
  quota: [3, 3, 3, 0, 5],
  // in the next window, 12.5 weighs 0.9: 11.25
  sliding_window_counter: [3, 3, 3, 2, 5],
  // 13 entries (a fractional cost takes a whole one), all at the start: they leave together
  sliding_window_log: [3, 3, 3, 0, 5],
};

describe.each(SETTLING.map((algorithm) => [algorithm]))('%s debt', (algorithm) => {
  const rule: Rule = { ...ruleOf(algorithm, 1, 10), debt: 5 };
  const model = modelOf(rule);

  it('is the whole tokens past empty, rounded up, until time pays them back; 0 before', () => {
    const full = model.current(undefined, CASE_EPOCH, rule);
    const spent = model.charge(full, rule, 10);
    const owing = model.debit!(spent, rule, 2.5);
    const later = (ms: number) => model.debt!(model.current(owing, CASE_EPOCH + ms, rule), rule);
    expect([model.debt!(full, rule), model.debt!(spent, rule)]).toEqual([0, 0]);
    expect([
      model.debt!(owing, rule),
      later(1_000),
      later(2_500),
      later(11_000),
      model.debt!(model.debit!(owing, rule, 100), rule),
    ]).toEqual(OWED[algorithm]);
    // remaining's other side: none left while any is owed
    expect(model.remaining(owing, rule)).toBe(0);
  });

  it('is reported by a rule that settles, and never by one that does not', () => {
    const owing = model.debit!(model.charge(model.current(undefined, CASE_EPOCH, rule), rule, 10), rule, 2.5);
    const peek = (under: Rule) => decideAll([{ state: owing, rule: under, cost: 0 }], CASE_EPOCH, false).outcomes[0];
    expect(peek(rule)).toMatchObject({ allowed: false, remaining: 0, debt: 3 });
    const { debt: _, ...unsettling } = rule;
    expect(peek(unsettling)).not.toHaveProperty('debt');
  });
});

describe.each(
  ALGORITHMS.filter((algorithm) => ALGORITHM_DESCRIPTORS[algorithm].scaledBy === 'limit').map((algorithm) => [
    algorithm,
  ]),
)('%s debt under a factor', (algorithm) => {
  it("counts past the window's scaled limit, as remaining does", () => {
    // a limit of 10 scaled to 5: 7 taken owe 2
    const rule: Rule = { ...ruleOf(algorithm, 1, 10), limit: 5, debt: 5 };
    const model = modelOf(rule);
    const owing = model.debit!(model.charge(model.current(undefined, CASE_EPOCH, rule), rule, 5), rule, 2);
    expect([model.remaining(owing, rule), model.debt!(owing, rule)]).toEqual([0, 2]);
    // reported by the rule that settles; a rule that does not settle is only over its scaled limit
    const peek = (under: Rule) => decideAll([{ state: owing, rule: under, cost: 0 }], CASE_EPOCH, false).outcomes[0];
    expect(peek(rule)).toMatchObject({ allowed: false, remaining: 0, debt: 2 });
    const { debt: _, ...unsettling } = rule;
    expect(peek(unsettling)).not.toHaveProperty('debt');
  });
});

describe('concurrency', () => {
  it('refuses to settle, saying why', () => {
    expect(ALGORITHM_DESCRIPTORS.concurrency.refuses?.settle).toMatch(/slot/);
  });
});
