import type { AlgorithmDescriptor, AlgorithmModel } from './model.types.js';
import { durationMs, wholeIfNear } from './conversions.js';
import { GCRA_LUA } from './gcra.lua.js';
import { storedFields } from './stored-fields.js';

/** GCRA's stored state: its theoretical arrival time, as `at + backlog / rps`. */
export interface GcraState {
  /**
   * How far the theoretical arrival time (TAT) lies ahead of `at`, in emission intervals
   * (tokens), 0 <= backlog <= burst, or up to `burst + debt` after a settle (`ModelRule.debt`;
   * `current` brings one written under a larger burst down to that). Kept in tokens, not as an absolute TAT in ms, so a burst at one instant is counted
   * exactly even when the interval `1000 / rps` has no exact binary form, and rps up to 1e6
   * keeps full precision next to a 13-digit clock.
   */
  backlog: number;
  /** When `backlog` was last brought up to date, integer ms. Never moves backwards. */
  at: number;
  /** When a block ends, integer ms (see `Held`). */
  blockedUntil: number;
}

/** A GCRA state of these figures: `into` overwritten (see `AlgorithmModel`), or a new one. */
function gcraState(backlog: number, at: number, blockedUntil: number, into: GcraState | undefined): GcraState {
  if (into === undefined) return { backlog, at, blockedUntil };
  into.backlog = backlog;
  into.at = at;
  into.blockedUntil = blockedUntil;
  return into;
}

/**
 * GCRA (generic cell rate algorithm, virtual scheduling): each request of `cost` pushes the
 * theoretical arrival time `cost / rps` seconds further; a request passes when that time would
 * lie no more than `burst / rps` seconds ahead of now. That is `token_bucket`'s rule with
 * tokens = burst - backlog (only rounding at the millisecond a token comes due can tell the two
 * apart), and like it, it never delays.
 *
 * Mirrored line for line by `gcra.lua.ts` beside it: change both together.
 */
export const gcra: AlgorithmModel<GcraState> = {
  current(state, now, { rps, burst, debt }, into) {
    if (state === undefined) return gcraState(0, now, 0, into);
    // A clock that goes backwards drains nothing, and `at` never moves back.
    const elapsed = Math.max(0, now - state.at);
    // A backlog written under a larger burst (the limit was lowered since) was a full one as of
    // its `at` (one in debt as far as the rule lets a settle go), and drains from there: no figure
    // asks for more than the current rule's drain time, and what a refusal reports still holds
    // when nothing was written in between.
    const stored = Math.min(burst + (debt ?? 0), state.backlog);
    // Empty once the whole ms its key expires after have passed, even where elapsed * rps / 1000
    // falls a rounding step short, so the state then is exactly an absent key's.
    const drained = elapsed >= durationMs(stored, rps);
    return gcraState(
      drained ? 0 : wholeIfNear(Math.max(0, stored - (elapsed * rps) / 1000), burst),
      Math.max(state.at, now),
      state.blockedUntil,
      into,
    );
  },

  remaining(state, { burst }) {
    // a backlog past burst (in debt) leaves none
    return Math.max(0, Math.floor(burst - state.backlog));
  },

  waitMs(state, { rps, burst }, need) {
    // Until the backlog has drained to what leaves room for `need` (for `burst`: to 0, exactly).
    const room = burst - need;
    return state.backlog <= room ? 0 : durationMs(state.backlog - room, rps);
  },

  charge(state, _rule, cost, into) {
    return gcraState(state.backlog + cost, state.at, state.blockedUntil, into);
  },

  refund(state, _rule, cost) {
    return { backlog: Math.max(0, state.backlog - cost), at: state.at, blockedUntil: state.blockedUntil };
  },

  debit(state, { burst, debt = 0 }, cost) {
    // Up to `debt` tokens past burst, never down: a backlog already past that stays as it is.
    const backlog = Math.min(state.backlog + cost, burst + debt);
    return backlog <= state.backlog ? state : { backlog, at: state.at, blockedUntil: state.blockedUntil };
  },

  debt(state, { burst }) {
    // the backlog past burst, rounded up: `remaining`'s other side
    return Math.max(0, Math.ceil(state.backlog - burst));
  },
};

/** The state a value `gcra.lua.ts` stores holds (its `decode`), read in the app. */
export function decodeStoredGcra(raw: string): GcraState {
  const [backlog, at, blockedUntil = 0] = storedFields(raw);
  return { backlog, at, blockedUntil };
}

/** GCRA, for the registry: its backlog drains at `rps`, scaled by its rate. */
export const GCRA: AlgorithmDescriptor<GcraState> = {
  model: gcra,
  packing: {
    width: 3,
    write(state, row, o) {
      row[o] = state.backlog;
      row[o + 1] = state.at;
      row[o + 2] = state.blockedUntil;
    },
    read: (row, o, _extra, into) => gcraState(row[o], row[o + 1], row[o + 2], into),
  },
  lua: GCRA_LUA,
  decodeStored: decodeStoredGcra,
  tag: 'gcra',
  regain: 'rps',
  scaledBy: 'rps',
  flatArgs: [],
  // a share's tokens are taken for good: it may admit until its hold ends
  shareUntil: () => Infinity,
};
