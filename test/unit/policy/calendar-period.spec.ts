import type { Rule } from '../../../lib/algorithms/algorithm.types.js';
import {
  ANCHORED_PERIODS,
  AnchoredPeriods,
  isTimeZone,
  periodAt,
  QUOTA_PERIODS,
  type QuotaPeriod,
  UnplaceableAnchorError,
} from '../../../lib/policy/calendar-period.js';
import { quotaRule } from '../../../lib/policy/quota-rule.js';

const at = (iso: string): number => Date.parse(iso);
const HOUR = 3_600_000;

/**
 * Fixed instants, written in UTC; the comments give the local wall time. In 2026 Europe/Berlin
 * moves to summer time on March 29th (02:00 -> 03:00) and back on October 25th (03:00 -> 02:00);
 * America/New_York on March 8th and November 1st.
 */
describe('periodAt without an anchor', () => {
  it.each<[string, QuotaPeriod, string, string, string, string]>([
    // month ends in Berlin: the last millisecond of January, then the first of February
    [
      'Jan 31 23:59:59.999',
      'month',
      'Europe/Berlin',
      '2026-01-31T22:59:59.999Z',
      '2025-12-31T23:00:00Z',
      '2026-01-31T23:00:00Z',
    ],
    ['Feb 1 00:00', 'month', 'Europe/Berlin', '2026-01-31T23:00:00Z', '2026-01-31T23:00:00Z', '2026-02-28T23:00:00Z'],
    // the same instant, two zones: March in Berlin (00:30), still February in New York (18:30)
    [
      'Mar 1 00:30 Berlin',
      'month',
      'Europe/Berlin',
      '2026-02-28T23:30:00Z',
      '2026-02-28T23:00:00Z',
      '2026-03-31T22:00:00Z',
    ],
    [
      'Feb 28 18:30 New York',
      'month',
      'America/New_York',
      '2026-02-28T23:30:00Z',
      '2026-02-01T05:00:00Z',
      '2026-03-01T05:00:00Z',
    ],
    // ISO weeks (2026-03-01 is a Sunday): Sunday 23:59 is the old week, Monday 00:00 the new one
    ['Sunday 23:59:59.999', 'week', 'UTC', '2026-03-01T23:59:59.999Z', '2026-02-23T00:00:00Z', '2026-03-02T00:00:00Z'],
    ['Monday 00:00', 'week', 'UTC', '2026-03-02T00:00:00Z', '2026-03-02T00:00:00Z', '2026-03-09T00:00:00Z'],
    [
      'Thu Jan 1 (week of Mon Dec 29)',
      'week',
      'UTC',
      '2026-01-01T12:00:00Z',
      '2025-12-29T00:00:00Z',
      '2026-01-05T00:00:00Z',
    ],
    [
      'Monday 00:30 Berlin',
      'week',
      'Europe/Berlin',
      '2026-03-01T23:30:00Z',
      '2026-03-01T23:00:00Z',
      '2026-03-08T23:00:00Z',
    ],
    ['a day', 'day', 'UTC', '2026-06-15T12:00:00Z', '2026-06-15T00:00:00Z', '2026-06-16T00:00:00Z'],
    ['a year', 'year', 'Europe/Berlin', '2026-06-15T12:00:00Z', '2025-12-31T23:00:00Z', '2026-12-31T23:00:00Z'],
    [
      'Dec 31 23:59 Berlin',
      'year',
      'Europe/Berlin',
      '2026-12-31T22:59:00Z',
      '2025-12-31T23:00:00Z',
      '2026-12-31T23:00:00Z',
    ],
  ])('%s: %s in %s', (_label, period, zone, now, start, end) => {
    expect(periodAt(period, zone, at(now))).toEqual({ start: at(start), end: at(end) });
  });

  it.each<[string, QuotaPeriod, string, string, number]>([
    // daylight-saving days are 23 and 25 hours long, their months an hour shorter or longer
    ['Berlin, Mar 29', 'day', 'Europe/Berlin', '2026-03-29T12:00:00Z', 23 * HOUR],
    ['Berlin, Oct 25', 'day', 'Europe/Berlin', '2026-10-25T12:00:00Z', 25 * HOUR],
    ['Berlin, March', 'month', 'Europe/Berlin', '2026-03-15T12:00:00Z', 31 * 24 * HOUR - HOUR],
    ['Berlin, October', 'month', 'Europe/Berlin', '2026-10-15T12:00:00Z', 31 * 24 * HOUR + HOUR],
    ['Berlin, the week of Mar 29', 'week', 'Europe/Berlin', '2026-03-29T12:00:00Z', 7 * 24 * HOUR - HOUR],
    ['Berlin, 2026', 'year', 'Europe/Berlin', '2026-06-01T00:00:00Z', 365 * 24 * HOUR],
    ['New York, Mar 8', 'day', 'America/New_York', '2026-03-08T12:00:00Z', 23 * HOUR],
    ['New York, Nov 1', 'day', 'America/New_York', '2026-11-01T12:00:00Z', 25 * HOUR],
    ['New York, November', 'month', 'America/New_York', '2026-11-15T12:00:00Z', 30 * 24 * HOUR + HOUR],
    ['UTC, Feb 2028 (leap)', 'month', 'UTC', '2028-02-10T00:00:00Z', 29 * 24 * HOUR],
  ])('%s: a %s of the right length', (_label, period, zone, now, length) => {
    const { start, end } = periodAt(period, zone, at(now));
    expect(end - start).toBe(length);
    expect(start).toBeLessThanOrEqual(at(now));
    expect(end).toBeGreaterThan(at(now));
  });

  it('gives the DST days their local midnights', () => {
    expect(periodAt('day', 'Europe/Berlin', at('2026-03-29T12:00:00Z'))).toEqual({
      start: at('2026-03-28T23:00:00Z'),
      end: at('2026-03-29T22:00:00Z'),
    });
    expect(periodAt('day', 'America/New_York', at('2026-11-01T12:00:00Z'))).toEqual({
      start: at('2026-11-01T04:00:00Z'),
      end: at('2026-11-02T05:00:00Z'),
    });
  });

  it('answers from its last period, and leaves it when now moves out either way', () => {
    const march = { start: at('2026-02-28T23:00:00Z'), end: at('2026-03-31T22:00:00Z') };
    expect(periodAt('month', 'Europe/Berlin', at('2026-03-10T00:00:00Z'))).toEqual(march);
    expect(periodAt('month', 'Europe/Berlin', at('2026-03-31T21:59:59.999Z'))).toEqual(march);
    expect(periodAt('month', 'Europe/Berlin', at('2026-03-31T22:00:00Z')).start).toBe(at('2026-03-31T22:00:00Z'));
    expect(periodAt('month', 'Europe/Berlin', at('2026-02-28T22:59:59.999Z')).end).toBe(march.start);
    // another zone or period is its own entry
    expect(periodAt('month', 'UTC', at('2026-03-10T00:00:00Z')).start).toBe(at('2026-03-01T00:00:00Z'));
    expect(periodAt('day', 'Europe/Berlin', at('2026-03-10T00:00:00Z')).start).toBe(at('2026-03-09T23:00:00Z'));
  });
});

