import type { AlgorithmDescriptor, AlgorithmModel } from './model.types.js';
import { windowEnd, windowLimit, windowMs } from './conversions.js';
import { SLIDING_WINDOW_COUNTER_LUA } from './sliding-window-counter.lua.js';
import { storedFields } from './stored-fields.js';

/** A sliding window counter's stored state. */
export interface SlidingWindowCounterState {
  /** Start of the current window, ms, a multiple of the window. */
  start: number;
  /** Tokens taken in the window before it. */
  previous: number;
  /** Tokens taken in the current window. */
  count: number;
  /** The time the state is as of (not stored): `now`, or `start` if the clock went back before it. */
  at: number;
  /** When a block ends, integer ms (see `Held`). */
  blockedUntil: number;
}

/** A sliding window counter's state of these figures: `into` overwritten (see `AlgorithmModel`), or a new one. */
function counterState(
  start: number,
  previous: number,
  count: number,
  at: number,
  blockedUntil: number,
  into: SlidingWindowCounterState | undefined,
): SlidingWindowCounterState {
  if (into === undefined) return { start, previous, count, at, blockedUntil };
  into.start = start;
  into.previous = previous;
  into.count = count;
  into.at = at;
  into.blockedUntil = blockedUntil;
  return into;
}

/**
 * The previous window's count weighted by the part of it still inside the sliding window, times
 * the window (kept scaled so whole-token counts stay whole numbers).
 */
function previousScaled(state: SlidingWindowCounterState, w: number): number {
  return state.previous * (w - (state.at - state.start));
}

/**
 * Sliding window counter: two fixed windows (aligned to the clock) and a weighted estimate of
 * the last window, `previous * (share of the previous window still inside) + count`. A request
 * of `cost` passes when the estimate plus `cost` stays within `limit` (= burst). Two numbers
 * per key instead of a log; how often it decides differently from the exact log is measured
 * by `scripts/compare-algorithms.ts` (README). Under a factor (`Rule.limit`) the estimate is held
 * to the scaled limit, or to a larger cost while it is 0 (`windowLimit`); the window stays the same.
 *
 * Mirrored line for line by `sliding-window-counter.lua.ts` beside it: change both together.
 */
export const slidingWindowCounter: AlgorithmModel<SlidingWindowCounterState> = {
  current(state, now, { rps, burst, debt }, into) {
    const w = windowMs(rps, burst);
    // A clock that goes back into an earlier window stays in the stored one: no fresh quota.
    const at = state === undefined ? now : Math.max(now, state.start);
    const start = Math.floor(at / w) * w;
    if (state === undefined) return counterState(start, 0, 0, at, 0, into);
    const { blockedUntil } = state;
    // Counts written under a larger limit (the limit was lowered) are the whole limit now (and
    // what a settle may take past it).
    const most = burst + (debt ?? 0);
    if (state.start === start)
      return counterState(start, Math.min(most, state.previous), Math.min(most, state.count), at, blockedUntil, into);
    if (state.start + w === start) return counterState(start, Math.min(most, state.count), 0, at, blockedUntil, into);
    return counterState(start, 0, 0, at, blockedUntil, into);
  },

  remaining(state, rule) {
    const w = windowMs(rule.rps, rule.burst);
    return Math.max(0, Math.floor(((windowLimit(rule, 1) - state.count) * w - previousScaled(state, w)) / w));
  },

  waitMs(state, rule, need) {
    const w = windowMs(rule.rps, rule.burst);
    const limit = windowLimit(rule, need);
    const elapsed = state.at - state.start;
    // What this window's count leaves for the previous window's weight.
    const room = limit - state.count - need;
    if (room >= 0) {
      if (previousScaled(state, w) <= room * w) return 0;
      // It fits later in this window, once enough of the previous window's weight (> 0) has slid out...
      return Math.max(1, w - Math.floor((room * w) / state.previous) - elapsed);
    }
    // ...or only in the next one, once enough of this window's count (> limit - need >= 0) has.
    return 2 * w - Math.floor(((limit - need) * w) / state.count) - elapsed;
  },

  charge(state, _rule, cost, into) {
    return counterState(state.start, state.previous, state.count + cost, state.at, state.blockedUntil, into);
  },

  refund(state, { rps, burst }, cost, chargedAt) {
    // The charge counts in the window it was taken in, then in the next one as `previous`.
    const w = windowMs(rps, burst);
    const charged = Math.floor(chargedAt / w) * w;
    if (state.start === charged) return { ...state, count: Math.max(0, state.count - cost) };
    if (state.start === charged + w) return { ...state, previous: Math.max(0, state.previous - cost) };
    return state;
  },

  debit(state, { burst, debt = 0 }, cost) {
    // Counted in the window the state is in, up to `debt` past burst, never down.
    const count = Math.min(state.count + cost, burst + debt);
    return count <= state.count ? state : { ...state, count };
  },

  debt(state, rule) {
    // the weighted estimate past what the window admits, rounded up: `remaining`'s other side
    const w = windowMs(rule.rps, rule.burst);
    return Math.max(0, Math.ceil(((state.count - windowLimit(rule, 1)) * w + previousScaled(state, w)) / w));
  },
};

/** The state a value `sliding-window-counter.lua.ts` stores holds (its `decode`), read in the app. */
export function decodeStoredSlidingWindowCounter(raw: string): SlidingWindowCounterState {
  const [start, previous, count = 0, blockedUntil = 0] = storedFields(raw);
  // `at` is not stored, and `current` does not read it
  return { start, previous, count, at: start, blockedUntil };
}

/** The sliding window counter, for the registry: counts per window, scaled by its limit. */
export const SLIDING_WINDOW_COUNTER: AlgorithmDescriptor<SlidingWindowCounterState> = {
  model: slidingWindowCounter,
  packing: {
    width: 5,
    write(state, row, o) {
      row[o] = state.start;
      row[o + 1] = state.previous;
      row[o + 2] = state.count;
      row[o + 3] = state.at;
      row[o + 4] = state.blockedUntil;
    },
    read: (row, o, _extra, into) => counterState(row[o], row[o + 1], row[o + 2], row[o + 3], row[o + 4], into),
  },
  lua: SLIDING_WINDOW_COUNTER_LUA,
  decodeStored: decodeStoredSlidingWindowCounter,
  tag: 'swc',
  regain: 'window',
  scaledBy: 'limit',
  flatArgs: ['limit'],
  // what a share took counts in its window: spent after that window, it would weigh as the previous one's
  shareUntil: (rule, at) => windowEnd(at, windowMs(rule.rps, rule.burst)),
};
