/** The rate-limiting algorithms a policy can name. */
export type Algorithm =
  | 'token_bucket'
  | 'leaky_bucket'
  | 'fixed_window'
  | 'sliding_window_log'
  | 'sliding_window_counter'
  | 'gcra';

/** Every algorithm name, in the order the contract lists them. */
export const ALGORITHMS: readonly Algorithm[] = [
  'token_bucket',
  'leaky_bucket',
  'fixed_window',
  'sliding_window_log',
  'sliding_window_counter',
  'gcra',
];

/**
 * The algorithms that count in windows of `burst / rps` seconds: their quota comes back as a window
 * moves on, up to all of it at once, where the others refill at `rps` at the most.
 */
export const WINDOW_ALGORITHMS: ReadonlySet<Algorithm> = new Set<Algorithm>(['fixed_window', 'sliding_window_log', 'sliding_window_counter']);

/**
 * The algorithms a factor (`RateLimiterService.setScale`) scales by their limit (`Rule.limit`),
 * keeping their window: they count per window, and a longer window would start a fresh count. The
 * others have their `rps` scaled: a bucket's state reads the same at any rate, and the log, which
 * keeps each entry's time, counts every one of them in a longer window.
 */
export const SCALED_BY_LIMIT: ReadonlySet<Algorithm> = new Set<Algorithm>(['fixed_window', 'sliding_window_counter']);

/**
 * The rule a bucket follows: its algorithm, its rate and its capacity. Plain data, the same for
 * every store.
 */
export interface Rule {
  algorithm: Algorithm;
  /** Sustained rate, tokens per second (may be fractional). */
  rps: number;
  /** Capacity in tokens, a whole number >= 1. */
  burst: number;
  /**
   * Tokens a `fixed_window` or `sliding_window_counter` admits per window while a factor below 1
   * scales it (`RateLimiterService.setScale`): `burst` times the factor, above 0 and below
   * `burst`, may be fractional; absent: `burst`. The window stays `burst / rps` and `burst` stays
   * the capacity (a cost above it can never pass), so a bucket keeps its windows and its count
   * whatever factor each decision comes with. See `windowLimit`.
   */
  limit?: number;
  /**
   * Milliseconds a refusal of this rule blocks its bucket for (a whole number >= 1), whatever
   * refills meanwhile; absent: no block. A rule with a block keeps its buckets under keys of
   * their own (see `keyPrefix`), so no bucket is ever read under both kinds of rule.
   */
  blockMs?: number;
}

/**
 * One policy's verdict on one request, in whole milliseconds, as a pure algorithm function
 * (and its Lua mirror) computes it. Stores turn it into a public `RateLimitDecision`.
 */
export interface Outcome {
  /** Whether this policy admits the request. */
  allowed: boolean;
  /** Whole tokens left after this request (uncharged when the request was refused). */
  remaining: number;
  /** Milliseconds until this request would be admitted; 0 when admitted, -1 when it never can be. */
  retryMs: number;
  /** Milliseconds until the bucket is full again. */
  fullMs: number;
  /** Milliseconds until at least one more whole token is available; 0 when full. */
  nextMs: number;
  /** Milliseconds the request must wait before it proceeds (queueing algorithms only). */
  delayMs: number;
  /** Milliseconds the policy's block still holds (see `Rule.blockMs`); 0 when none does. */
  blockedMs: number;
  /**
   * The time the state is as of, integer ms on the deciding store's clock: for an admitted and
   * charged request, when the charge was taken (the `chargedAt` a refund names). Absent on an
   * outcome no model or script computed (a remembered refusal).
   */
  at?: number;
}

/** What every algorithm's state has: the time it is as of. */
export interface Held {
  /**
   * Integer ms: `now`, or a later time the state holds on to when the clock went back (it never
   * moves backwards, so a clock going back adds no quota). Times the model reports, and the
   * key's expiry, count from here.
   */
  at: number;
  /**
   * Integer ms: when the block a refusal started ends (see `Rule.blockMs`); 0, or a time already
   * past, when none holds. Every model carries it through unchanged: only `decideAll` sets it.
   */
  blockedUntil: number;
}

/**
 * An algorithm as a set of pure functions of its stored state. No I/O and no clock reads:
 * `now` is always a parameter (integer milliseconds). A store decides a request against
 * several policies in two passes (see `decideAll`), which is what makes a refusal take
 * nothing from any bucket. Each model is mirrored function for function by a Lua script in
 * `stores/redis/`, so the memory and Redis stores decide alike.
 */
export interface AlgorithmModel<State extends Held> {
  /** The state as of `now` (refilled or expired, clock-safe). `undefined` is a key never seen or expired. */
  current(state: State | undefined, now: number, rule: Rule): State;
  /** Whole tokens free in `state`, 0 to `burst`. */
  remaining(state: State, rule: Rule): number;
  /**
   * Milliseconds until `need` tokens are free (`0 < need <= burst`): 0 when they are now.
   * Every time a decision reports comes from it: a request of `cost` is admitted when
   * `waitMs(cost)` is 0, `retryAfter` is `waitMs(cost)`, `t` is `waitMs(remaining + 1)`, and the
   * time until full, which is also the key's TTL, is `waitMs(burst)`.
   */
  waitMs(state: State, rule: Rule, need: number): number;
  /** The state after taking `cost`; only called when every policy admits the request. */
  charge(state: State, rule: Rule, cost: number): State;
  /**
   * The state with what a charge of `cost` at `chargedAt` (the charged state's `at`) took given
   * back, as far as it still counts: a Redis Cluster request whose policies live in several hash
   * slots charges each slot, and gives back what the others took when one refuses. Never more
   * than the charge took, never past a full bucket.
   */
  refund(state: State, rule: Rule, cost: number, chargedAt: number): State;
  /**
   * Milliseconds an admitted request waits before it proceeds, from the state before the
   * charge. Only queues (`leaky_bucket`) have it; the others never delay.
   */
  delayMs?(state: State, rule: Rule): number;
}
