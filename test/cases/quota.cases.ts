import type { Rule } from '../../lib/algorithms/algorithm.types.js';
import { CASE_EPOCH, type Case } from './cases.js';

/** A day, ms. */
const DAY = 86_400_000;

/** The months of 2097 that the cases use, ms after `CASE_EPOCH` (2096-10-06, UTC). */
const JAN = Date.UTC(2097, 0, 1) - CASE_EPOCH;
const FEB = Date.UTC(2097, 1, 1) - CASE_EPOCH;
const MAR = Date.UTC(2097, 2, 1) - CASE_EPOCH;
const APR = Date.UTC(2097, 3, 1) - CASE_EPOCH;

/**
 * A quota's rule for one request, as the app makes it (`quotaRule`): `burst` per period, the
 * period starting at `origin` (ms after `CASE_EPOCH`) and lasting `periodMs`.
 */
function qt(origin: number, periodMs: number, burst: number): Rule {
  return {
    algorithm: 'quota',
    rps: (burst * 1000) / periodMs,
    burst,
    origin: CASE_EPOCH + origin,
    calendar: { period: 'month', timeZone: 'UTC' },
  };
}

/** The month rules of 2097: January and March of 31 days, February of 28. */
const jan = (burst: number) => qt(JAN, FEB - JAN, burst);
const feb = (burst: number) => qt(FEB, MAR - FEB, burst);
const mar = (burst: number) => qt(MAR, APR - MAR, burst);

/**
 * The quota at fixed instants (see `index.ts`): counted as a fixed window whose window is the
 * period the request's rule carries (`origin`, and `burst / rps` long), so a refusal waits for
 * the period's end, and a request whose rule names the next period counts from 0.
 */
