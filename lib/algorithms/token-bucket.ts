import type { AlgorithmDescriptor, AlgorithmModel } from './model.types.js';
import { durationMs, wholeIfNear } from './conversions.js';
import { TOKEN_BUCKET_LUA } from './token-bucket.lua.js';
import { storedFields } from './stored-fields.js';

/** A token bucket's stored state. */
export interface TokenBucketState {
  /** Tokens in the bucket, fractional, 0 <= tokens <= burst; down to `-debt` after a settle (`ModelRule.debt`). */
  tokens: number;
  /** When `tokens` was last brought up to date, integer ms. Never moves backwards. */
  at: number;
  /** When a block ends, integer ms (see `Held`). */
  blockedUntil: number;
}

/** A token bucket's state of these figures: `into` overwritten (see `AlgorithmModel`), or a new one. */
function tokenBucketState(
  tokens: number,
  at: number,
  blockedUntil: number,
  into: TokenBucketState | undefined,
): TokenBucketState {
  if (into === undefined) return { tokens, at, blockedUntil };
  into.tokens = tokens;
  into.at = at;
  into.blockedUntil = blockedUntil;
  return into;
}

/**
 * Token bucket: a bucket of `burst` tokens refilled continuously at `rps` tokens per second,
 * lazily, when a request arrives (no timers). A request of `cost` passes when the bucket
 * holds at least `cost` tokens; a refused request takes nothing. Bursts of up to `burst` pass
 * at once, then `rps` on average.
 *
 * Mirrored line for line by `token-bucket.lua.ts` beside it: change both together.
 */
export const tokenBucket: AlgorithmModel<TokenBucketState> = {
  current(state, now, { rps, burst }, into) {
    if (state === undefined) return tokenBucketState(burst, now, 0, into);
    // A clock that goes backwards adds nothing, and `at` never moves back, so the time
    // between the earlier `at` and `now` cannot be counted twice when the clock returns.
    const elapsed = Math.max(0, now - state.at);
    // Full once the whole ms its key expires after have passed, even where elapsed * rps / 1000
    // falls a rounding step short, so the state then is exactly an absent key's; and at once
    // when it holds more than burst (written under a larger one before the limit was lowered).
    const full = elapsed >= durationMs(burst - state.tokens, rps);
    return tokenBucketState(
      full ? burst : wholeIfNear(Math.min(burst, state.tokens + (elapsed * rps) / 1000), burst),
      Math.max(state.at, now),
      state.blockedUntil,
      into,
    );
  },

  remaining(state) {
    // a bucket in debt (below empty) has none left
    return Math.max(0, Math.floor(state.tokens));
  },

  waitMs(state, { rps }, need) {
    return state.tokens >= need ? 0 : durationMs(need - state.tokens, rps);
  },

  charge(state, _rule, cost, into) {
    return tokenBucketState(state.tokens - cost, state.at, state.blockedUntil, into);
  },

  refund(state, { burst }, cost) {
    return { tokens: Math.min(burst, state.tokens + cost), at: state.at, blockedUntil: state.blockedUntil };
  },

  debit(state, { debt = 0 }, cost) {
    // Down to `debt` tokens below empty, never up: a bucket already below that stays as it is.
    const tokens = Math.max(state.tokens - cost, -debt);
    return tokens >= state.tokens ? state : { tokens, at: state.at, blockedUntil: state.blockedUntil };
  },

  debt(state) {
    // the tokens below empty, rounded up: `remaining`'s other side
    return Math.max(0, Math.ceil(-state.tokens));
  },
};

/** The state a value `token-bucket.lua.ts` stores holds (its `decode`), read in the app. */
export function decodeStoredTokenBucket(raw: string): TokenBucketState {
  const [tokens, at, blockedUntil = 0] = storedFields(raw);
  return { tokens, at, blockedUntil };
}

/** The token bucket, for the registry: refills at `rps`, scaled by its rate. */
export const TOKEN_BUCKET: AlgorithmDescriptor<TokenBucketState> = {
  model: tokenBucket,
  packing: {
    width: 3,
    write(state, row, o) {
      row[o] = state.tokens;
      row[o + 1] = state.at;
      row[o + 2] = state.blockedUntil;
    },
    read: (row, o, _extra, into) => tokenBucketState(row[o], row[o + 1], row[o + 2], into),
  },
  lua: TOKEN_BUCKET_LUA,
  decodeStored: decodeStoredTokenBucket,
  tag: 'tb',
  regain: 'rps',
  scaledBy: 'rps',
  flatArgs: [],
  // a share's tokens are taken for good: it may admit until its hold ends
  shareUntil: () => Infinity,
};