describe('periodAt with an anchor', () => {
  it.each<[string, QuotaPeriod, string, string, string, string, string]>([
    // a month anchored on Jan 31st: Feb 28th in February, back on the 31st in March
    [
      'Jan 31, mid February',
      'month',
      'UTC',
      '2026-01-31T00:00:00Z',
      '2026-02-15T00:00:00Z',
      '2026-01-31T00:00:00Z',
      '2026-02-28T00:00:00Z',
    ],
    [
      'Jan 31, Feb 28',
      'month',
      'UTC',
      '2026-01-31T00:00:00Z',
      '2026-02-28T12:00:00Z',
      '2026-02-28T00:00:00Z',
      '2026-03-31T00:00:00Z',
    ],
    [
      'Jan 31, April',
      'month',
      'UTC',
      '2026-01-31T00:00:00Z',
      '2026-04-15T00:00:00Z',
      '2026-03-31T00:00:00Z',
      '2026-04-30T00:00:00Z',
    ],
    [
      'Jan 31, Apr 30',
      'month',
      'UTC',
      '2026-01-31T00:00:00Z',
      '2026-04-30T00:00:00Z',
      '2026-04-30T00:00:00Z',
      '2026-05-31T00:00:00Z',
    ],
    [
      'Jan 31, Feb 29 2028',
      'month',
      'UTC',
      '2026-01-31T00:00:00Z',
      '2028-02-29T12:00:00Z',
      '2028-02-29T00:00:00Z',
      '2028-03-31T00:00:00Z',
    ],
    // anchored after now (k negative): from Mar 31st back to Feb 28th and Jan 31st
    [
      'Mar 31, mid February',
      'month',
      'UTC',
      '2026-03-31T00:00:00Z',
      '2026-02-15T00:00:00Z',
      '2026-01-31T00:00:00Z',
      '2026-02-28T00:00:00Z',
    ],
    [
      'Mar 31, Mar 1',
      'month',
      'UTC',
      '2026-03-31T00:00:00Z',
      '2026-03-01T00:00:00Z',
      '2026-02-28T00:00:00Z',
      '2026-03-31T00:00:00Z',
    ],
    [
      'Mar 31, the anchor itself',
      'month',
      'UTC',
      '2026-03-31T00:00:00Z',
      '2026-03-31T00:00:00Z',
      '2026-03-31T00:00:00Z',
      '2026-04-30T00:00:00Z',
    ],
    // a month keeps its local wall time over daylight saving: the 15th at 10:00 Berlin
    [
      '15th 10:00 Berlin',
      'month',
      'Europe/Berlin',
      '2026-01-15T09:00:00Z',
      '2026-04-01T00:00:00Z',
      '2026-03-15T09:00:00Z',
      '2026-04-15T08:00:00Z',
    ],
    // a year anchored on Feb 29th: Feb 28th in common years, the 29th again in leap years
    [
      'Feb 29 2024, mid 2025',
      'year',
      'UTC',
      '2024-02-29T00:00:00Z',
      '2025-06-01T00:00:00Z',
      '2025-02-28T00:00:00Z',
      '2026-02-28T00:00:00Z',
    ],
    [
      'Feb 29 2024, Feb 27 2025',
      'year',
      'UTC',
      '2024-02-29T00:00:00Z',
      '2025-02-27T23:59:59.999Z',
      '2024-02-29T00:00:00Z',
      '2025-02-28T00:00:00Z',
    ],
    [
      'Feb 29 2024, Mar 2028',
      'year',
      'UTC',
      '2024-02-29T00:00:00Z',
      '2028-03-01T00:00:00Z',
      '2028-02-29T00:00:00Z',
      '2029-02-28T00:00:00Z',
    ],
    [
      'Feb 29 2024, 2023',
      'year',
      'UTC',
      '2024-02-29T00:00:00Z',
      '2023-06-01T00:00:00Z',
      '2023-02-28T00:00:00Z',
      '2024-02-29T00:00:00Z',
    ],
    // a day keeps the anchor's time of day (09:30 Berlin) across the change to summer time
    [
      '09:30 Berlin, Mar 29',
      'day',
      'Europe/Berlin',
      '2026-01-10T08:30:00Z',
      '2026-03-29T10:00:00Z',
      '2026-03-29T07:30:00Z',
      '2026-03-30T07:30:00Z',
    ],
    [
      '09:30 Berlin, Mar 28 after 09:30',
      'day',
      'Europe/Berlin',
      '2026-01-10T08:30:00Z',
      '2026-03-29T07:29:59.999Z',
      '2026-03-28T08:30:00Z',
      '2026-03-29T07:30:00Z',
    ],
    // a skipped local time resolves forward: 02:30 does not exist on Mar 29th in Berlin, 03:30 CEST does
    [
      '02:30 Berlin, Mar 29',
      'day',
      'Europe/Berlin',
      '2026-03-01T01:30:00Z',
      '2026-03-29T05:00:00Z',
      '2026-03-29T01:30:00Z',
      '2026-03-30T00:30:00Z',
    ],
    [
      '02:30 Berlin, Mar 28',
      'day',
      'Europe/Berlin',
      '2026-03-01T01:30:00Z',
      '2026-03-29T01:00:00Z',
      '2026-03-28T01:30:00Z',
      '2026-03-29T01:30:00Z',
    ],
    // a week keeps the anchor's weekday and time (Wednesday 12:00)
    [
      'Wednesday noon',
      'week',
      'UTC',
      '2026-01-07T12:00:00Z',
      '2026-03-01T00:00:00Z',
      '2026-02-25T12:00:00Z',
      '2026-03-04T12:00:00Z',
    ],
    [
      'Wednesday noon, before the anchor',
      'week',
      'UTC',
      '2026-01-07T12:00:00Z',
      '2025-12-31T12:00:00Z',
      '2025-12-31T12:00:00Z',
      '2026-01-07T12:00:00Z',
    ],
  ])('%s: a %s in %s', (_label, period, zone, anchor, now, start, end) => {
    expect(periodAt(period, zone, at(now), at(anchor))).toEqual({ start: at(start), end: at(end) });
  });
});

