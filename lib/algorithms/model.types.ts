/**
 * The types an algorithm is written against: its rule, its state, its model, how the memory store
 * packs its state, and the descriptor that gathers what is particular to it. They name no
 * algorithm, so an algorithm's file can import them while the registry imports that file.
 */

/**
 * A rule as the models read it: its algorithm's name, its rate and its capacity. Plain data, the
 * same for every store. The models know no list of algorithms (the registry, which lists them,
 * imports the models), so here a name is any string; `Rule` narrows it to an `Algorithm`.
 */
export interface ModelRule {
  /** The algorithm's name, a key of `ALGORITHM_DESCRIPTORS`. */
  algorithm: string;
  /** Sustained rate, tokens per second (may be fractional). */
  rps: number;
  /** Capacity in tokens, a whole number >= 1. */
  burst: number;
  /**
   * Tokens an algorithm scaled by its limit (`AlgorithmDescriptor.scaledBy`) admits per window
   * while a factor below 1 scales it (`RateLimiterService.setScale`): `burst` times the factor, above 0 and below
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
  /**
   * With `blockMs`: when a block ends, the bucket starts full again, its state forgotten (a key
   * read with a block that has ended, `blockedUntil <= at`, is decided as a key never seen);
   * absent: the bucket is as the charges and refusals before the block left it. Its buckets share
   * the keys of a rule that keeps them (see `keyPrefix`): both store the same state, and read a
   * block alike while it holds; they differ only in what its end leaves.
   */
  blockResets?: true;
  /**
   * `fixed_window` only: `'first-request'`, a window starts at a key's first request while none of
   * that key is live, and lasts the window; the first request after it ends starts the next (as
   * `@nestjs/throttler`'s Redis storages, express-rate-limit and rate-limiter-flexible count).
   * Absent: windows aligned to the clock (`floor(now / window)`). Its buckets have keys of their
   * own (see `keyPrefix`): a clock-aligned rule (or an older build) would read a window that does
   * not start on its grid as over, and count afresh.
   */
  anchor?: 'first-request';
  /**
   * `quota` only: the start of the calendar period a request is counted in, Unix ms, worked out
   * by the app for that request (`periodAt`); the rule's window (`burst / rps`) is that period's
   * length. A quota's rule is made per request (see `quotaRule`), its `calendar` saying how.
   */
  origin?: number;
  /** `quota` only: the calendar its periods follow (see `QuotaCalendar`). */
  calendar?: QuotaCalendar;
  /**
   * Tokens a settle (`RateLimitStore.settle`, a request charged its real cost after it ran) may
   * take the bucket past empty: a whole number >= 0, the policy's `maxDebt`. A token bucket's
   * tokens go down to `-debt`; a backlog, a window's count or a log's entries up to `burst + debt`.
   * The requests that follow are refused until time has paid the debt back. Absent: the rule does
   * not settle, and every figure stays within `burst` (what `current` brings a stored one down to).
   * A rule with it may also be asked for a cost of 0 (a reservation of nothing): admitted while
   * the bucket is not in debt, it takes nothing.
   */
  debt?: number;
}

/**
 * A quota's calendar: its periods are days, ISO weeks (from Monday), months or years in an IANA
 * time zone. Each request's rule carries the period it falls in (`ModelRule.origin`).
 */
