import type { Algorithm, Held, Outcome, Rule } from '../../algorithms/algorithm.types.js';
import {
  decideAll,
  type Entry,
  expiresAt,
  expiryAfter,
  isFull,
  modelOf,
  settle,
  type SettleScratch,
  settleScratch,
  settleState,
  type Verdict,
} from '../../algorithms/decide.js';
import { invalidMaxKeys, invalidStoreClock } from '../../rate-limit.messages.js';
import { chargedCost, restoreCharge, settledCharge, takeCharge, toDecision } from '../decision.js';
import { checkSettles, distinctRequests, repeatsKeys, spreadDecisions } from '../distinct-requests.js';
import type {
  RateLimitDecision,
  RateLimitRequest,
  RateLimitSettle,
  RateLimitStore,
} from '../rate-limit-store.interface.js';
import { clockReader, type StoreClock, storeClock } from '../store-clock.js';
import { BucketTable } from './bucket-table.js';
import { makeRoom } from './eviction.js';

/** Options of `MemoryStore`. */
export interface MemoryStoreOptions {
  /**
   * The clock, integer milliseconds: any `{ now() }`, such as `ManualClock` from
   * `nestjs-ratelimit/testing`, which tests move by hand. A function returning ms is taken too.
   * The module follows a given clock too: `leaky_bucket` waits end, and `X-RateLimit-Reset` counts,
   * on its time. Default `Date.now`.
   */
  clock?: StoreClock | (() => number);
  /**
   * Most buckets held at once. When a new one would pass it, the store frees 1 % of it: every
   * expired (full again) bucket first, then the buckets closest to full. Default `100_000`
   * (about 15 MB of heap; a sliding window log's bucket also holds its timestamps, up to twice `burst`).
   * A request never loses its own buckets to make room: one with more policies than `maxKeys`
   * holds all of them, and the next new bucket brings the store back within the bound.
   */
  maxKeys?: number;
}

/** How often expired buckets are swept while the store holds any, ms. */
const SWEEP_INTERVAL_MS = 1_000;
/** Buckets looked at per sweep, so that one sweep of a large store stays short (about 1 ms). */
const SWEEP_PER_TICK = 50_000;
const DEFAULT_MAX_KEYS = 100_000;

/**
 * Buckets in this process's memory: exact for one process, no I/O, the default store.
 * Runs the same pure algorithm functions whose Lua mirrors the Redis scripts run.
 *
 * Memory is bounded: at most `maxKeys` buckets, each a map entry and a row of a `Float64Array`
 * (about 140 bytes with its key). Eviction never drops a bucket that still limits its client
 * while an expired one is left, and then drops those that will be full soonest. An entry is
 * dropped when read after it expired, and one `unref()`'d timer, running only while the store
 * holds buckets and cleared by `close()`, sweeps expired ones of clients never seen again.
 *
 * @example RateLimitModule.forRoot({ store: new MemoryStore({ maxKeys: 1_000_000 }) })
 */
export class MemoryStore implements RateLimitStore {
  readonly inProcess = true;
  readonly kind = 'memory';
  /** The clock given in the options, if any (see `RateLimitStore.clock`). */
  readonly clock: StoreClock | undefined;
  /** The time buckets are decided at, ms: the given clock's, else `Date.now()`. */
  private readonly now: () => number;
  private readonly maxKeys: number;
  private readonly table: BucketTable;
  /**
   * Where a decision of one request works, per algorithm (see `SettleScratch`): a decision makes
   * no object but the decision it answers. Overwritten by each, read before the next.
   */
  private scratches: { [A in Algorithm]?: SettleScratch } = {};
  /** Row where the next sweep starts. */
  private sweepFrom = 0;
  private sweepTimer: NodeJS.Timeout | undefined;