describe('isTimeZone', () => {
  it.each<[unknown, boolean]>([
    ['UTC', true],
    ['Europe/Berlin', true],
    ['America/New_York', true],
    ['Asia/Kolkata', true],
    ['Mars/Olympus', false],
    ['', false],
    [42, false],
    [null, false],
    [undefined, false],
    [{}, false],
  ])('%j -> %s', (zone, valid) => {
    expect(isTimeZone(zone)).toBe(valid);
  });
});

describe('periodAt input errors', () => {
  it('names the bad argument', () => {
    expect(() => periodAt('month', 'Mars/Olympus', 0)).toThrow(/timeZone .*Mars\/Olympus/);
    expect(() => periodAt('fortnight' as QuotaPeriod, 'UTC', 0)).toThrow(
      /period must be one of day, week, month, year/,
    );
    expect(() => periodAt('month', 'UTC', Number.NaN)).toThrow(/now must be a finite/);
    expect(() => periodAt('month', 'UTC', 0, Number.POSITIVE_INFINITY)).toThrow(/anchor must be a finite/);
    expect(() => periodAt('month', 'UTC', 0, Number.NaN)).toThrow(UnplaceableAnchorError);
    expect(QUOTA_PERIODS).toEqual(['day', 'week', 'month', 'year']);
  });
});

