import type { Rule } from '../algorithms/algorithm.types.js';
import type { StoreClock } from './store-clock.js';

/**
 * One policy's verdict on one request. Times are whole seconds, rounded up.
 *
 * @example { allowed: false, policy: 'per-org', limit: 200, remaining: 0, resetAfter: 1, fullAfter: 2, retryAfter: 1, delay: 0 }
 */
export interface RateLimitDecision {
  /** Whether this policy admits the request. A request passes only when every policy admits it. */
  allowed: boolean;
  /** The policy's name. */
  policy: string;
  /** The policy's capacity (`burst`, or `limit` for windows; under a factor, a window's scaled limit rounded down, at least 1). */
  limit: number;
  /** Whole tokens left after this request; never negative. Uncharged when the request was refused. */
  remaining: number;
  /** Seconds until more quota is available (`t` in `RateLimit`, legacy `RateLimit-Reset`). */
  resetAfter: number;
  /** Seconds until the bucket is full again (`X-RateLimit-Reset` is now plus this). */
  fullAfter: number;
  /**
   * Seconds until this request would be admitted, at least 1; 0 when admitted. `Infinity` when
   * its cost exceeds the policy's capacity, so it can never be admitted.
   */
  retryAfter: number;
  /**
   * Seconds the request waits before it proceeds, from when the store hands the decision back
   * (`leaky_bucket` only; else 0): a remote store takes off what its answer took to come back
   * since it decided, so its turn comes when the queue says.
   */
  delay: number;
  /** The tier the request was limited as, for a policy with `tiers`; absent otherwise. */
  tier?: string;
  /**
   * Whole tokens (rounded up) the bucket owes past empty after a settle took more than it held
   * (`RateLimitStore.settle`, as far as the policy's `maxDebt`), paid back by time (a bucket refills
   * them before anything else, a window holds them until they end or slide out of it). `remaining`
   * is 0 then, and the bucket holds `limit + debt` taken. Absent when none, and always for a policy
   * that does not settle.
   *
   * @example { allowed: false, policy: 'tpm', limit: 40000, remaining: 0, resetAfter: 2, fullAfter: 62, retryAfter: 2, delay: 0, debt: 1200 }
   */
  debt?: number;
}

/** One policy's part of a request, as the guard or `RateLimiterService` hands it to a store. */
export interface RateLimitRequest {
  /** The bucket's store key (already prefixed and hashed). */
  key: string;
  /** The policy's name, for the decision. */
  policy: string;
  /** The rule its bucket follows. */
  rule: Rule;
  /**
   * Tokens to take: a finite number > 0 (fractions allowed); or 0, for a rule that settles
   * (`Rule.debt`): a reservation of nothing, admitted while its bucket is not in debt.
   */
  cost: number;
  /** The tier of a policy with `tiers` (its bucket's rule and key are the tier's), for the decision. */
  tier?: string;
}

/**
 * One admitted request's real cost, for `RateLimitStore.settle`: a request of a policy that settles
 * takes an estimate (its `cost`, maybe 0) when it is decided, and this when it ends.
 *
 * @example await store.settle?.([{ decision, actual: usage.total_tokens }])
 */
export interface RateLimitSettle {
  /**
   * A decision this store's `consume` returned, of a request it admitted (every policy's decision
   * `allowed`: a refused request took nothing, and has nothing to settle).
   */
  decision: RateLimitDecision;
  /**
   * Tokens the request costs in all, a finite number >= 0 (fractions allowed): what it has taken
   * so far is made up to this, more taken (past empty, as far as its rule's `debt`) or the
   * difference given back.
   */
  actual: number;
}

/**
 * What the caller of one `consume` or `peek` tells the store beside the requests: nothing of the
 * calls before it, so the store answers each call on what it is given.
 *
 * @example await store.consume(requests, { timeoutMs: 100 })
 */
export interface RateLimitCallOptions {
  /**
   * How long the caller waits for the answer, ms (the module passes its `timeout`): a remote store
   * should charge nothing for a call that only reaches its server after that (see `timesCalls`).
   * Absent: the caller waits as long as the call takes.
   */
  timeoutMs?: number;
}

/**
 * Where buckets live. A store decides a request against all of its policies at once and
 * all-or-nothing: when any policy refuses, no bucket is charged. A store returns decisions and
 * never throws for "limited"; it throws (or rejects) only when it cannot decide, and the module's
 * `failMode` takes over.
 *
 * `RateLimitStore` is also the injection token of the store the module uses.
 *
 * @example constructor(@Inject(RateLimitStore) private readonly store: RateLimitStore) {}
 */