  constructor(options: MemoryStoreOptions = {}) {
    const { clock = Date.now, maxKeys = DEFAULT_MAX_KEYS } = options;
    const read = clockReader(clock);
    if (read === undefined)
      throw new Error(invalidStoreClock('MemoryStore', clock, '{ now() } or a function returning ms'));
    if (!Number.isSafeInteger(maxKeys) || maxKeys < 1) throw new Error(invalidMaxKeys(maxKeys));
    this.now = read;
    this.clock = storeClock(options.clock);
    this.maxKeys = maxKeys;
    this.table = new BucketTable(maxKeys);
  }

  /**
   * `decideSync`, when `consume` and `peek` are this class's own: they only wrap it in a promise,
   * so its decisions may be taken without one. `undefined` for a subclass that overrides either:
   * the module then calls them, so that the override decides (see `RateLimitStore.decideNow`).
   */
  get decideNow(): ((requests: readonly RateLimitRequest[], charge: boolean) => RateLimitDecision[]) | undefined {
    const own = this.consume === MemoryStore.prototype.consume && this.peek === MemoryStore.prototype.peek;
    return own ? this.decideBound : undefined;
  }

  /** `decideSync` on this store, made once: what `decideNow` hands out. */
  private readonly decideBound = (requests: readonly RateLimitRequest[], charge: boolean): RateLimitDecision[] =>
    this.decideSync(requests, charge);

  /** Number of buckets held (expired ones not yet swept included). */
  get size(): number {
    return this.table.size;
  }

  // async: a bad argument rejects the promise, as with any store, instead of throwing
  async consume(requests: readonly RateLimitRequest[]): Promise<RateLimitDecision[]> {
    return this.decideSync(requests, true);
  }

  async peek(requests: readonly RateLimitRequest[]): Promise<RateLimitDecision[]> {
    return this.decideSync(requests, false);
  }

  async reset(keys: readonly string[]): Promise<void> {
    for (const key of keys) this.table.remove(key);
  }

  /** Forgets every bucket whose key starts with `prefix` (see `RateLimitStore.resetAll`). */
  async resetAll(prefix: string): Promise<void> {
    this.table.removeUnder(prefix);
  }

  /** Drops every bucket and stops the sweep timer. */
  close(): Promise<void> {
    clearTimeout(this.sweepTimer);
    this.sweepTimer = undefined;
    this.table.clear();
    // a log's scratch holds the array of the last key it decided
    this.scratches = {};
    this.sweepFrom = 0;
    return Promise.resolve();
  }

  /**
   * Decides synchronously; `consume` and `peek` wrap it in a promise. A key given twice is
   * decided once (see `RateLimitStore.consume`).
   *
   * @throws TypeError or RangeError for a bad request (a cost that is not a finite number > 0, a
   * key given twice with different rules or costs), before anything is read or charged
   */
  decideSync(given: readonly RateLimitRequest[], charge: boolean): RateLimitDecision[] {
    const where = charge ? 'MemoryStore.consume' : 'MemoryStore.peek';
    // a call that repeats no key (the module's every call) is decided as given, with nothing made for it
    if (!repeatsKeys(given, where))
      return given.length === 1 ? [this.decideOne(given[0], charge)] : this.decideDistinct(given, charge);
    const { requests, positions = [] } = distinctRequests(given, where);
    const decisions =
      requests.length === 1 ? [this.decideOne(requests[0], charge)] : this.decideDistinct(requests, charge);
    return spreadDecisions(decisions, given, positions);
  }

