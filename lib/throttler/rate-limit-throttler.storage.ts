import type { OnApplicationShutdown } from '@nestjs/common';
import type { Rule } from '../algorithms/algorithm.types.js';
import { bucketKey } from '../keys/bucket-key.js';
import { RateLimitTelemetry } from '../observability/rate-limit-telemetry.js';
import { RateLimitUnavailableException } from '../rate-limit.exception.js';
import { invalidThrottlerStorageOption } from '../rate-limit.messages.js';
import { RateLimitStoreError } from '../stores/rate-limit-store.error.js';
import type { RateLimitDecision, RateLimitRequest, RateLimitStore } from '../stores/rate-limit-store.interface.js';
import { StoreCalls } from '../stores/store-calls.js';
import { type RedisOption, StoreOwner } from '../stores/store-owner.js';
import type { ThrottlerStorageRecord } from './throttler-storage-record.interface.js';
import type { ThrottlerStorage } from './throttler-storage.interface.js';

/**
 * How `RateLimitThrottlerStorage` counts. `'sliding-log'` (default): at most `limit` hits in any
 * `ttl`, as @nestjs/throttler's memory storage counts. `'anchored-window'`: at most `limit` hits
 * per window that starts at a key's first hit, as the Redis storages written for
 * @nestjs/throttler count (one fewer store key per throttler, and up to twice `limit` across the
 * end of one window and the start of the next).
 */
export type ThrottlerCounting = 'sliding-log' | 'anchored-window';

/**
 * Options of `RateLimitThrottlerStorage`, and the `engine` of `ThrottlerModule.forRoot(options, engine)`.
 *
 * @example { redis: 'redis://localhost:6379', prefix: 'throttler:', failMode: 'open', timeout: 100 }
 */
export interface RateLimitThrottlerStorageOptions {
  /** A store of ours (`MemoryStore`, `RedisStore`, your own); the app closes it. Wins over `redis`. */
  store?: RateLimitStore;
  /**
   * Redis: an ioredis `Redis` or `Cluster` (the app closes it), or a `redis://` URL or ioredis
   * options (the storage opens the client and closes it on shutdown). Neither this nor `store`:
   * a bounded `MemoryStore`.
   */
  redis?: RedisOption;
  /** What every store key starts with, without braces; default `'throttler:'`. */
  prefix?: string;
  /**
   * When the store fails or is slower than `timeout`: `'open'` (default) admits the hit,
   * `'closed'` refuses the request with a 503, `'local'` counts in this process until the store is back.
   */
  failMode?: 'open' | 'closed' | 'local';
  /** Longest a store call may take, milliseconds; default 100. */
  timeout?: number;
  /** How hits are counted (see `ThrottlerCounting`); default `'sliding-log'`. */
  counting?: ThrottlerCounting;
}

/**
 * The most a throttler's `ttl` or `blockDuration` is taken as, ms (ten years): a store keeps whole
 * ms and a Redis key a finite TTL, and no limit outlives ten years of a process or a key.
 */
const MAX_MS = 10 * 365 * 24 * 3600 * 1000;
/** The limit of the window that only tells `timeToExpire`: never reached, so it never refuses. */
const UNREACHED = 2 ** 40;
const FAIL_MODES = ['open', 'closed', 'local'];
const COUNTINGS: readonly ThrottlerCounting[] = ['sliding-log', 'anchored-window'];

