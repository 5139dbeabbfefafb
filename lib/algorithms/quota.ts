import type { AlgorithmDescriptor, AlgorithmModel } from './model.types.js';
import { windowMs } from './conversions.js';
import {
  decodeStoredFixedWindow,
  FIXED_WINDOW,
  fixedWindow,
  type FixedWindowState,
  fixedWindowState,
} from './fixed-window.js';
import { FIXED_WINDOW_AND_QUOTA_LUA } from './quota.lua.js';

/**
 * The start of the period of a quota's rule that holds `at`, ms: its `origin` (the period the app
 * worked out for the request, `Rule.origin`) moved by whole periods of the rule's length. `at` is
 * never before the origin (see `current`), so this is the origin itself, or for a store whose clock
 * has passed the period's end before the app's did, a later one.
 */
function periodStart(at: number, origin: number, w: number): number {
  return origin + Math.floor((at - origin) / w) * w;
}

/**
 * Quota: at most `limit` (= burst) tokens per calendar period (a day, week, month or year in a
 * time zone, from an identity's own anchor where it has one). Counted as a fixed window whose
 * window is the period: the app works out the period that holds the request (`periodAt`, on the
 * store's clock) and hands it over in the request's rule, its start as `Rule.origin` and its
 * length as the rule's window (`burst / rps`: a month's rule has the rate that spends the limit
 * in that month). So the calendar, its time zones and its short months stay in the app, and the
 * stores only count, exactly as a fixed window does: a count belongs to the period it started in,
 * and a count of another period (a period that has ended, an anchor that moved) is none.
 *
 * A store's clock a little behind the app's at a period's end counts the request in the period
 * the app chose (time is taken as at least the origin); one a little ahead counts it in the next
 * period (which starts at the end), as the app's next request will too.
 *
 * Mirrored line for line by `quota.lua.ts` beside it: change both together.
 */
export const quota: AlgorithmModel<FixedWindowState> = {
  current(state, now, rule, into) {
    const w = windowMs(rule.rps, rule.burst);
    const origin = rule.origin ?? 0;
    // Never before the period the request is in, nor (a clock that went back) before the stored one.
    const at = Math.max(now, origin, state === undefined ? origin : state.start);
    const start = periodStart(at, origin, w);
    // A count of another period is none; one written under a larger limit is the whole limit now
    // (and what a settle may take past it).
    const count =
      state !== undefined && state.start === start ? Math.min(rule.burst + (rule.debt ?? 0), state.count) : 0;
    return fixedWindowState(start, count, at, state === undefined ? 0 : state.blockedUntil, into);
  },

  // within its period, a quota counts as a fixed window in its window
  remaining: (state, rule) => fixedWindow.remaining(state, rule),
  waitMs: (state, rule, need) => fixedWindow.waitMs(state, rule, need),
  charge: (state, rule, cost, into) => fixedWindow.charge(state, rule, cost, into),
  debit: (state, rule, cost) => fixedWindow.debit!(state, rule, cost),
  debt: (state, rule) => fixedWindow.debt!(state, rule),

  refund(state, rule, cost, chargedAt) {
    // Given back only to the period it was taken from, while that period is the stored one.
    if (chargedAt < state.start || chargedAt >= state.start + windowMs(rule.rps, rule.burst)) return state;
    return {
      start: state.start,
      count: Math.max(0, state.count - cost),
      at: state.at,
      blockedUntil: state.blockedUntil,
    };
  },
};

/** The quota, for the registry: a fixed window's state and packing, windows that are calendar periods. */
export const QUOTA: AlgorithmDescriptor<FixedWindowState> = {
  model: quota,
  packing: FIXED_WINDOW.packing,
  lua: FIXED_WINDOW_AND_QUOTA_LUA,
  decodeStored: decodeStoredFixedWindow,
  tag: 'qt',
  regain: 'window',
  scaledBy: 'limit',
  saidAs: 'period',
  anchor: 'function',
  refuses: {
    blockFor: 'its refusals hold until its period ends already',
    adaptive: 'a quota per period is not a rate to scale by latency',
  },
  flatArgs: ['limit', 'origin'],
  shareUntil: (rule, at) => {
    const w = windowMs(rule.rps, rule.burst);
    return periodStart(at, rule.origin ?? 0, w) + w;
  },
};
