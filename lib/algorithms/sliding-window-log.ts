import type { AlgorithmModel } from './algorithm.types.js';
import { windowMs } from './conversions.js';

/** A sliding window log's state: one entry per token taken in the last window. */
export interface SlidingWindowLogState {
  /** When each token was taken, ms, oldest first; at most `burst` entries. */
  times: readonly number[];
  /** The time the state is as of (not stored): `now`, or the newest entry if the clock went back before it. */
  at: number;
}

/** Entries a request of `cost` adds: one per token, a fractional cost rounded up. */
export function logEntries(cost: number): number {
  return Math.ceil(cost);
}

/**
 * Sliding window log: a request of `cost` passes when the tokens taken in the last window of
 * `burst / rps` seconds, plus `cost`, stay within `limit` (= burst). Exact: it remembers
 * when each token was taken (one entry per token, a fractional cost rounded up), adds no entry
 * for a refused request, and so keeps at most `limit` entries per key. In Redis the log is a
 * sorted set scored by time.
 *
 * Mirrored line for line by `stores/redis/sliding-window-log.lua.ts`: change both together.
 */
export const slidingWindowLog: AlgorithmModel<SlidingWindowLogState> = {
  current(state, now, { rps, burst }) {
    const times = state?.times ?? [];
    // A clock that goes back before the newest entry expires nothing and logs at that entry.
    const at = times.length > 0 ? Math.max(now, times[times.length - 1]) : now;
    const cutoff = at - windowMs(rps, burst);
    let expired = 0;
    while (expired < times.length && times[expired] <= cutoff) expired++;
    // A log written under a larger limit (the limit was lowered) keeps its newest `burst` entries.
    expired = Math.max(expired, times.length - burst);
    return { times: expired === 0 ? times : times.slice(expired), at };
  },

  remaining(state, { burst }) {
    return burst - state.times.length;
  },

  waitMs(state, { rps, burst }, need) {
    // The request fits once the k oldest entries have left the window.
    const k = state.times.length + logEntries(need) - burst;
    return k <= 0 ? 0 : state.times[k - 1] + windowMs(rps, burst) - state.at;
  },

  charge(state, _limit, cost) {
    const added: number[] = new Array<number>(logEntries(cost)).fill(state.at);
    return { times: state.times.concat(added), at: state.at };
  },

  refund(state, _limit, cost, chargedAt) {
    // Entries at the same ms are alike: drop that many of them (expired ones are gone already).
    const times = [...state.times];
    for (let n = logEntries(cost); n > 0; n--) {
      const i = times.lastIndexOf(chargedAt);
      if (i < 0) break;
      times.splice(i, 1);
    }
    return { times, at: state.at };
  },
};
