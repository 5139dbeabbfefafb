import { ALGORITHM_DESCRIPTORS } from '../../algorithms/registry.js';
import type { ResolvedShares } from '../../rate-limit-options.js';
import type { RoutePolicy } from '../../routes/route-policy.js';
import { chargedAt, limitOf } from '../../stores/decision.js';
import type { RateLimitDecision, RateLimitRequest, RateLimitSettle } from '../../stores/rate-limit-store.interface.js';
import type { SharedDecisions } from '../../stores/store-calls.js';
import { BucketShare } from './bucket-share.js';
import { HotKey } from './hot-key.js';

/** What `Shares` asks of the module's store. */
export interface SharesPort {
  /** Decides as without shares: the store, its timeout, breaker and `failMode`. */
  consume(requests: readonly RateLimitRequest[]): RateLimitDecision[] | Promise<RateLimitDecision[]>;
  /** Takes shares: a charge within the timeout, never `failMode`'s; rejects when the store cannot answer. */
  take(requests: readonly RateLimitRequest[]): Promise<RateLimitDecision[]>;
  /** Settles shares' charges to what they used; rejects when the store cannot. */
  settle(settles: readonly RateLimitSettle[]): Promise<unknown>;
}

/** Keys watched at most: past it, a key not watched yet is decided by the store until idle ones are dropped. */
const MAX_KEYS = 10_000;
/** How often held shares are looked at (ends of holds, settles to try again), ms: one timer, only while any key is watched. */
const SWEEP_MS = 100;
/** A key not asked about for this long is forgotten (its share given back first), ms. */
const IDLE_MS = 2_000;
/** After a take the store could not answer, how long its key's requests go the store's way before the next, ms. */
const REST_MS = 250;
/** Takes in a share's hold, so that a share lasts about a quarter of it at the key's rate. */
const TAKES_PER_HOLD = 4;
/** At most this part of the bucket's limit in one share, times this instance's part of the takers (`HotKey.part`). */
const MOST_OF_LIMIT = 0.5;

/** What a request admitted from a share took from it, for its refund or settle. */
interface HeldCharge {
  share: BucketShare;
  charged: number;
}

/**
 * Hot-key shares (module option `shares`): a key this instance is asked about more than `after`
 * times a second gets a share of its bucket from the store, and its requests are decided here from
 * that share, with no store call, until it is spent or its hold ends; then what is left goes back.
 *
 * Never over the limit: a request is admitted from a share only when every one of its policies has
 * one with room (all-or-nothing, as the store decides), and a share holds only what the store
 * charged for it. A request any of whose policies has no share (not hot, opted out, an algorithm
 * that cannot share, a share spent while the store refuses more) goes to the store as without
 * shares. After the store refused a take, the key's requests are refused here until the bucket can
 * have held that share (the store's own figures say when, at the earliest). Refunds and settles of
 * a request admitted from a share go to that share, and to the store with it once it is retired.
 */
export class Shares implements SharedDecisions {
  private readonly keys = new Map<string, HotKey>();
  private readonly held = new WeakMap<RateLimitDecision, HeldCharge>();
  /** Retired shares whose settle failed: tried again at each sweep. */
  private readonly unsynced = new Set<BucketShare>();
  private sweeper: NodeJS.Timeout | undefined;
  /** Set at shutdown: every request goes to the store from then on. */
  private closed = false;

  /** @param now the local clock, ms (the store's given clock in tests, else real time) */
  constructor(
    private readonly options: ResolvedShares,
    private readonly port: SharesPort,
    private readonly now: () => number,
  ) {}

  /**
   * Decides a request from shares when every policy of it is covered: the decisions at once; a
   * promise when a take is on its way for one of its keys (the request then is decided from the
   * new share, or as without shares); `undefined` when it goes to the store as without shares.
   */
  consume(
    requests: readonly RateLimitRequest[],
    policies: readonly RoutePolicy[],
  ): RateLimitDecision[] | Promise<RateLimitDecision[]> | undefined {
    if (this.closed) return undefined;
    const now = this.now();
    const hot: HotKey[] = [];
    for (let i = 0; i < requests.length; i++) {
      const request = requests[i];
      if (policies[i].unshared === true || !sharable(request)) return undefined;
      const key = this.watch(request.key, now);
      if (key === undefined) return undefined;
      key.asked(request.cost, now);
      hot.push(key);
    }
    const decided = this.fromShares(requests, hot, now);
    if (decided !== 'take') return decided;
    return this.takeThenDecide(requests, hot, now);
  }

