import type { AlgorithmDescriptor, AlgorithmModel } from './model.types.js';
import { windowMs } from './conversions.js';
import { SLIDING_WINDOW_LOG_LUA } from './sliding-window-log.lua.js';

/**
 * A sliding window log's state: one entry per token taken in the last window, the entries
 * `times[head]` to `times[head + count - 1]` of an array that the states of one log share.
 *
 * States are values all the same: nothing ever changes an entry inside a state's range, so a
 * state reads the same however many states are made from it, or from others before it. What
 * makes a request cost O(1) amortised where copying the log cost O(burst) (a log of 50,000
 * entries at 50,000 an hour): expiry only moves `head`; `charge` appends past the end of the
 * array in place when the state's range ends there (no other state has appended since), and
 * copies the live entries into a new array only when it does not, or when the expired entries
 * before `head` outnumber them (so each entry is copied about once in all).
 */
export interface SlidingWindowLogState {
  /** When each token was taken, ms, oldest first, from `head` on; shared, never written inside a state's range. */
  times: readonly number[];
  /** Index in `times` of the oldest entry of this state. */
  head: number;
  /** Entries in this state, at most `burst`, or `burst + debt` after a settle (`ModelRule.debt`). */
  count: number;
  /** The time the state is as of (not stored): `now`, or the newest entry if the clock went back before it. */
  at: number;
  /** When a block ends, integer ms (see `Held`). */
  blockedUntil: number;
}

/** A log's state of these figures: `into` overwritten (see `AlgorithmModel`), or a new one. */
function logState(
  times: readonly number[],
  head: number,
  count: number,
  at: number,
  blockedUntil: number,
  into: SlidingWindowLogState | undefined,
): SlidingWindowLogState {
  if (into === undefined) return { times, head, count, at, blockedUntil };
  into.times = times;
  into.head = head;
  into.count = count;
  into.at = at;
  into.blockedUntil = blockedUntil;
  return into;
}

/** Entries a request of `cost` adds: one per token, a fractional cost rounded up. */
export function logEntries(cost: number): number {
  return Math.ceil(cost);
}

/** Index of the first of `times[from]` to `times[to - 1]` (ascending) above `cutoff`; `to` if none. */
function firstAfter(times: readonly number[], from: number, to: number, cutoff: number): number {
  let lo = from;
  let hi = to;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (times[mid] <= cutoff) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/**
 * Sliding window log: a request of `cost` passes when the tokens taken in the last window of
 * `burst / rps` seconds, plus `cost`, stay within `limit` (= burst). Exact: it remembers
 * when each token was taken (one entry per token, a fractional cost rounded up), adds no entry
 * for a refused request, and so keeps at most `limit` entries per key. In Redis the log is a
 * sorted set scored by time.
 *
 * Mirrored line for line by `sliding-window-log.lua.ts` beside it: change both together.
 */
export const slidingWindowLog: AlgorithmModel<SlidingWindowLogState> = {
  current(state, now, { rps, burst, debt }, into) {
    if (state === undefined) return logState([], 0, 0, now, 0, into);
    const { times, head, count } = state;
    const end = head + count;
    // A clock that goes back before the newest entry expires nothing and logs at that entry.
    const at = count > 0 ? Math.max(now, times[end - 1]) : now;
    const cutoff = at - windowMs(rps, burst);
    // Expired entries are skipped, not removed: a binary search, as many may have expired at once.
    let first = count > 0 && times[head] <= cutoff ? firstAfter(times, head, end, cutoff) : head;
    // A log written under a larger limit (the limit was lowered) keeps its newest `burst` entries
    // (and those a settle may take past it).
    first = Math.max(first, end - (burst + (debt ?? 0)));
    return logState(times, first, end - first, at, state.blockedUntil, into);
  },

  remaining(state, { burst }) {
    // more entries than burst (in debt) leave none
    return Math.max(0, burst - state.count);
  },

  waitMs(state, { rps, burst }, need) {
    // The request fits once the k oldest entries have left the window.
    const k = state.count + logEntries(need) - burst;
    return k <= 0 ? 0 : state.times[state.head + k - 1] + windowMs(rps, burst) - state.at;
  },

  charge(state, _rule, cost, into) {
    const { head, count, at, blockedUntil } = state;
    const end = head + count;
    let times = state.times as number[];
    let first = head;
    // Appending in place leaves every other state's range as it was; a copy starts afresh.
    if (end !== times.length || head > count) {
      times = times.slice(head, end);
      first = 0;
    }
    for (let n = logEntries(cost); n > 0; n--) times.push(at);
    return logState(times, first, times.length - first, at, blockedUntil, into);
  },

  refund(state, _rule, cost, chargedAt) {
    // Entries at the same ms are alike: drop that many of them (expired ones are gone already).
    const times = state.times.slice(state.head, state.head + state.count);
    for (let n = logEntries(cost); n > 0; n--) {
      const i = times.lastIndexOf(chargedAt);
      if (i < 0) break;
      times.splice(i, 1);
    }
    return { times, head: 0, count: times.length, at: state.at, blockedUntil: state.blockedUntil };
  },

  debit(state, rule, cost) {
    // Entries at the state's time, as a charge's, up to `debt` past burst: never any dropped.
    const entries = Math.min(logEntries(cost), rule.burst + (rule.debt ?? 0) - state.count);
    return entries <= 0 ? state : slidingWindowLog.charge(state, rule, entries);
  },

  debt(state, { burst }) {
    // the entries past burst: `remaining`'s other side
    return Math.max(0, state.count - burst);
  },
};

/**
 * The sliding window log, for the registry: a log of entries, scaled by its rate. Its timestamps
 * do not fit in a row: they stay an array, the one the log's states share, kept beside the row
 * (which holds where this state's entries lie in it).
 */
export const SLIDING_WINDOW_LOG: AlgorithmDescriptor<SlidingWindowLogState> = {
  model: slidingWindowLog,
  packing: {
    width: 4,
    write(state, row, o) {
      row[o] = state.head;
      row[o + 1] = state.count;
      row[o + 2] = state.at;
      row[o + 3] = state.blockedUntil;
      // the array itself, not a copy: the next charge appends to it in place (see the state)
      return state.times;
    },
    read: (row, o, times, into) =>
      logState(times as readonly number[], row[o], row[o + 1], row[o + 2], row[o + 3], into),
  },
  lua: SLIDING_WINDOW_LOG_LUA,
  tag: 'swl',
  regain: 'log',
  scaledBy: 'rps',
};