export interface RateLimitStore {
  /**
   * `true` for a store that decides in this process (the memory store): it cannot hang or lose
   * a server, so the module calls it directly, without a deadline or a circuit breaker.
   */
  readonly inProcess?: boolean;
  /**
   * What the `ratelimit.store` metric attribute calls this store's calls: `'memory'` or
   * `'redis'` (the built-in stores say so). Absent: `'custom'`.
   */
  readonly kind?: 'memory' | 'redis';
  /**
   * For an in-process store whose decisions are made when it is asked: the decisions `consume`
   * (`charge` true) or `peek` would give, returned at once instead of in a promise, so the module
   * takes them without one. It throws where those reject (a bad request). Absent, or `undefined`
   * (a `MemoryStore` subclass that overrides `consume` or `peek`, whose overrides must be called),
   * and the module calls `consume` and `peek`. The module reads it once, when it starts.
   *
   * @example const decisions = store.decideNow?.(requests, true) ?? (await store.consume(requests));
   */
  readonly decideNow?: (requests: readonly RateLimitRequest[], charge: boolean) => RateLimitDecision[];
  /**
   * `true` for a remote store that bounds `consume` and `peek` by their `options.timeoutMs` itself,
   * counted from when each call leaves the process (is handed to its client), and that settles
   * past it with a `RateLimitStoreError` whose `reason` is `'timeout'`, only once the replies that
   * had arrived by then have been read. The module then sets no deadline of its own on them: time
   * this process spends not running (a busy event loop, a collection pause) never counts against
   * `timeout`. `RedisStore` does this; any other remote store is bounded from when it is asked.
   */
  readonly timesCalls?: boolean;
  /**
   * The clock the store decides on, when it was given one (`new MemoryStore({ clock })`,
   * `new RedisStore({ client, clock })` with a `{ now() }` or a function): the module then times
   * `leaky_bucket` waits on it and counts `X-RateLimit-Reset` from it (its ms taken as Unix ms),
   * so a test that moves a `ManualClock` moves them too. Absent: the store decides on real time,
   * and so do the waits and the headers.
   */
  readonly clock?: StoreClock;
  /**
   * Decides and, when every policy admits the request, charges every bucket, within
   * `options.timeoutMs` where it is given (see `RateLimitCallOptions`).
   *
   * A key given more than once in one call is one bucket, decided and charged once: when its
   * requests agree (same rule, same cost), each gets that decision (under its own `policy`);
   * when they do not, the call is refused. A bad request (a cost that is not a finite number > 0,
   * or >= 0 for a rule that settles, `Rule.debt`; a key given twice with different rules or costs)
   * rejects this call alone, with a
   * `TypeError` or `RangeError` naming it and before anything is charged: never a
   * `RateLimitStoreError`, which says the store itself could not decide.
   *
   * @example await store.consume([{ key: 'rl:api:tb:{...}', policy: 'api', rule: { algorithm: 'token_bucket', rps: 10, burst: 20 }, cost: 1 }], { timeoutMs: 100 })
   */
  consume(requests: readonly RateLimitRequest[], options?: RateLimitCallOptions): Promise<RateLimitDecision[]>;
  /**
   * The decisions `consume` would give, when the store has them without asking its server (a
   * remote store's remembered refusals: its `RefusalGate`'s `answer`), else `undefined`; it must
   * not charge anything. The module asks it right before `consume`, with the same array of
   * requests, and calls `consume` only when it has no answer: such an answer is not bounded by
   * `timeout`, works while the server is down, and says nothing of the server's health. A
   * `RefusalGate` remembers the requests it had no answer for, so that `consume` does not look
   * them up a second time.
   */
  cached?(requests: readonly RateLimitRequest[]): RateLimitDecision[] | undefined;
  /**
   * Decides without charging anything, within `options.timeoutMs` where it is given; requests are
   * checked and repeated keys decided once, as by `consume`.
   */
  peek(requests: readonly RateLimitRequest[], options?: RateLimitCallOptions): Promise<RateLimitDecision[]>;
  /** Forgets the given buckets (they are full again). */
  reset(keys: readonly string[]): Promise<void>;
  /**
   * Forgets every bucket whose key starts with `prefix` (the module's), and nothing else: what
   * `RateLimiterService.resetAll()` calls, between tests for instance. Not bounded by the
   * module's `timeout`: a large keyspace takes as long as it takes to walk. Optional: without it,
   * `resetAll()` rejects.
   */
  resetAll?(prefix: string): Promise<void>;
  /**
   * Gives back what `consume` took for a request that will not run after all: `decisions` are
   * the ones this store's `consume` returned for it. Every policy's cost goes back into its
   * bucket as far as the charge still counts (a window that has ended since keeps nothing to
   * give back) and never past full; a request some policy refused took nothing and gets nothing.
   * A decision is given back once: refunded again after a refund that gave it back (alone or among
   * others), it gives nothing. A refund that rejects (its server out of reach) leaves what it could
   * not give back on its decisions, so that refunding the same decisions again tries again; one
   * made in parts (a hash slot each, on a Redis Cluster) leaves only the parts that failed. A
   * refund whose reply was lost after the server ran it (a connection cut on the way back) looks
   * failed, and refunded again, gives back twice. The store finds what each decision took and when
   * by the decision object itself (the built-in stores keep that beside each decision they return,
   * a refund takes it and one that failed puts it back), so the decision's shape stays public.
   *
   * The module calls it when a client goes away while its request waits its `leaky_bucket`
   * turn, and for requests still waiting at shutdown. Optional: without it, those charges stay
   * taken (fewer admissions, never more). A decision settled before (`settle`) gives back what its
   * charge holds since, the tokens it was settled to.
   *
   * @example await store.refund?.(await store.consume(requests))
   */
  refund?(decisions: readonly RateLimitDecision[]): Promise<void>;
  /**
   * Charges admitted requests their real cost, once they have run (a policy that settles: its
   * `cost` an estimate taken up front, maybe 0). For each settle, what its decision has taken so
   * far (its request's `cost`, or what the last settle made it) is made up to `actual` tokens:
   * more is taken even past empty, down to its rule's `debt` tokens past it (never giving anything
   * back); less is given back as `refund` gives back (never past full, never into another window or
   * period than the one it was last taken in). The requests that follow a debt are refused until
   * time has paid it back. The decision then holds `actual` (a later settle or refund starts from
   * it) and, when the settle took more, the settle's time. A refund is a settle to 0.
   *
   * Resolves with, per settle, the bucket as the settle left it, as `peek` would report a request of
   * cost 0: `allowed` false while it is in debt (or blocked), `remaining` 0 then, `retryAfter`
   * seconds until it is paid back; `undefined` for a decision with nothing to settle (refused,
   * refunded, another store's), for which nothing is done. A settle that rejects (its server out of
   * reach) leaves the decisions it could not settle as they were, so settling them again tries
   * again; one made in parts (a hash slot each, on a Redis Cluster) leaves only the parts that
   * failed. A bad settle (an `actual` that is not a finite number >= 0) rejects the call, with a
   * `TypeError` or `RangeError`, before anything is settled.
   *
   * Optional: without it, the store cannot serve a policy that settles.
   *
   * @example
   * const [decision] = await store.consume([{ key, policy: 'tpm', rule: { algorithm: 'token_bucket', rps: 40_000 / 60, burst: 40_000, debt: 40_000 }, cost: 500 }]);
   * // ... the request runs, and used 1,800 tokens
   * const [after] = await store.settle!([{ decision, actual: 1_800 }]); // 1,300 more taken
   */
  settle?(settles: readonly RateLimitSettle[]): Promise<(RateLimitDecision | undefined)[]>;
  /** Releases what the store itself opened. */
  close?(): Promise<void>;
  /**
   * Resolves once the store is set to decide (what it loads into its server loaded), or once it
   * has waited a bounded while for a server that does not answer: the module awaits it at start,
   * so that the first decision pays for no set-up, and a server that is down never stops the app
   * from starting. Rejects with an error naming the cause when the server can never decide (a
   * Redis that refuses scripts): start fails with it.
   */
  ready?(): Promise<void>;
  /**
   * The servers that decide these requests, for a store whose servers fail apart (a Redis
   * Cluster's masters, by address): the module keeps a circuit breaker per server, so one dead
   * server gives `failMode` to its own keys alone. It names a failed server in its error's
   * `node`. Absent: the store is one server, with one breaker.
   */
  readonly nodesOf?: (requests: readonly RateLimitRequest[]) => readonly string[];
}

/** Injection token of the store the module uses. */
export const RateLimitStore = Symbol('RateLimitStore');