  /** Whether `decision` was made from a share (its refunds and settles come here). */
  owns(decision: RateLimitDecision): boolean {
    return this.held.has(decision);
  }

  /** Gives back what requests admitted from shares took, into their shares (a retired one's charge in the store follows). */
  refund(decisions: readonly RateLimitDecision[]): Promise<void> {
    for (const decision of decisions) {
      const charge = this.held.get(decision);
      if (charge === undefined) continue;
      this.held.delete(decision);
      charge.share.used -= charge.charged;
      this.afterChange(charge.share);
    }
    return Promise.resolve();
  }

  /**
   * Charges requests admitted from shares their real cost, from their shares (a retired one's
   * charge in the store follows): a share spent past its size by a settle admits nothing more, and
   * when it goes back the store takes the rest past empty, as far as the rule's debt.
   */
  settle(settles: readonly RateLimitSettle[]): Promise<(RateLimitDecision | undefined)[]> {
    const now = this.now();
    return Promise.resolve(
      settles.map(({ decision, actual }) => {
        const charge = this.held.get(decision);
        if (charge === undefined) return undefined;
        const { share } = charge;
        share.used += actual - charge.charged;
        charge.charged = actual;
        this.afterChange(share);
        const after = share.decision(decision.policy, decision.tier, share.used <= share.size, now);
        if (!after.allowed) after.retryAfter = 1;
        return after;
      }),
    );
  }

  /** Gives every share back (what is left of it) and stops the sweep: at shutdown. */
  async close(): Promise<void> {
    this.closed = true;
    if (this.sweeper !== undefined) clearInterval(this.sweeper);
    this.sweeper = undefined;
    // a take on its way makes its share when it lands: wait for it, so that share goes back too
    const taking: Promise<void>[] = [];
    for (const key of this.keys.values()) if (key.taking !== undefined) taking.push(key.taking);
    await Promise.allSettled(taking);
    const shares = new Set(this.unsynced);
    for (const key of this.keys.values()) if (key.share !== undefined) shares.add(key.share);
    this.keys.clear();
    const syncing: Promise<void>[] = [];
    for (const share of shares) {
      if (share.retired) this.sync(share);
      else this.retire(share);
      if (share.syncing !== undefined) syncing.push(share.syncing);
    }
    await Promise.allSettled(syncing);
  }

  // ---------------------------------------------------------------------------------------------

  /** The key's record, made on first sight; `undefined` when too many are watched already. */
  private watch(key: string, now: number): HotKey | undefined {
    let hot = this.keys.get(key);
    if (hot !== undefined) return hot;
    if (this.keys.size >= MAX_KEYS) return undefined;
    this.keys.set(key, (hot = new HotKey()));
    hot.seenAt = now;
    this.sweeper ??= setInterval(() => this.sweep(), SWEEP_MS).unref();
    return hot;
  }

  /**
   * The decisions shares give now: every request admitted from its key's share; or refused, when a
   * key waits for its bucket to hold a share again and every other has room; `'take'` when a hot
   * key needs a share and may take one; `undefined` when the store decides.
   */
  private fromShares(
    requests: readonly RateLimitRequest[],
    keys: readonly HotKey[],
    now: number,
  ): RateLimitDecision[] | 'take' | undefined {
    let covered = true;
    let waiting = -1;
    let take = false;
    for (let i = 0; i < requests.length; i++) {
      const key = keys[i];
      const { share } = key;
      if (share !== undefined && share.fits(requests[i], now)) continue;
      covered = false;
      if (share !== undefined && !share.retired && share.over(requests[i], now)) this.retire(share);
      if (!key.hot(this.options.after)) return undefined;
      if (now < key.waitUntil) waiting = i;
      else if (key.taking !== undefined || now >= key.restUntil) take = true;
      else return undefined;
    }
    if (covered) return this.admit(requests, keys, now);
    if (take) return 'take';
    return waiting >= 0 && this.othersFit(requests, keys, waiting, now)
      ? this.refuse(requests, keys, waiting, now)
      : undefined;
  }

