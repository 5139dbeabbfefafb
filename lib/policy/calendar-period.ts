import { DateTime, IANAZone } from 'luxon';
import {
  calendarCannotPlace,
  calendarPeriodUnknown,
  calendarTimeNotFinite,
  calendarZoneUnknown,
} from '../rate-limit.messages.js';

/** The calendar period a `quota` policy counts over; `week` is the ISO week (Monday first). */
export type QuotaPeriod = 'day' | 'week' | 'month' | 'year';

/** Every `QuotaPeriod`, in growing length (for validation messages). */
export const QUOTA_PERIODS: readonly QuotaPeriod[] = Object.freeze(['day', 'week', 'month', 'year'] as const);

/** A period as two Unix instants in milliseconds: `start` inclusive, `end` exclusive. */
export interface CalendarPeriod {
  readonly start: number;
  readonly end: number;
}

/** luxon's unit for adding whole periods to an anchor. */
const PLURAL = { day: 'days', week: 'weeks', month: 'months', year: 'years' } as const;
/** Nominal lengths, only to guess how many whole periods lie between an anchor and now. */
const NOMINAL_MS = { day: 86_400_000, week: 604_800_000 } as const;

/**
 * An anchor whose period `periodAt` cannot compute: not a finite number, or outside the dates
 * luxon can place in the zone (`1e300`, a timestamp in nanoseconds, `8.64e15` in Europe/Berlin,
 * which is past the last valid date there), so no period with finite bounds holds `now`. The
 * caller counts the request in the calendar's own period instead.
 */
export class UnplaceableAnchorError extends RangeError {
  override readonly name = 'UnplaceableAnchorError';
}

/** One anchor's last period in one calendar: an anchor asked in several calendars has one each, chained. */
interface AnchoredEntry {
  readonly period: QuotaPeriod;
  readonly timeZone: string;
  found: CalendarPeriod;
  readonly next: AnchoredEntry | undefined;
}

/**
 * The last period per anchor and calendar, for the `capacity` anchors asked most recently: each
 * identity with its own billing date asks for its period on every request, and luxon's zone
 * math costs tens of µs or more where a look-up costs well under one. Keyed by the anchor itself (a
 * number: nothing is built per look-up); the map's order is the use order, a hit moving its
 * anchor to the end and a new anchor past `capacity` evicting the first.
 */
export class AnchoredPeriods {
  /** Look-ups that found no kept period holding `now`, so that one was computed. */
  misses = 0;
  private readonly byAnchor = new Map<number, AnchoredEntry>();

  constructor(readonly capacity: number) {}

  /**
   * The kept period of `anchor` in the calendar if it holds `now` (the anchor is then the most
   * recently used), else `undefined`.
   */
  get(period: QuotaPeriod, timeZone: string, anchor: number, now: number): CalendarPeriod | undefined {
    const head = this.byAnchor.get(anchor);
    const found = head && entryOf(head, period, timeZone)?.found;
    if (found === undefined || now < found.start || now >= found.end) {
      this.misses++;
      return undefined;
    }
    this.byAnchor.delete(anchor);
    this.byAnchor.set(anchor, head!);
    return found;
  }

  /** Keeps `found` as the period of `anchor` in the calendar, its most recently used. */
  set(period: QuotaPeriod, timeZone: string, anchor: number, found: CalendarPeriod): void {
    const head = this.byAnchor.get(anchor);
    const entry = head && entryOf(head, period, timeZone);
    if (entry !== undefined) entry.found = found;
    this.byAnchor.delete(anchor);
    if (head === undefined && this.byAnchor.size >= this.capacity)
      this.byAnchor.delete(this.byAnchor.keys().next().value!);
    this.byAnchor.set(anchor, entry !== undefined ? head! : { period, timeZone, found, next: head });
  }
}

function entryOf(head: AnchoredEntry, period: QuotaPeriod, timeZone: string): AnchoredEntry | undefined {
  for (let entry: AnchoredEntry | undefined = head; entry !== undefined; entry = entry.next)
    if (entry.period === period && entry.timeZone === timeZone) return entry;
  return undefined;
}

/**
 * Anchors whose periods are kept: 50,000 identities with their own billing dates, each asked
 * over and over, all stay kept, with room to spare. About 170 bytes an anchor (its map entry,
 * its entry and period, their numbers), so 11 MiB when full.
 */
const ANCHORS_KEPT = 65_536;

/** Zone names already looked up: `Intl` is slow to ask, and a policy's zone is asked per request. */
const zoneValidity = new Map<string, boolean>();
/** The last period computed per `period|timeZone` without an anchor: per request, now is nearly always inside it. */
const lastPeriod = new Map<string, CalendarPeriod>();
/** The same per anchor, for the anchors asked most recently (tests read its `misses`). */
export const ANCHORED_PERIODS = new AnchoredPeriods(ANCHORS_KEPT);

/**
 * Whether `zone` is an IANA time zone name that luxon (through `Intl`) knows, such as `'UTC'`
 * or `'Europe/Berlin'`. Fixed offsets (`'UTC+1'`) and `''` are not time zones here.
 *
 * @example
 * isTimeZone('Europe/Berlin'); // true
 * isTimeZone('Mars/Olympus'); // false
 */
export function isTimeZone(zone: unknown): zone is string {
  if (typeof zone !== 'string' || zone === '') return false;
  let valid = zoneValidity.get(zone);
  if (valid === undefined) {
    valid = IANAZone.isValidZone(zone);
    // bounded: names come from policies, but a hostile caller must not grow this without end
    if (zoneValidity.size < 1_000) zoneValidity.set(zone, valid);
  }
  return valid;
}

