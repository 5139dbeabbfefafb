import type { AlgorithmDescriptor, AlgorithmModel } from './model.types.js';
import { windowEnd, windowLimit, windowMs } from './conversions.js';
import { FIXED_WINDOW_AND_QUOTA_LUA } from './quota.lua.js';
import { storedFields } from './stored-fields.js';

/** A fixed window's stored state. */
export interface FixedWindowState {
  /**
   * Start of the window the count belongs to, ms: a multiple of the window, or for a rule anchored
   * at a key's first request (`Rule.anchor`), the time of the request that started it.
   */
  start: number;
  /** Tokens taken in that window, 0 <= count <= burst, or up to `burst + debt` after a settle (`ModelRule.debt`). */
  count: number;
  /** The time the state is as of (not stored): `now`, or `start` if the clock went back before it. */
  at: number;
  /** When a block ends, integer ms (see `Held`). */
  blockedUntil: number;
}

/** A fixed window's state of these figures: `into` overwritten (see `AlgorithmModel`), or a new one. */
export function fixedWindowState(
  start: number,
  count: number,
  at: number,
  blockedUntil: number,
  into: FixedWindowState | undefined,
): FixedWindowState {
  if (into === undefined) return { start, count, at, blockedUntil };
  into.start = start;
  into.count = count;
  into.at = at;
  into.blockedUntil = blockedUntil;
  return into;
}

/**
 * Fixed window: at most `limit` (= burst) tokens per window of `burst / rps` seconds, the
 * windows aligned to the clock (`floor(now / window)`), or under `anchor: 'first-request'` each
 * started by a key's first request while none of its windows is live. Up to twice the limit can
 * pass across a window boundary. Under a factor (`Rule.limit`) the window admits its scaled
 * limit, or one request of a larger cost while it holds nothing (`windowLimit`); its window stays
 * the same.
 *
 * Mirrored line for line by `fixed-window.lua.ts` beside it: change both together.
 */
export const fixedWindow: AlgorithmModel<FixedWindowState> = {
  current(state, now, { rps, burst, anchor, debt }, into) {
    const w = windowMs(rps, burst);
    // A clock that goes back into an earlier window stays in the stored one: no fresh quota.
    const at = state === undefined ? now : Math.max(now, state.start);
    // Anchored: the stored window while it lasts, else one that starts now.
    const start =
      anchor === undefined ? Math.floor(at / w) * w : state !== undefined && at < state.start + w ? state.start : at;
    // A count written under a larger limit (the limit was lowered) is the whole limit now (and
    // what a settle may take past it).
    const count = state !== undefined && state.start === start ? Math.min(burst + (debt ?? 0), state.count) : 0;
    return fixedWindowState(start, count, at, state === undefined ? 0 : state.blockedUntil, into);
  },

  remaining(state, rule) {
    // Another instance under a larger factor (or none) may have taken more than this rule's limit.
    return Math.max(0, Math.floor(windowLimit(rule, 1) - state.count));
  },

  waitMs(state, rule, need) {
    // A new window starts empty, which admits any need (<= burst), so the window's end always suffices.
    return state.count + need <= windowLimit(rule, need) ? 0 : state.start + windowMs(rule.rps, rule.burst) - state.at;
  },

  charge(state, _rule, cost, into) {
    return fixedWindowState(state.start, state.count + cost, state.at, state.blockedUntil, into);
  },

  refund(state, { rps, burst, anchor }, cost, chargedAt) {
    // A charge in a window that has ended no longer counts: nothing to give back. (An anchored
    // window holds every time from its start to its end: no window of the key starts within it.)
    const w = windowMs(rps, burst);
    if (
      anchor === undefined
        ? state.start !== Math.floor(chargedAt / w) * w
        : chargedAt < state.start || chargedAt >= state.start + w
    )
      return state;
    return {
      start: state.start,
      count: Math.max(0, state.count - cost),
      at: state.at,
      blockedUntil: state.blockedUntil,
    };
  },

  debit(state, { burst, debt = 0 }, cost) {
    // Counted in the window the state is in, up to `debt` past burst, never down.
    const count = Math.min(state.count + cost, burst + debt);
    return count <= state.count ? state : { start: state.start, count, at: state.at, blockedUntil: state.blockedUntil };
  },

  debt(state, rule) {
    // the count past what the window admits, rounded up: `remaining`'s other side
    return Math.max(0, Math.ceil(state.count - windowLimit(rule, 1)));
  },
};

/** The state a value `fixed-window.lua.ts` stores holds (its `decode`), read in the app. */
export function decodeStoredFixedWindow(raw: string): FixedWindowState {
  const [start, count, blockedUntil = 0] = storedFields(raw);
  // `at` is not stored, and `current` does not read it
  return { start, count, at: start, blockedUntil };
}

/** The fixed window, for the registry: counts per window, scaled by its limit. */
export const FIXED_WINDOW: AlgorithmDescriptor<FixedWindowState> = {
  model: fixedWindow,
  packing: {
    width: 4,
    write(state, row, o) {
      row[o] = state.start;
      row[o + 1] = state.count;
      row[o + 2] = state.at;
      row[o + 3] = state.blockedUntil;
    },
    read: (row, o, _extra, into) => fixedWindowState(row[o], row[o + 1], row[o + 2], row[o + 3], into),
  },
  // its body defines the quota's too, which takes its functions (see `quota.lua.ts`)
  lua: FIXED_WINDOW_AND_QUOTA_LUA,
  decodeStored: decodeStoredFixedWindow,
  tag: 'fw',
  regain: 'window',
  scaledBy: 'limit',
  anchor: 'first-request',
  flatArgs: ['limit'],
  // a window on the clock's grid ends where the share's charge says; one that starts at a key's first request, where no share can tell
  shareUntil: (rule, at) => (rule.anchor === undefined ? windowEnd(at, windowMs(rule.rps, rule.burst)) : undefined),
};
