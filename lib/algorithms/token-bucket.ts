import type { AlgorithmModel, Limit, Outcome } from './algorithm.types.js';
import { durationMs } from './conversions.js';

/** A token bucket's stored state. */
export interface TokenBucketState {
  /** Tokens in the bucket, fractional, 0 <= tokens <= burst. */
  tokens: number;
  /** When `tokens` was last brought up to date, integer ms. Never moves backwards. */
  at: number;
}

/**
 * Token bucket: a bucket of `burst` tokens refilled continuously at `rps` tokens per second,
 * lazily, when a request arrives (no timers). A request of `cost` passes when the bucket
 * holds at least `cost` tokens; a refused request takes nothing.
 *
 * Mirrored line for line by `stores/redis/token-bucket.lua.ts`: change both together.
 */
export const tokenBucket: AlgorithmModel<TokenBucketState> = {
  current(state, now, { rps, burst }) {
    if (state === undefined) return { tokens: burst, at: now };
    // A clock that goes backwards adds nothing, and `at` never moves back, so the time
    // between the earlier `at` and `now` cannot be counted twice when the clock returns.
    const elapsed = Math.max(0, now - state.at);
    return {
      tokens: Math.min(burst, state.tokens + (elapsed * rps) / 1000),
      at: Math.max(state.at, now),
    };
  },

  admits(current, { burst }, cost) {
    return cost <= burst && current.tokens >= cost;
  },

  charge(current, _limit, cost) {
    return { tokens: current.tokens - cost, at: current.at };
  },

  report(state, limit, cost, admitted): Outcome {
    const remaining = Math.floor(state.tokens);
    return {
      allowed: admitted,
      remaining,
      retryMs: admitted ? 0 : cost > limit.burst ? -1 : durationMs(cost - state.tokens, limit.rps),
      resetMs: durationMs(limit.burst - state.tokens, limit.rps),
      nextMs: state.tokens >= limit.burst ? 0 : durationMs(remaining + 1 - state.tokens, limit.rps),
      delayMs: 0,
    };
  },

  ttlMs(state, limit: Limit) {
    // Once full, the bucket is the same as an absent key: nothing needs to outlive that.
    return Math.max(1, durationMs(limit.burst - state.tokens, limit.rps));
  },
};