export interface QuotaCalendar {
  period: 'day' | 'week' | 'month' | 'year';
  /** IANA time zone name, `'UTC'` by default. */
  timeZone: string;
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
   * Whole tokens the bucket owes past empty after a settle (the model's `debt`), for a rule that
   * settles (`ModelRule.debt`) and only when above 0; `remaining` is 0 then. Absent when none. A
   * script's reply carries it as minus itself in the place of `remaining` (see
   * `stores/redis/script-protocol.ts`).
   */
  debt?: number;
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
 * nothing from any bucket. Each model has a Lua mirror beside it (`<name>.lua.ts`), function for
 * function, which the Redis store's scripts assemble (`stores/redis/models.lua.ts`), so the memory
 * and Redis stores decide alike.
 *
 * `current` and `charge` take an optional `into`, a state of the same algorithm that they write
 * their result into and return, in place of a new state (it may be the `state` they are given):
 * how the memory store decides without making an object per decision (see `SettleScratch`). The
 * result is the same either way, and the Lua mirrors have no such argument.
 */
export interface AlgorithmModel<State extends Held> {
  /** The state as of `now` (refilled or expired, clock-safe). `undefined` is a key never seen or expired. */
  current(state: State | undefined, now: number, rule: ModelRule, into?: State): State;
  /** Whole tokens free in `state`, 0 to `burst`: never negative, 0 while a settle's debt is unpaid. */
  remaining(state: State, rule: ModelRule): number;
  /**
   * Milliseconds until `need` tokens are free (`0 <= need <= burst`): 0 when they are now; for
   * a `need` of 0, 0 unless the bucket is in debt (`ModelRule.debt`), else the time until it is not.
   * Every time a decision reports comes from it: a request of `cost` is admitted when
   * `waitMs(cost)` is 0, `retryAfter` is `waitMs(cost)`, `t` is `waitMs(remaining + 1)`, and the
   * time until full, which is also the key's TTL, is `waitMs(burst)`.
   */
  waitMs(state: State, rule: ModelRule, need: number): number;
  /** The state after taking `cost`; only called when every policy admits the request. */
  charge(state: State, rule: ModelRule, cost: number, into?: State): State;
  /**
   * The state with what a charge of `cost` at `chargedAt` (the charged state's `at`) took given
   * back, as far as it still counts: a Redis Cluster request whose policies live in several hash
   * slots charges each slot, and gives back what the others took when one refuses. Never more
   * than the charge took, never past a full bucket.
   */
  refund(state: State, rule: ModelRule, cost: number, chargedAt: number): State;
  /**
   * The state with `cost` more taken, as a settle takes what a request cost beyond what it took up
   * front: past empty, down to `rule.debt ?? 0` tokens past it, and never giving anything back (a
   * bucket already that far past empty stays as it is). `state` itself when nothing more is taken,
   * so a store writes nothing then. A window's debit counts in the window `state` is in (the one
   * of the settle's time). Absent: the algorithm cannot settle (see `RefusableOption`).
   */
  debit?(state: State, rule: ModelRule, cost: number): State;
  /**
   * Whole tokens `state` holds past empty (past its limit), rounded up: what settles took beyond
   * what the bucket had (`debit`), not yet paid back by time; 0 when none. The other side of
   * `remaining`, which is 0 whenever this is above 0: a token bucket's tokens below 0, a backlog
   * past `burst`, a window's count (or a sliding window counter's weighted estimate) past the
   * limit it admits under (`windowLimit(rule, 1)`), a log's entries past `burst`. Absent exactly
   * where `debit` is: an algorithm that cannot settle owes nothing.
   *
   * @example tokenBucket.debt({ tokens: -2.5, at, blockedUntil: 0 }, rule) // 3
   */
  debt?(state: State, rule: ModelRule): number;
  /**
   * Milliseconds an admitted request waits before it proceeds, from the state before the
   * charge. Only queues (`leaky_bucket`) have it; the others never delay.
   */
  delayMs?(state: State, rule: ModelRule): number;
}

/**
 * How the memory store keeps one algorithm's state in a row of numbers of a `Float64Array`
 * (`width` doubles: 8 bytes each, where the state as an object costs about 100 bytes, an object
 * and a heap number per field). What does not fit in numbers (a sliding window log's timestamps)
 * `write` returns, to be kept beside the row and given back to `read`.
 */
export interface StatePacking<State extends Held> {
  /** Doubles of the row the state takes. */
  width: number;
  /** Writes `state` to `row[offset]` to `row[offset + width - 1]`; returns what did not fit, or `undefined`. */
  write(state: State, row: Float64Array, offset: number): unknown;
  /**
   * The state written at `row[offset]`, with what `write` returned for it: in `into` when given (a
   * state of the same algorithm, overwritten and returned), else in a new one.
   */
  read(row: Float64Array, offset: number, extra: unknown, into?: State): State;
}

/**
 * How an algorithm's quota comes back, which tells how long a request waits from an outcome alone
 * (see `waitForCost`): `'rps'`, token by token at `rps` at the most (a bucket refills, a backlog
 * drains); `'window'`, as a window moves on, up to all of it at once; `'log'`, entry by entry,
 * each a window after it was logged (one entry per token, a fractional cost taking a whole one);
 * `'release'`, when a request that holds some gives it back (`concurrency`), which time does not
 * tell: the lease that bounds it is the longest it can take, not when it comes.
 */
export type Regain = 'rps' | 'window' | 'log' | 'release';

/**
 * Everything particular to one algorithm, in one place: the registry (`registry.ts`) collects one
 * per algorithm, and every store and check reads what it needs from there. Its Lua mirror is here
 * too (`lua`, from `<name>.lua.ts` beside its model): the Redis store's scripts assemble the
 * mirrors from the registry (`stores/redis/models.lua.ts`), so none can be missing.
 *
 * @example
 * export const TOKEN_BUCKET: AlgorithmDescriptor<TokenBucketState> = {
 *   model: tokenBucket,
 *   packing: { width: 3, write(state, row, o) { ... }, read: (row, o) => ({ ... }) },
 *   lua: TOKEN_BUCKET_LUA,
 *   tag: 'tb',
 *   regain: 'rps',
 *   scaledBy: 'rps',
 * };
 */
export interface AlgorithmDescriptor<State extends Held = any> {
  /** Its pure model: every store decides with it (or with its Lua mirror). */
  model: AlgorithmModel<State>;
  /** How the memory store packs its state. */
  packing: StatePacking<State>;
  /**
   * Its Lua mirror for the Redis store: a body that defines `local <name> = {}` with the model's
   * functions, line for line (see `lib/stores/redis/models.lua.ts`). Algorithms whose mirrors
   * share one body (GCRA's defines `leaky_bucket` too) give the same string.
   */
  lua: string;
  /**
   * The state its Lua mirror stores as a string, read back in the app (the Redis store derives a
   * decision's figures from the values its call read: see `stores/redis/script-protocol.ts`).
   * Absent for a mirror that keeps its state otherwise (the sliding window log's sorted set),
   * whose script reports its figures itself.
   */
  decodeStored?: (raw: string) => State;
  /**
   * A short tag for its bucket keys (see `bucketKey`), unique among the algorithms: a policy whose
   * algorithm changes gets fresh keys. Never change it: every bucket kept under it would be lost.
   */
  tag: string;
  /** How its quota comes back (see `Regain`); every algorithm but the `'rps'` ones counts in windows. */
  regain: Regain;
  /**
   * What a factor (`RateLimiterService.setScale`) scales: `'limit'`, the tokens per window
   * (`Rule.limit`), for one that counts per window, where a longer window would start a fresh
   * count; `'rps'` for the others: a bucket's state reads the same at any rate, and a log, which
   * keeps each entry's time, counts every one of them in a longer window; `'none'` for one a
   * factor leaves as it is (`concurrency`: a number of requests in flight is not a rate).
   */
  scaledBy: 'limit' | 'rps' | 'none';
  /**
   * How a policy gives the limit of an algorithm that is not a rate: `limit` with a `'lease'`
   * (`concurrency`: requests in flight) or with a `'period'` (`quota`: per calendar period).
   * Absent: a rate, `rps`/`burst` or `limit`/`window` (see `RATE_ALGORITHMS`).
   */
  saidAs?: 'lease' | 'period';
  /**
   * What a policy's `anchor` may say for it. `'first-request'`: `'clock'` (windows on the clock's
   * grid, the default) or `'first-request'` (a window starts at a key's first request, its rule's
   * `ModelRule.anchor`). `'function'`: a function of the request giving an identity's own period
   * start, such as a billing date. Absent: a policy of it gives no `anchor`.
   */
  anchor?: 'first-request' | 'function';
  /**
   * The policy options it cannot honour, each with why, as the start error ends
   * (`"blockFor" does not apply to "concurrency": <why>`). Absent: it takes every one.
   */
  refuses?: Readonly<Partial<Record<RefusableOption, string>>>;
  /**
   * For an algorithm whose bucket an instance may take a share of and decide from in its own
   * process (module option `shares`): until when, ms on the store's clock, what a share taken at
   * `at` (the take's charge time) may admit: `Infinity` for a bucket (its tokens are taken for
   * good), a window's end for one that counts per window (a share spent after it would count in a
   * window that has ended); `undefined` when a share of this rule cannot be placed (a window that
   * starts at its key's first request). Absent: no share (a log's entries, each with its own time;
   * a backlog that delays; slots given back).
   */
  shareUntil?: (rule: ModelRule, at: number) => number | undefined;
  /**
   * For an algorithm the Redis store's flat call decides, what that call takes of its rule after
   * `rps` and `burst`: `'limit'`, the window's limit argument (`Rule.limit`, negated when
   * anchored); `'origin'`, its period's start (`Rule.origin`). The flat call is the short script
   * most calls run (plain requests of one rule without a block; see
   * `stores/redis/script-protocol.ts`), and its Lua knows the algorithms whose state is one string,
   * by name, and reads exactly these arguments: change both together. Absent: the general call
   * decides it.
   */
  flatArgs?: readonly ('limit' | 'origin')[];
}

/**
 * A policy option that some algorithms cannot honour (see `AlgorithmDescriptor.refuses`): a block
 * after a refusal, an adaptive rate, counting failures only, charging a request its real cost when
 * it ends (`settle`, with its `maxDebt` and `settleEvery`). Named as a policy writes it.
 */
export type RefusableOption = 'blockFor' | 'adaptive' | "count: 'failures'" | 'settle';