  /** Sends the takes the request's keys need (or waits for those on their way), then decides from shares again, else as without shares. */
  private async takeThenDecide(
    requests: readonly RateLimitRequest[],
    keys: readonly HotKey[],
    now: number,
  ): Promise<RateLimitDecision[]> {
    const takes: Promise<void>[] = [];
    for (let i = 0; i < requests.length; i++) {
      const key = keys[i];
      if (key.share?.fits(requests[i], now) === true) continue;
      if (key.taking === undefined && now >= key.waitUntil && now >= key.restUntil) {
        const taking = this.take(key, requests[i], now);
        key.taking = taking;
        void taking.finally(() => {
          if (key.taking === taking) key.taking = undefined;
        });
      }
      if (key.taking !== undefined) takes.push(key.taking);
    }
    await Promise.all(takes);
    const decided = this.fromShares(requests, keys, this.now());
    return decided === undefined || decided === 'take' ? this.port.consume(requests) : decided;
  }

  /**
   * Takes a share of `request`'s bucket for `key`, sized by its rate and its part of the takers
   * (see `sizeOf`). Granted, it replaces the key's share; refused, the key waits until the bucket
   * can hold it; failed (the store out of reach), the key's requests go the store's way a while.
   * Never rejects.
   */
  private async take(key: HotKey, request: RateLimitRequest, sent: number): Promise<void> {
    const { rule } = request;
    const size = this.sizeOf(key, request);
    let taken: RateLimitDecision;
    try {
      [taken] = await this.port.take([{ ...request, cost: size }]);
    } catch {
      key.restUntil = this.now() + REST_MS;
      return;
    }
    if (!taken.allowed) {
      key.refused = taken;
      key.waitUntil = sent + this.refusedFor(request, size, taken);
      // a window regains nothing until it ends: the next take asks for what it has
      key.room = ALGORITHM_DESCRIPTORS[rule.algorithm].regain === 'rps' ? undefined : taken.remaining;
      return;
    }
    const at = chargedAt(taken);
    const storeEnd = at === undefined ? undefined : ALGORITHM_DESCRIPTORS[rule.algorithm].shareUntil?.(rule, at);
    if (at === undefined || storeEnd === undefined) {
      // a store that keeps no charge time cannot say the window: the share goes straight back
      void this.port.settle([{ decision: taken, actual: 0 }]).catch(() => undefined);
      key.restUntil = this.now() + REST_MS;
      return;
    }
    this.learn(key, request, taken, at, size, storeEnd);
    const windowEnd = storeEnd === Infinity ? Infinity : sent + (storeEnd - at);
    if (key.share !== undefined) this.retire(key.share);
    key.share = new BucketShare(
      { ...request, cost: size },
      taken,
      taken.remaining + size,
      Math.min(sent + this.options.holdMs, windowEnd),
      windowEnd,
    );
    key.waitUntil = 0;
    key.refused = undefined;
    key.room = undefined;
  }

  /**
   * The size of the next share of `request`'s bucket: what the key asks for in a quarter of a hold
   * at its recent rate, at most half the limit times this instance's part of the takers, at least
   * the request's own cost, within `burst`.
   */
  private sizeOf(key: HotKey, request: RateLimitRequest): number {
    const { rule, cost } = request;
    const wanted = Math.ceil((key.rate() * this.options.holdMs) / 1000 / TAKES_PER_HOLD);
    const most = Math.max(1, Math.floor(limitOf(rule) * MOST_OF_LIMIT * key.part));
    return Math.min(rule.burst, Math.max(cost, Math.min(wanted, most, key.room ?? Infinity)));
  }

  /**
   * Learns this instance's part of what is taken from the bucket from two of its takes in a row:
   * what the bucket would hold at this take had nobody else taken since the last (what it left,
   * plus what it regained at `rps` for a bucket, nothing within one window) against what it held.
   */
  private learn(
    key: HotKey,
    request: RateLimitRequest,
    taken: RateLimitDecision,
    at: number,
    size: number,
    windowEnd: number,
  ): void {
    const { rule } = request;
    const last = key.granted;
    key.granted = { at, remaining: taken.remaining, size, windowEnd };
    if (last === undefined || at < last.at) return;
    const regains = ALGORITHM_DESCRIPTORS[rule.algorithm].regain === 'rps';
    if (!regains && last.windowEnd !== windowEnd) return;
    const regained = regains ? (rule.rps * (at - last.at)) / 1000 : 0;
    const expected = Math.min(limitOf(rule), last.remaining + regained);
    const others = Math.max(0, expected - (taken.remaining + size));
    const part = last.size / (last.size + others);
    key.part = Math.min(1, Math.max(1 / 64, (key.part + part) / 2));
  }