describe('an anchor the calendar cannot place', () => {
  const now = at('2026-03-10T12:00:00Z');
  const quota = (period: QuotaPeriod, timeZone: string): Rule => ({
    algorithm: 'quota',
    rps: 100 / (31 * 86_400),
    burst: 100,
    calendar: { period, timeZone },
  });

  // finite numbers past the dates luxon places in the zone: a timestamp in nanoseconds, and the
  // last valid Date (8.64e15, +275760-09-13 00:00 UTC) in a zone ahead of UTC, whose local time is later
  it.each<[string, number, string]>([
    ['1e300', 1e300, 'UTC'],
    ['1e300', 1e300, 'Europe/Berlin'],
    ['now in nanoseconds', now * 1e6, 'UTC'],
    ['now in nanoseconds', now * 1e6, 'Europe/Berlin'],
    ['8.64e15', 8.64e15, 'Europe/Berlin'],
    ['8.64e15', 8.64e15, 'Asia/Tokyo'],
    ['-1e300', -1e300, 'UTC'],
    ['-1e300', -1e300, 'Europe/Berlin'],
  ])('%s in %s: periodAt and quotaRule throw an UnplaceableAnchorError for every period', (_label, anchor, zone) => {
    for (const period of QUOTA_PERIODS) {
      expect(() => periodAt(period, zone, now, anchor)).toThrow(UnplaceableAnchorError);
      expect(() => quotaRule(quota(period, zone), now, anchor)).toThrow(UnplaceableAnchorError);
    }
    // the calendar's own period is there for the caller to fall back on
    expect(quotaRule(quota('month', zone), now).origin).toBe(periodAt('month', zone, now).start);
  });

  it('says which period, zone, anchor and time, as a RangeError', () => {
    const error = (() => {
      try {
        periodAt('month', 'Europe/Berlin', now, 8.64e15);
      } catch (thrown) {
        return thrown;
      }
    })();
    expect(error).toBeInstanceOf(RangeError);
    expect(error).toMatchObject({
      name: 'UnplaceableAnchorError',
      message: `periodAt: no month in Europe/Berlin anchored at 8640000000000000 holds ${now}: the anchor is outside the dates the calendar can place`,
    });
  });

  it('places the last valid date where the zone is not ahead of UTC, as the 13th of each month', () => {
    expect(periodAt('month', 'UTC', now, 8.64e15)).toEqual({
      start: at('2026-02-13T00:00:00Z'),
      end: at('2026-03-13T00:00:00Z'),
    });
  });

  it('refuses a now the calendar cannot place, as a plain RangeError', () => {
    expect(() => periodAt('day', 'Europe/Berlin', 8.64e15)).toThrow(
      'periodAt: no day in Europe/Berlin holds 8640000000000000: that time is outside the dates the calendar can place',
    );
    expect(() => periodAt('day', 'Europe/Berlin', 8.64e15)).not.toThrow(UnplaceableAnchorError);
  });
});