  /**
   * `decideDistinct` of one request, which is what most calls are (a route with one policy):
   * the same reads, verdict and writes, without a list of anything, and in the algorithm's
   * scratch: the state read, brought up to date and charged, and the outcome, are no new objects.
   */
  private decideOne(request: RateLimitRequest, charge: boolean): RateLimitDecision {
    const now = this.now();
    const { key, rule } = request;
    const scratch = (this.scratches[rule.algorithm] ??= settleScratch(rule));
    const row = this.table.rowOf(key);
    const state = this.table.read(row, rule, now, scratch.current);
    const { entry } = scratch;
    entry.state = state;
    entry.rule = rule;
    entry.cost = request.cost;
    const { next, outcome } = settle(entry, now, undefined, charge, scratch);
    if (next !== undefined) {
      // room is made around the request's own row, as in `write`
      if (row === undefined && this.table.size >= this.maxKeys) makeRoom(this.table, this.maxKeys, 1, [], now);
      this.put(key, row, rule, next, outcome);
      if (this.sweepTimer === undefined) this.scheduleSweep();
    } else if (row !== undefined && state === undefined) {
      // nothing to store: the row of a bucket that expired goes
      this.table.free(row);
    }
    return toDecision(request, outcome);
  }

  /** Decides requests whose keys are all different: each has one row at most. */
  private decideDistinct(requests: readonly RateLimitRequest[], charge: boolean): RateLimitDecision[] {
    const now = this.now();
    const n = requests.length;
    // each bucket's row (undefined: none), looked up once for the read and the write
    const rows: (number | undefined)[] = new Array<number | undefined>(n);
    const entries: Entry[] = new Array<Entry>(n);
    for (let i = 0; i < n; i++) {
      const request = requests[i];
      rows[i] = this.table.rowOf(request.key);
      entries[i] = { state: this.table.read(rows[i], request.rule, now), rule: request.rule, cost: request.cost };
    }
    const verdict = decideAll(entries, now, charge);
    if (verdict.allowed && charge) this.write(requests, rows, verdict, now);
    else {
      const { blocks } = verdict;
      // a refusal writes only the blocks it starts; the rows of buckets that expired go
      if (blocks !== undefined) this.write(requests, rows, verdict, now, blocks);
      for (let i = 0; i < n; i++)
        if (rows[i] !== undefined && entries[i].state === undefined && !blocks?.[i]) this.table.free(rows[i]!);
    }
    const decisions: RateLimitDecision[] = new Array<RateLimitDecision>(n);
    for (let i = 0; i < n; i++) decisions[i] = toDecision(requests[i], verdict.outcomes[i]);
    return decisions;
  }

  /** Stores the verdict's states: all of them, or those `only` marks. */
  private write(
    requests: readonly RateLimitRequest[],
    rows: (number | undefined)[],
    verdict: Verdict,
    now: number,
    only?: boolean[],
  ): void {
    let added = 0;
    for (let i = 0; i < rows.length; i++) if (rows[i] === undefined && (only === undefined || only[i])) added++;
    // room is made around the request's own rows, so `rows` stays right
    if (added > 0 && this.table.size + added > this.maxKeys) makeRoom(this.table, this.maxKeys, added, rows, now);
    for (let i = 0; i < requests.length; i++) {
      if (only !== undefined && !only[i]) continue;
      const { key, rule } = requests[i];
      this.put(key, rows[i], rule, verdict.next[i], verdict.outcomes[i]);
    }
    if (this.sweepTimer === undefined) this.scheduleSweep();
  }

  /**
   * Stores a bucket's state after a decision, in its row or a new one (room made already); drops
   * the key of one that is full (a reservation of 0 that found nothing taken), as Redis does.
   */
  private put(key: string, row: number | undefined, rule: Rule, state: Held, outcome: Outcome): void {
    if (outcome.fullMs === 0) {
      // the same as no key: read later, a quota's period a clock ahead chose would otherwise still count
      if (row !== undefined) this.table.free(row);
      return;
    }
    // the report's fullMs is waitMs(burst) of the stored state: expiresAt without working it out again
    this.table.write(row ?? this.table.allocate(key), rule, state, expiryAfter(state.at, outcome.fullMs));
  }

  private scheduleSweep(): void {
    this.sweepTimer = setTimeout(() => this.sweepSome(), SWEEP_INTERVAL_MS);
    this.sweepTimer.unref();
  }