/**
 * @nestjs/throttler's `ThrottlerStorage` on our stores: Redis (exact across instances, on the
 * server's clock; Cluster and Sentinel), or a bounded memory store with no timer per hit. Each
 * call is bounded by `timeout`, stopped by a circuit breaker while the store keeps failing, and
 * answered by `failMode` when the store cannot answer. It needs no Nest injection, so it is also
 * the `storage:` of the real @nestjs/throttler: the first step of a migration.
 *
 * It counts as @nestjs/throttler's memory storage does: at most `limit` hits in any `ttl` (a
 * sliding log); the hit that goes over is refused with `totalHits = limit + 1` and starts a block
 * of `blockDuration`, during which hits are refused and not counted (`totalHits` 0 once the hit
 * that went over is `ttl` old); the first hit after the block counts as 1. With
 * `blockDuration <= 0`, a hit is refused while `limit` hits are in the log, `timeToBlockExpire`
 * being the time until the oldest leaves. `timeToExpire` counts to the end of a window anchored
 * at the key's first hit (a second bucket, in the same store call and the same Redis Cluster slot).
 *
 * Where it differs from NT: `timeToBlockExpire` is 0 for an admitted hit (NT gives a negative
 * number); a window that ends while the key is refused restarts at the next admitted hit (NT:
 * at the next hit, refused or not); during a block, `totalHits` stays `limit + 1` until it is 0
 * (NT's falls as each earlier hit leaves its `ttl`: see `refusedHits`); `limit` below 1 refuses
 * every hit; a `ttl` or `blockDuration` over ten years (`Infinity` too) is taken as ten years (a
 * hit counts, and a block lasts, ten years at most; the times say at most 315,360,000 s, NT's the
 * whole time). As NT's: a fractional `limit` counts whole hits; a `ttl` of 0 or less admits every
 * hit; `ttl` and `blockDuration` are rounded up to whole ms, as NT's integer clock sees them
 * (0.5 ms: the hits of one millisecond).
 *
 * @example
 * ThrottlerModule.forRoot({
 *   throttlers: [{ ttl: 60_000, limit: 10 }],
 *   storage: new RateLimitThrottlerStorage({ redis: 'redis://localhost:6379' }),
 * })
 */
export class RateLimitThrottlerStorage implements ThrottlerStorage, OnApplicationShutdown {
  private readonly opened: Promise<{ owner: StoreOwner; calls: StoreCalls }>;
  private readonly prefix: string;
  private readonly failMode: 'open' | 'closed' | 'local';
  private readonly counting: ThrottlerCounting;
  private closed = false;

  constructor(options: RateLimitThrottlerStorageOptions = {}) {
    const {
      store,
      redis,
      prefix = 'throttler:',
      failMode = 'open',
      timeout = 100,
      counting = 'sliding-log',
    } = options ?? {};
    if (typeof prefix !== 'string' || /[{}]/.test(prefix) || prefix.length > 256) {
      throw new TypeError(
        invalidThrottlerStorageOption('prefix', prefix, 'a string of at most 256 characters, without braces'),
      );
    }
    if (!FAIL_MODES.includes(failMode))
      throw new TypeError(invalidThrottlerStorageOption('failMode', failMode, `'open', 'closed' or 'local'`));
    if (typeof timeout !== 'number' || !(timeout > 0 && timeout <= 2_147_483_647)) {
      throw new TypeError(invalidThrottlerStorageOption('timeout', timeout, 'a positive number of milliseconds'));
    }
    if (!COUNTINGS.includes(counting)) {
      throw new TypeError(invalidThrottlerStorageOption('counting', counting, `'sliding-log' or 'anchored-window'`));
    }
    this.prefix = prefix;
    this.failMode = failMode;
    this.counting = counting;
    this.opened = StoreOwner.open({ store, redis }).then((owner) => {
      // no metrics here (they are the module's), but a store's failures reach the diagnostics channel
      const telemetry = new RateLimitTelemetry(null, { mode: 'enforce', failMode }, () => false);
      return { owner, calls: new StoreCalls(owner.store, { timeout, failMode }, telemetry.storeCalls(owner.store)) };
    });
    // a store that cannot open fails the first hit, not the process
    this.opened.catch(() => undefined);
  }