describe('the anchored periods kept', () => {
  const period = (n: number) => ({ start: n * 10, end: n * 10 + 10 });
  const inside = (n: number) => n * 10 + 5;

  it('evicts the anchor asked least recently, counting an anchor once whatever its calendars', () => {
    const kept = new AnchoredPeriods(3);
    for (const anchor of [1, 2, 3]) kept.set('month', 'UTC', anchor, period(anchor));
    expect(kept.get('month', 'UTC', 1, inside(1))).toEqual(period(1)); // used: 2, 3, 1
    kept.set('day', 'UTC', 3, period(3)); // another calendar of anchor 3, no new anchor: 2, 1, 3
    kept.set('month', 'UTC', 4, period(4)); // a fourth anchor: 2 goes
    const misses = kept.misses;
    expect(kept.get('month', 'UTC', 2, inside(2))).toBeUndefined();
    expect([1, 3, 4].map((anchor) => kept.get('month', 'UTC', anchor, inside(anchor)))).toEqual([1, 3, 4].map(period));
    expect(kept.get('day', 'UTC', 3, inside(3))).toEqual(period(3)); // used: 1, 4, 3
    expect(kept.misses - misses).toBe(1);
    kept.set('month', 'UTC', 5, period(5)); // 1 goes
    expect(kept.get('month', 'UTC', 1, inside(1))).toBeUndefined();
    expect(kept.get('month', 'UTC', 4, inside(4))).toEqual(period(4));
  });

  it('misses a kept period that no longer holds now, and keeps its next one in its place', () => {
    const kept = new AnchoredPeriods(1);
    kept.set('month', 'UTC', 1, period(1));
    expect(kept.get('month', 'UTC', 1, inside(2))).toBeUndefined();
    kept.set('month', 'UTC', 1, period(2));
    expect(kept.get('month', 'UTC', 1, inside(2))).toEqual(period(2));
    expect(kept.misses).toBe(1);
  });

  it("computes each anchor's period once while it holds: periodAt keeps what it computes", () => {
    const now = at('2026-03-10T12:00:00Z');
    const anchors = Array.from({ length: 500 }, (_, i) => at('2026-01-01T00:00:00Z') + i * 1_000);
    const misses = ANCHORED_PERIODS.misses;
    const periods = anchors.map((anchor) => periodAt('month', 'Europe/Berlin', now, anchor));
    for (let round = 0; round < 2; round++) {
      expect(anchors.every((anchor, i) => periodAt('month', 'Europe/Berlin', now, anchor) === periods[i])).toBe(true);
    }
    expect(ANCHORED_PERIODS.misses - misses).toBe(500);
  });

  it('keeps the periods of 50,000 anchors asked over and over: periodAt computes none of them again', () => {
    const now = at('2026-03-10T12:00:00Z');
    // identities with billing dates a second apart, their periods kept as periodAt keeps what it
    // computes (computing 50,000 with luxon would take this test seconds)
    const anchors = Array.from({ length: 50_000 }, (_, i) => at('2025-06-01T00:00:00Z') + i * 1_000);
    const periods = anchors.map((anchor) => ({ start: anchor, end: now + 86_400_000 }));
    anchors.forEach((anchor, i) => ANCHORED_PERIODS.set('month', 'Europe/Berlin', anchor, periods[i]));
    const misses = ANCHORED_PERIODS.misses;
    for (let round = 0; round < 3; round++) {
      expect(anchors.every((anchor, i) => periodAt('month', 'Europe/Berlin', now, anchor) === periods[i])).toBe(true);
    }
    expect(ANCHORED_PERIODS.misses - misses).toBe(0);
  });
});