  /** Drops the expired buckets among the next `SWEEP_PER_TICK` rows of a round-robin pass. */
  private sweepSome(): void {
    this.sweepTimer = undefined;
    const now = this.now();
    const end = Math.min(this.table.length, this.sweepFrom + SWEEP_PER_TICK);
    for (let row = this.sweepFrom; row < end; row++) {
      if (this.table.isUsed(row) && this.table.expiry(row) <= now) this.table.free(row);
    }
    this.sweepFrom = end < this.table.length ? end : 0;
    if (this.table.size > 0) this.scheduleSweep();
  }

  /**
   * Gives back what `consume` took for these decisions (see `RateLimitStore.refund`), each as far
   * as its charge still counts and once. A bucket that has expired since is full already: nothing to do.
   */
  refund(decisions: readonly RateLimitDecision[]): Promise<void> {
    // a request some policy refused took nothing from any bucket (all-or-nothing)
    if (!decisions.every((decision) => decision.allowed)) return Promise.resolve();
    const now = this.now();
    for (const decision of decisions) {
      const charge = takeCharge(decision);
      if (charge === undefined) continue;
      // what it holds: its request's cost, or what a settle made it since; nothing (a reservation
      // of 0) has nothing to give back, and leaves the stored state as it is (as Redis does)
      const cost = chargedCost(charge);
      if (cost === 0) continue;
      const { key, rule } = charge.request;
      const row = this.table.rowOf(key);
      const state = this.table.read(row, rule, now);
      if (state === undefined) continue;
      const model = modelOf(rule);
      const current = model.current(state, now, rule);
      const refunded = model.refund(current, rule, cost, charge.at);
      // nothing given back (a charge of a window or quota period that has ended): the stored state
      // and its expiry stand; rewritten under the charge's rule, a quota's next period would be
      // dated and timed by the ended one's length (28 days for February, when March has 31)
      if (refunded === current) continue;
      // full again: the same as no key, as Redis has it (it deletes the key), so the next request
      // finds none (a quota's period a clock behind chose, an anchored window, start afresh)
      if (isFull(model, refunded, rule)) this.table.remove(key);
      else this.table.write(row!, rule, refunded, expiresAt(model, refunded, rule));
    }
    return Promise.resolve();
  }

  /**
   * Charges admitted requests their real cost (see `RateLimitStore.settle`): each decision's
   * charge made up to its `actual`, more taken past empty as far as its rule's `debt`, or the
   * difference given back as `refund` gives it; answers the buckets as they are after.
   *
   * @throws TypeError or RangeError for a bad settle, before anything is settled (as a rejection)
   */
  settle(settles: readonly RateLimitSettle[]): Promise<(RateLimitDecision | undefined)[]> {
    try {
      checkSettles(settles, 'MemoryStore.settle');
    } catch (error) {
      return Promise.reject(error);
    }
    const now = this.now();
    return Promise.resolve(
      settles.map(({ decision, actual }) => {
        const charge = takeCharge(decision);
        if (charge === undefined) return undefined;
        const { key, rule } = charge.request;
        const row = this.table.rowOf(key);
        const { next, changed, outcome } = settleState(
          this.table.read(row, rule, now),
          now,
          rule,
          chargedCost(charge),
          actual,
          charge.at,
        );
        // nothing taken or given back: the stored state and its expiry stand (as for a refund)
        if (changed) {
          // room is made around the bucket's own row, as for a decision
          if (row === undefined && outcome.fullMs > 0 && this.table.size >= this.maxKeys)
            makeRoom(this.table, this.maxKeys, 1, [], now);
          // full again: the same as no key (see `refund`), which `put` drops
          this.put(key, row, rule, next, outcome);
          if (this.sweepTimer === undefined && this.table.size > 0) this.scheduleSweep();
        }
        const settled = settledCharge(charge, actual, outcome);
        restoreCharge(decision, settled.charge);
        return settled.decision;
      }),
    );
  }
}