export const QUOTA_CASES: Case[] = [
  {
    name: 'a period admits the limit, and a refusal waits for its end',
    rule: jan(3),
    steps: [
      // 21 days to the end of January
      {
        at: JAN + 10 * DAY,
        expect: { allowed: true, limit: 3, remaining: 2, retryAfter: 0, resetAfter: 1_814_400, fullAfter: 1_814_400 },
      },
      { at: JAN + 20 * DAY, expect: { allowed: true, remaining: 1, resetAfter: 950_400 } },
      { at: JAN + 20 * DAY, expect: { allowed: true, remaining: 0 } },
      { at: JAN + 20 * DAY, expect: { allowed: false, remaining: 0, retryAfter: 950_400, resetAfter: 950_400 } },
      // 1 ms before the month ends
      { at: FEB - 1, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
      { at: JAN + 20 * DAY, cost: 4, expect: { allowed: false, retryAfter: Infinity } },
    ],
  },
  {
    name: 'a request whose rule names the next period counts from 0',
    rule: jan(2),
    steps: [
      { at: JAN, cost: 2, expect: { allowed: true, remaining: 0 } },
      { at: FEB - 1_000, expect: { allowed: false, remaining: 0, retryAfter: 1 } },
      // February: 28 days
      { at: FEB, rule: feb(2), expect: { allowed: true, remaining: 1, resetAfter: 2_419_200, fullAfter: 2_419_200 } },
      { at: FEB + DAY, rule: feb(2), expect: { allowed: true, remaining: 0, resetAfter: 2_332_800 } },
      { at: FEB + DAY, rule: feb(2), expect: { allowed: false, remaining: 0, retryAfter: 2_332_800 } },
    ],
  },
  {
    name: "a store's clock a little behind the period's start counts in that period",
    rule: jan(3),
    steps: [
      { at: JAN + DAY, cost: 3, expect: { allowed: true, remaining: 0 } },
      // the app chose February; the store's clock is still 500 ms into January's last second
      { at: FEB - 500, rule: feb(3), expect: { allowed: true, remaining: 2, resetAfter: 2_419_200 } },
      { at: FEB + 1_000, rule: feb(3), expect: { allowed: true, remaining: 1 } },
      { at: FEB + 2_000, rule: feb(3), expect: { allowed: true, remaining: 0 } },
      { at: FEB + 2_000, rule: feb(3), expect: { allowed: false, retryAfter: 2_419_198 } },
    ],
  },
  {
    name: "a store's clock a little ahead counts in the next period, as the app's next rule will",
    rule: jan(3),
    steps: [
      { at: JAN + DAY, cost: 3, expect: { allowed: true, remaining: 0 } },
      // the app still chose January; the store has passed its end: February's first request
      { at: FEB + 200, expect: { allowed: true, remaining: 2 } },
      { at: FEB + 300, rule: feb(3), expect: { allowed: true, remaining: 1, resetAfter: 2_419_200 } },
    ],
  },
  {
    name: 'a refund is given back only to the period it was taken from',
    rule: jan(3),
    steps: [
      { at: JAN + DAY, expect: { allowed: true, remaining: 2 } },
      { at: FEB - 2_000, cost: 2, expect: { allowed: true, remaining: 0 } },
      // within January: the 2 of step 1 come back
      { at: FEB - 1_000, release: 1, expect: { allowed: true, remaining: 1 } },
      { at: FEB, rule: feb(3), cost: 3, expect: { allowed: true, remaining: 0 } },
      // January's charge of step 0, given back in February: nothing comes back to February
      { at: FEB + 1_000, rule: feb(3), release: 0, expect: { allowed: false, remaining: 0, retryAfter: 2_419_199 } },
    ],
  },
  {
    name: 'a 31-day month and a 28-day month back to back',
    rule: jan(2),
    steps: [
      { at: JAN, expect: { allowed: true, remaining: 1, resetAfter: 2_678_400, fullAfter: 2_678_400 } },
      { at: FEB - 1, expect: { allowed: true, remaining: 0, resetAfter: 1 } },
      { at: FEB, rule: feb(2), expect: { allowed: true, remaining: 1, resetAfter: 2_419_200, fullAfter: 2_419_200 } },
      { at: MAR - 1, rule: feb(2), expect: { allowed: true, remaining: 0, resetAfter: 1 } },
      { at: MAR - 1, rule: feb(2), expect: { allowed: false, remaining: 0, retryAfter: 1 } },
      { at: MAR, rule: mar(2), expect: { allowed: true, remaining: 1, resetAfter: 2_678_400 } },
    ],
  },
  // settles: 10 a month, a debt of 10
  {
    name: 'settle: past the limit is debt, refused (a reservation of 0 too) until the period ends',
    rule: { ...jan(10), debt: 10 },
    steps: [
      { at: JAN + DAY, cost: 10, expect: { allowed: true, remaining: 0 } },
      {
        at: JAN + 2 * DAY,
        settle: {
          step: 0,
          actual: 15,
          expect: { allowed: false, remaining: 0, retryAfter: (FEB - JAN - 2 * DAY) / 1000, debt: 5 },
        },
        expect: { allowed: false, remaining: 0, retryAfter: (FEB - JAN - 2 * DAY) / 1000, debt: 5 },
      },
      { at: JAN + 2 * DAY, cost: 0, expect: { allowed: false, retryAfter: (FEB - JAN - 2 * DAY) / 1000, debt: 5 } },
      { at: FEB, rule: { ...feb(10), debt: 10 }, cost: 0, expect: { allowed: true, remaining: 10 } },
      { at: FEB, rule: { ...feb(10), debt: 10 }, expect: { allowed: true, remaining: 9 } },
    ],
  },
  {
    name: 'settle: gives nothing back to a period that has ended, and takes more from the one it is in',
    rule: { ...jan(10), debt: 10 },
    steps: [
      { at: JAN + DAY, cost: 8, expect: { allowed: true, remaining: 2 } },
      { at: JAN + DAY, cost: 2, expect: { allowed: true, remaining: 0 } },
      // February: nothing of January's comes back
      {
        at: FEB + DAY,
        rule: { ...feb(10), debt: 10 },
        settle: { step: 0, actual: 1, expect: { allowed: true, remaining: 10 } },
        expect: { remaining: 9 },
      },
      // 2 more, taken in February
      {
        at: FEB + DAY,
        rule: { ...feb(10), debt: 10 },
        settle: { step: 1, actual: 4, expect: { allowed: true, remaining: 7 } },
        expect: { remaining: 6 },
      },
      // given back to February, where it was last taken
      {
        at: FEB + 2 * DAY,
        rule: { ...feb(10), debt: 10 },
        settle: { step: 1, actual: 1, expect: { allowed: true, remaining: 9 } },
        expect: { remaining: 8 },
      },
    ],
  },
];