  /**
   * How long after a refused take its bucket cannot hold the share, ms, at the earliest: a bucket
   * regains at `rps` from what the refusal left (plus its debt), and a window that holds anything
   * is taken as far as it goes next time; one that holds nothing, until its end.
   */
  private refusedFor(request: RateLimitRequest, size: number, refused: RateLimitDecision): number {
    const { rule } = request;
    if (ALGORITHM_DESCRIPTORS[rule.algorithm].regain === 'rps') {
      const short = size + (refused.debt ?? 0) - refused.remaining - 1;
      return Math.max(1, (short * 1000) / rule.rps);
    }
    if (refused.remaining >= request.cost) return 0;
    return Math.max(1, (refused.retryAfter - 1) * 1000);
  }

  /** Admits every request from its key's share. */
  private admit(requests: readonly RateLimitRequest[], keys: readonly HotKey[], now: number): RateLimitDecision[] {
    const decisions: RateLimitDecision[] = [];
    for (let i = 0; i < requests.length; i++) {
      const { policy, tier, cost } = requests[i];
      const share = keys[i].share!;
      share.used += cost;
      const decision = share.decision(policy, tier, true, now);
      this.held.set(decision, { share, charged: cost });
      decisions.push(decision);
    }
    return decisions;
  }

  /** Whether every key but the `waiting` one has a share with room for its request. */
  private othersFit(
    requests: readonly RateLimitRequest[],
    keys: readonly HotKey[],
    waiting: number,
    now: number,
  ): boolean {
    for (let i = 0; i < requests.length; i++) {
      if (i === waiting) continue;
      if (keys[i].share?.fits(requests[i], now) !== true && now >= keys[i].waitUntil) return false;
    }
    return true;
  }

  /**
   * Refuses a request whose `waiting` key's bucket cannot hold a share yet, charging nothing: that
   * key's decision says when it can (the refused take's figures), the others' what their shares hold.
   */
  private refuse(
    requests: readonly RateLimitRequest[],
    keys: readonly HotKey[],
    waiting: number,
    now: number,
  ): RateLimitDecision[] {
    return requests.map(({ policy, tier }, i) => {
      const key = keys[i];
      const share = key.share;
      if (i !== waiting && share?.fits(requests[i], now) === true) return share.decision(policy, tier, true, now);
      const refused: RateLimitDecision = {
        ...key.refused!,
        policy,
        retryAfter: Math.max(1, Math.ceil((key.waitUntil - now) / 1000)),
      };
      if (tier !== undefined) refused.tier = tier;
      return refused;
    });
  }

  /** A share that admits no more: what it has not used goes back (its charge settled to what it used). */
  private retire(share: BucketShare): void {
    share.retired = true;
    this.sync(share);
  }

  /** After a refund or a settle moved what a share used: a retired share's charge follows it. */
  private afterChange(share: BucketShare): void {
    if (share.retired) this.sync(share);
  }

  /** Settles a retired share's charge in the store to what it used, one settle at a time; a failed one is tried again at the next sweep. */
  private sync(share: BucketShare): void {
    if (share.syncing !== undefined) {
      share.stale = true;
      return;
    }
    if (share.used === share.synced) {
      this.unsynced.delete(share);
      return;
    }
    const actual = Math.max(0, share.used);
    share.stale = false;
    share.syncing = this.port.settle([{ decision: share.taken, actual }]).then(
      () => {
        share.synced = actual;
        share.syncing = undefined;
        if (share.stale) this.sync(share);
        else this.unsynced.delete(share);
      },
      () => {
        share.syncing = undefined;
        this.unsynced.add(share);
      },
    );
  }

  /** Retires shares whose hold has ended, tries failed settles again, forgets idle keys; stops when none is watched. */
  private sweep(): void {
    const now = this.now();
    for (const [name, key] of this.keys) {
      const { share } = key;
      if (share !== undefined && !share.retired && now >= share.until) this.retire(share);
      if (now - key.seenAt >= IDLE_MS && key.taking === undefined) {
        if (share !== undefined && !share.retired) this.retire(share);
        this.keys.delete(name);
      }
    }
    for (const share of this.unsynced) if (share.syncing === undefined) this.sync(share);
    if (this.keys.size === 0 && this.unsynced.size === 0 && this.sweeper !== undefined) {
      clearInterval(this.sweeper);
      this.sweeper = undefined;
    }
  }
}

/** Whether a request's bucket may be shared: an algorithm whose descriptor says how, no block, a cost a share can count. */
function sharable({ rule }: RateLimitRequest): boolean {
  return ALGORITHM_DESCRIPTORS[rule.algorithm].shareUntil !== undefined && rule.blockMs === undefined;
}