  /**
   * Counts one hit of `key` for `throttlerName` (`ttl` and `blockDuration` in milliseconds) and
   * answers in seconds, rounded up.
   *
   * @throws RateLimitUnavailableException (503) when the store cannot answer and `failMode` is `'closed'`
   */
  async increment(
    key: string,
    ttl: number,
    limit: number,
    blockDuration: number,
    throttlerName: string,
  ): Promise<ThrottlerStorageRecord> {
    const windowMs = Math.min(MAX_MS, Math.ceil(Number(ttl)));
    const blockMs = Number(blockDuration) > 0 ? Math.min(MAX_MS, Math.ceil(Number(blockDuration))) : undefined;
    // NT refuses past `limit` with a block (`hits > limit`) and at `limit` without (`hits >= limit`)
    const most = blockMs === undefined ? Math.ceil(Number(limit)) : Math.floor(Number(limit));
    if (!(windowMs >= 1)) return { totalHits: 1, timeToExpire: 0, isBlocked: false, timeToBlockExpire: 0 };
    if (!(most >= 1)) {
      const wait = Math.ceil((blockMs ?? windowMs) / 1000);
      return { totalHits: 1, timeToExpire: Math.ceil(windowMs / 1000), isBlocked: true, timeToBlockExpire: wait };
    }
    const requests = this.requests(String(key), String(throttlerName), windowMs, most, blockMs);
    const { calls } = await this.opened;
    let decisions: RateLimitDecision[];
    try {
      decisions = await calls.consume(requests);
    } catch (error) {
      if (!(error instanceof RateLimitStoreError)) throw error;
      if (this.failMode === 'closed') throw new RateLimitUnavailableException(error);
      return { totalHits: 0, timeToExpire: Math.ceil(windowMs / 1000), isBlocked: false, timeToBlockExpire: 0 };
    }
    const [counted, window = counted] = decisions;
    if (counted.allowed) {
      return {
        totalHits: most - counted.remaining,
        timeToExpire: window.fullAfter,
        isBlocked: false,
        timeToBlockExpire: 0,
      };
    }
    return {
      totalHits: refusedHits(counted, most, windowMs, blockMs),
      timeToExpire: window.fullAfter,
      isBlocked: true,
      timeToBlockExpire: Number.isFinite(counted.retryAfter) ? counted.retryAfter : Math.ceil(windowMs / 1000),
    };
  }

  /** Closes what it opened (a Redis client it made from a URL or options), never what it was given. */
  async onApplicationShutdown(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const opened = await this.opened.catch(() => undefined);
    if (opened === undefined) return;
    await opened.calls.close();
    await opened.owner.close();
  }

  /**
   * The store requests of one hit: the count, and (sliding log) the window that tells
   * `timeToExpire`. Both keys hash NT's key into the same `{...}` tag: one Cluster slot, one call.
   */
  private requests(
    key: string,
    name: string,
    windowMs: number,
    most: number,
    blockMs: number | undefined,
  ): RateLimitRequest[] {
    // a brace in a throttler's name would move the Cluster hash tag off the key's digest
    const policy = name.replace(/[{}]/g, '_');
    const block = blockMs === undefined ? {} : { blockMs, blockResets: true as const };
    const rps = (most * 1000) / windowMs;
    if (this.counting === 'anchored-window') {
      const rule: Rule = { algorithm: 'fixed_window', rps, burst: most, anchor: 'first-request', ...block };
      return [{ key: bucketKey(this.prefix, policy, rule, key), policy, rule, cost: 1 }];
    }
    const log: Rule = { algorithm: 'sliding_window_log', rps, burst: most, ...block };
    const window: Rule = {
      algorithm: 'fixed_window',
      rps: (UNREACHED * 1000) / windowMs,
      burst: UNREACHED,
      anchor: 'first-request',
    };
    return [
      { key: bucketKey(this.prefix, policy, log, key), policy, rule: log, cost: 1 },
      { key: bucketKey(this.prefix, policy, window, key), policy, rule: window, cost: 1 },
    ];
  }
}

/**
 * `totalHits` of a refused hit as @nestjs/throttler's memory storage counts it: the hits of the
 * last `ttl`, the one that went over `limit` included, so `limit + 1` when it goes over. A block
 * counts nothing more, and every hit before it is older than the one that started it: once that
 * one has been in the log for `ttl`, none is left, and NT answers 0. The block has run for at
 * least `blockMs` less what `refused.retryAfter` says is left (whole seconds, rounded up), so
 * this answers 0 no sooner than NT (but for the 1 ms a refusal the Redis store remembers takes
 * off its wait), and up to a second later when `blockDuration - ttl` is not whole seconds. Before that, NT's count falls as each earlier hit leaves its `ttl`; a block's
 * decision tells nothing of when they came (it leaves nothing, and its times are whole seconds),
 * so this answers `limit + 1` until then.
 */
function refusedHits(refused: RateLimitDecision, most: number, windowMs: number, blockMs: number | undefined): number {
  if (blockMs === undefined) return most + 1;
  const blockedAtLeastMs = blockMs - 1000 * refused.retryAfter;
  return blockedAtLeastMs >= windowMs ? 0 : most + 1;
}
