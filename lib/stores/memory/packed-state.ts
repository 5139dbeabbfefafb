import type { Algorithm, Held } from '../../algorithms/algorithm.types.js';
import type { FixedWindowState } from '../../algorithms/fixed-window.js';
import type { GcraState } from '../../algorithms/gcra.js';
import type { SlidingWindowCounterState } from '../../algorithms/sliding-window-counter.js';
import type { SlidingWindowLogState } from '../../algorithms/sliding-window-log.js';
import type { TokenBucketState } from '../../algorithms/token-bucket.js';

/** Numbers a packed state takes at most: a sliding window counter's five. */
export const PACKED_WIDTH = 5;

/**
 * How one algorithm's state is kept in a row of `PACKED_WIDTH` doubles of a `Float64Array`:
 * 40 bytes, where the same state as an object costs about 100 (an object and a heap number per
 * field). A sliding window log's timestamps do not fit in a row: they stay an array, `extra`,
 * the one the log's states share (the row holds where this state's entries lie in it).
 */
interface PackedState<State extends Held> {
  write(state: State, row: Float64Array, offset: number): unknown;
  read(row: Float64Array, offset: number, extra: unknown): State;
}

const tokenBucket: PackedState<TokenBucketState> = {
  write(state, row, o) {
    row[o] = state.tokens;
    row[o + 1] = state.at;
    row[o + 2] = state.blockedUntil;
  },
  read: (row, o) => ({ tokens: row[o], at: row[o + 1], blockedUntil: row[o + 2] }),
};

const gcra: PackedState<GcraState> = {
  write(state, row, o) {
    row[o] = state.backlog;
    row[o + 1] = state.at;
    row[o + 2] = state.blockedUntil;
  },
  read: (row, o) => ({ backlog: row[o], at: row[o + 1], blockedUntil: row[o + 2] }),
};

const fixedWindow: PackedState<FixedWindowState> = {
  write(state, row, o) {
    row[o] = state.start;
    row[o + 1] = state.count;
    row[o + 2] = state.at;
    row[o + 3] = state.blockedUntil;
  },
  read: (row, o) => ({ start: row[o], count: row[o + 1], at: row[o + 2], blockedUntil: row[o + 3] }),
};

const slidingWindowCounter: PackedState<SlidingWindowCounterState> = {
  write(state, row, o) {
    row[o] = state.start;
    row[o + 1] = state.previous;
    row[o + 2] = state.count;
    row[o + 3] = state.at;
    row[o + 4] = state.blockedUntil;
  },
  read: (row, o) => ({ start: row[o], previous: row[o + 1], count: row[o + 2], at: row[o + 3], blockedUntil: row[o + 4] }),
};

const slidingWindowLog: PackedState<SlidingWindowLogState> = {
  write(state, row, o) {
    row[o] = state.head;
    row[o + 1] = state.count;
    row[o + 2] = state.at;
    row[o + 3] = state.blockedUntil;
    // the array itself, not a copy: the next charge appends to it in place (see the state)
    return state.times;
  },
  read: (row, o, times) => ({ times: times as readonly number[], head: row[o], count: row[o + 1], at: row[o + 2], blockedUntil: row[o + 3] }),
};

/**
 * Each algorithm's packing. `write` returns what does not fit in the row (`undefined` for all
 * but the log), and `read` gets it back.
 */
export const PACKED_STATES: { readonly [A in Algorithm]: PackedState<any> } = {
  token_bucket: tokenBucket,
  leaky_bucket: gcra,
  fixed_window: fixedWindow,
  sliding_window_log: slidingWindowLog,
  sliding_window_counter: slidingWindowCounter,
  gcra,
};