/**
 * The period `[start, end)` (Unix milliseconds) that contains `now` (Unix milliseconds), in `timeZone`.
 *
 * Without `anchor`, the calendar period: a day runs from local midnight to the next (23 or 25
 * hours on a daylight-saving day), a week from Monday 00:00 (ISO), a month from the 1st 00:00, a
 * year from January 1st 00:00.
 *
 * With `anchor` (Unix milliseconds, such as an identity's billing date), periods start at the
 * anchor's local wall time advanced by whole periods: `anchor + k periods` for the `k` (negative
 * when the anchor is after `now`) with `start <= now < end`. Each start is counted from the
 * anchor itself, not from the previous start, so a month anchored on the 31st starts on the last
 * day of shorter months (February 28th or 29th, April 30th) and on the 31st again where there is
 * one; a year anchored on February 29th starts on February 28th in common years. A day keeps the
 * anchor's time of day, a week its weekday and time.
 *
 * A local time that the zone skips (a daylight-saving gap) resolves forward by the gap, as luxon
 * does: a day anchored at 02:30 in Europe/Berlin starts at 03:30 on the last Sunday of March.
 *
 * Pure (no clock reads). The last period per `(period, timeZone)`, and per `(period, timeZone,
 * anchor)` for the 65,536 anchors asked most recently (see `AnchoredPeriods`), is kept, so a
 * call whose `now` is inside it costs a map look-up.
 *
 * @throws UnplaceableAnchorError for an anchor that is not finite, or whose period the calendar
 *   cannot place (no period with finite bounds holds `now`).
 * @throws RangeError for an unknown period or time zone, a non-finite `now`, or a `now` the
 *   calendar cannot place.
 * @example
 * periodAt('month', 'Europe/Berlin', Date.parse('2026-02-10T12:00:00Z'));
 * // { start: Date.parse('2026-01-31T23:00:00Z'), end: Date.parse('2026-02-28T23:00:00Z') }
 * periodAt('month', 'UTC', Date.parse('2026-02-28T12:00:00Z'), Date.parse('2026-01-31T00:00:00Z'));
 * // { start: Date.parse('2026-02-28T00:00:00Z'), end: Date.parse('2026-03-31T00:00:00Z') }
 */
export function periodAt(period: QuotaPeriod, timeZone: string, now: number, anchor?: number): CalendarPeriod {
  if (!Number.isFinite(now)) throw new RangeError(calendarTimeNotFinite('now', now));
  if (anchor === undefined) {
    const key = `${period}|${timeZone}`;
    const last = lastPeriod.get(key);
    if (last !== undefined && now >= last.start && now < last.end) return last;
    check(period, timeZone);
    const found = calendarPeriod(period, timeZone, now);
    if (!holds(found, now)) throw new RangeError(calendarCannotPlace(period, timeZone, now));
    if (lastPeriod.size >= 1_000) lastPeriod.clear();
    lastPeriod.set(key, found);
    return found;
  }
  if (!Number.isFinite(anchor)) throw new UnplaceableAnchorError(calendarTimeNotFinite('anchor', anchor));
  const kept = ANCHORED_PERIODS.get(period, timeZone, anchor, now);
  if (kept !== undefined) return kept;
  check(period, timeZone);
  const found = Object.freeze(anchoredPeriod(period, timeZone, now, anchor));
  // luxon gives NaN for a date it cannot place, and a quota's rule with NaN bounds admits every request
  if (!holds(found, now)) throw new UnplaceableAnchorError(calendarCannotPlace(period, timeZone, now, anchor));
  ANCHORED_PERIODS.set(period, timeZone, anchor, found);
  return found;
}

/** Whether `found` has finite bounds around `now`. */
function holds(found: CalendarPeriod, now: number): boolean {
  return Number.isFinite(found.start) && Number.isFinite(found.end) && found.start <= now && now < found.end;
}

function check(period: QuotaPeriod, timeZone: string): void {
  if (!Object.hasOwn(PLURAL, period)) throw new RangeError(calendarPeriodUnknown(period, QUOTA_PERIODS));
  if (!isTimeZone(timeZone)) throw new RangeError(calendarZoneUnknown(timeZone));
}

function calendarPeriod(period: QuotaPeriod, timeZone: string, now: number): CalendarPeriod {
  const first = DateTime.fromMillis(now, { zone: timeZone }).startOf(period);
  // startOf again: when local midnight is skipped, `first` is 01:00 and one period later would be too
  const next = first.plus({ [PLURAL[period]]: 1 }).startOf(period);
  return Object.freeze({ start: first.toMillis(), end: next.toMillis() });
}

function anchoredPeriod(period: QuotaPeriod, timeZone: string, now: number, anchor: number): CalendarPeriod {
  const from = DateTime.fromMillis(anchor, { zone: timeZone });
  const unit = PLURAL[period];
  const at = (k: number): number => from.plus({ [unit]: k }).toMillis();
  let k: number;
  if (period === 'day' || period === 'week') {
    k = Math.floor((now - anchor) / NOMINAL_MS[period]);
  } else {
    const local = DateTime.fromMillis(now, { zone: timeZone });
    k = (local.year - from.year) * (period === 'month' ? 12 : 1) + (period === 'month' ? local.month - from.month : 0);
  }
  // the guess is off by at most one (a daylight-saving hour, a day of the month): settle it
  let start = at(k);
  while (start > now) start = at(--k);
  let end = at(k + 1);
  while (end <= now) {
    start = end;
    end = at(++k + 1);
  }
  return { start, end };
}
