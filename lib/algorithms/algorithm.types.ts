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

/** What an algorithm needs to know about a policy: plain data, the same for every store. */
export interface Limit {
  algorithm: Algorithm;
  /** Sustained rate, tokens per second (may be fractional). */
  rps: number;
  /** Capacity in tokens, a whole number >= 1. */
  burst: number;
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
  resetMs: number;
  /** Milliseconds until at least one more whole token is available; 0 when full. */
  nextMs: number;
  /** Milliseconds the request must wait before it proceeds (queueing algorithms only). */
  delayMs: number;
}

/**
 * An algorithm as a set of pure functions of its stored state. No I/O and no clock reads:
 * `now` is always a parameter (integer milliseconds). A store decides a request against
 * several policies in two passes (see `decideAll`), which is what makes a refusal take
 * nothing from any bucket.
 */
export interface AlgorithmModel<State> {
  /** The state as of `now` (refilled, clock-safe). `undefined` is a key never seen or expired. */
  current(state: State | undefined, now: number, limit: Limit): State;
  /** Whether `cost` fits in the current state. */
  admits(current: State, limit: Limit, cost: number): boolean;
  /** The state after taking `cost`; only called when every policy admits the request. */
  charge(current: State, limit: Limit, cost: number): State;
  /** The verdict to report for `state` (charged or not); `admitted` tells which. */
  report(state: State, limit: Limit, cost: number, admitted: boolean): Outcome;
  /** How long the stored state must live, ms: until it is equivalent to an absent key. */
  ttlMs(state: State, limit: Limit): number;
}
