import { decideAll, type Entry, expiresAt, expiryAfter, modelOf, type Verdict } from '../../algorithms/decide.js';
import type { Held, Limit } from '../../algorithms/algorithm.types.js';
import { invalidMaxKeys, invalidStoreClock } from '../../rate-limit.messages.js';
import { chargeOf, toDecision } from '../decision.js';
import { distinctRequests, spreadDecisions } from '../distinct-requests.js';
import type { RateLimitDecision, RateLimitRequest, RateLimitStore } from '../rate-limit-store.interface.js';
import { kthSmallest } from './kth-smallest.js';
import { PACKED_STATES, PACKED_WIDTH } from './packed-state.js';

/** Options of `MemoryStore`. */
export interface MemoryStoreOptions {
  /** The clock, integer milliseconds. Default `Date.now`; tests pin it. */
  clock?: () => number;
  /**
   * Most buckets held at once. When a new one would pass it, the store frees 1 % of it: every
   * expired (full again) bucket first, then the buckets closest to full. Default `100_000`
   * (about 15 MB of heap; a sliding window log's bucket also holds its timestamps, up to twice `burst`).
   * A request never loses its own buckets to make room: one with more policies than `maxKeys`
   * holds all of them, and the next new bucket brings the store back within the bound.
   */
  maxKeys?: number;
}

/** Doubles per bucket: when it expires, then its packed state. */
const ROW = 1 + PACKED_WIDTH;
/** Buckets freed at once when the store is full, as a share of `maxKeys`. */
const EVICT_SHARE = 0.01;
/** How often expired buckets are swept while the store holds any, ms. */
const SWEEP_INTERVAL_MS = 1_000;
/** Buckets looked at per sweep, so that one sweep of a large store stays short (about 1 ms). */
const SWEEP_PER_TICK = 50_000;
const DEFAULT_MAX_KEYS = 100_000;

/**
 * Buckets in this process's memory: exact for one process, no I/O, the default store.
 * Runs the same pure algorithm functions the Redis scripts mirror.
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
  private readonly clock: () => number;
  private readonly maxKeys: number;
  /** Key to row number. */
  private readonly slots = new Map<string, number>();
  /** Row number to key, `undefined` for a free row: sweeps scan rows, never the map. Its length is the rows ever used. */
  private readonly keys: (string | undefined)[] = [];
  /** Row `i` is `rows[i * ROW ...]`: expiry time, then the state. Grows by doubling up to `maxKeys` rows. */
  private rows = new Float64Array(0);
  /** What a row cannot hold (a sliding window log's timestamps), by row number. */
  private readonly extras = new Map<number, unknown>();
  private readonly freeSlots: number[] = [];
  /** Where the next sweep starts. */
  private sweepFrom = 0;
  private sweepTimer: NodeJS.Timeout | undefined;

  constructor(options: MemoryStoreOptions = {}) {
    const { clock = Date.now, maxKeys = DEFAULT_MAX_KEYS } = options;
    if (typeof clock !== 'function') throw new Error(invalidStoreClock('MemoryStore', clock));
    if (!Number.isSafeInteger(maxKeys) || maxKeys < 1) throw new Error(invalidMaxKeys(maxKeys));
    this.clock = clock;
    this.maxKeys = maxKeys;
  }

  /** Number of buckets held (expired ones not yet swept included). */
  get size(): number {
    return this.slots.size;
  }

  // async: a bad argument rejects the promise, as with any store, instead of throwing
  async consume(requests: readonly RateLimitRequest[]): Promise<RateLimitDecision[]> {
    return this.decide(requests, true);
  }

  async peek(requests: readonly RateLimitRequest[]): Promise<RateLimitDecision[]> {
    return this.decide(requests, false);
  }

  async reset(keys: readonly string[]): Promise<void> {
    for (const key of keys) this.remove(key);
  }

  /** Drops every bucket and stops the sweep timer. */
  close(): Promise<void> {
    clearTimeout(this.sweepTimer);
    this.sweepTimer = undefined;
    this.slots.clear();
    this.keys.length = 0;
    this.extras.clear();
    this.freeSlots.length = 0;
    this.sweepFrom = 0;
    this.rows = new Float64Array(0);
    return Promise.resolve();
  }

  /**
   * Decides synchronously; `consume` and `peek` wrap it in a promise. A key given twice is
   * decided once (see `RateLimitStore.consume`).
   *
   * @throws TypeError or RangeError for a bad request (a cost that is not a finite number > 0, a
   * key given twice with different limits or costs), before anything is read or charged
   */
  decide(given: readonly RateLimitRequest[], charge: boolean): RateLimitDecision[] {
    const { requests, positions } = distinctRequests(given, charge ? 'MemoryStore.consume' : 'MemoryStore.peek');
    const decisions = this.decideDistinct(requests, charge);
    return positions === undefined ? decisions : spreadDecisions(decisions, given, positions);
  }

  /** Decides requests whose keys are all different: each has one row at most. */
  private decideDistinct(requests: readonly RateLimitRequest[], charge: boolean): RateLimitDecision[] {
    const now = this.clock();
    const n = requests.length;
    // each bucket's row (undefined: none), looked up once for the read and the write
    const slots: (number | undefined)[] = new Array(n);
    const entries: Entry[] = new Array(n);
    for (let i = 0; i < n; i++) {
      const request = requests[i];
      slots[i] = this.slots.get(request.key);
      entries[i] = { state: this.read(slots[i], request.limit, now), limit: request.limit, cost: request.cost };
    }
    const verdict = decideAll(entries, now, charge);
    if (verdict.allowed && charge) this.write(requests, slots, verdict, now);
    else for (let i = 0; i < n; i++) if (slots[i] !== undefined && entries[i].state === undefined) this.free(slots[i]!);
    const decisions: RateLimitDecision[] = new Array(n);
    for (let i = 0; i < n; i++) decisions[i] = toDecision(requests[i], verdict.outcomes[i]);
    return decisions;
  }

  /** The state in a row, `undefined` when there is none or it expired (the row is rewritten or freed after the decision). */
  private read(slot: number | undefined, limit: Limit, now: number): Held | undefined {
    if (slot === undefined || this.rows[slot * ROW] <= now) return undefined;
    return PACKED_STATES[limit.algorithm].read(this.rows, slot * ROW + 1, this.extras.get(slot));
  }

  private write(requests: readonly RateLimitRequest[], slots: (number | undefined)[], verdict: Verdict, now: number): void {
    let added = 0;
    for (const slot of slots) if (slot === undefined) added++;
    // room is made around the request's own rows, so `slots` stays right
    if (added > 0 && this.slots.size + added > this.maxKeys) this.makeRoom(added, slots, now);
    for (let i = 0; i < requests.length; i++) {
      const { key, limit } = requests[i];
      const slot = slots[i] ?? this.allocate(key);
      const state = verdict.next[i];
      // the report's fullMs is waitMs(burst) of the charged state: expiresAt without working it out again
      this.writeRow(slot, limit, state, expiryAfter(state.at, verdict.outcomes[i].fullMs));
    }
    if (this.sweepTimer === undefined) this.scheduleSweep();
  }

  /** Stores a state in its row, to expire at `expiry` (ms on the store's clock). */
  private writeRow(slot: number, limit: Limit, state: Held, expiry: number): void {
    this.rows[slot * ROW] = expiry;
    const extra = PACKED_STATES[limit.algorithm].write(state, this.rows, slot * ROW + 1);
    if (extra !== undefined) this.extras.set(slot, extra);
  }

  private allocate(key: string): number {
    let slot = this.freeSlots.pop();
    if (slot === undefined) {
      slot = this.keys.length;
      if (slot * ROW >= this.rows.length) {
        // up to maxKeys rows, or more for a request whose own buckets are more (see `maxKeys`)
        const grown = new Float64Array(Math.max(slot + 1, Math.min(Math.max(1024, (slot + 1) * 2), this.maxKeys)) * ROW);
        grown.set(this.rows);
        this.rows = grown;
      }
    }
    this.slots.set(key, slot);
    this.keys[slot] = key;
    return slot;
  }

  private remove(key: string): void {
    const slot = this.slots.get(key);
    if (slot !== undefined) this.free(slot);
  }

  private free(slot: number): void {
    const key = this.keys[slot]!;
    // only the row the map points at is the key's bucket: freeing any other must not drop it
    if (this.slots.get(key) === slot) this.slots.delete(key);
    this.keys[slot] = undefined;
    this.extras.delete(slot);
    this.freeSlots.push(slot);
  }

  /**
   * Frees room for `added` new buckets, and 1 % of `maxKeys` at least so that the next inserts
   * find room without another pass: every expired bucket first, and only when they are not
   * enough, the live buckets that will be full again soonest (the ones whose clients lose least).
   * The request's own buckets stay.
   */
  private makeRoom(added: number, kept: readonly (number | undefined)[], now: number): void {
    const evictable = (slot: number) => this.keys[slot] !== undefined && !kept.includes(slot);
    const goal = Math.min(this.maxKeys, Math.max(added, Math.ceil(this.maxKeys * EVICT_SHARE)));
    for (let slot = 0; slot < this.keys.length; slot++) {
      if (this.rows[slot * ROW] <= now && evictable(slot)) this.free(slot);
    }
    let excess = this.slots.size + goal - this.maxKeys;
    if (excess <= 0) return;

    const expiries = new Float64Array(this.slots.size);
    let count = 0;
    for (let slot = 0; slot < this.keys.length; slot++) if (evictable(slot)) expiries[count++] = this.rows[slot * ROW];
    excess = Math.min(excess, count);
    if (excess === 0) return;
    const candidates = expiries.subarray(0, count);
    const threshold = kthSmallest(candidates, excess - 1);
    // the ones expiring before the threshold all go, and as many at it as make up the number
    let atThreshold = excess;
    for (let i = 0; i < excess; i++) if (candidates[i] < threshold) atThreshold--;
    for (let slot = 0; slot < this.keys.length; slot++) {
      const expiry = this.rows[slot * ROW];
      if (expiry > threshold || !evictable(slot)) continue;
      if (expiry === threshold) {
        if (atThreshold === 0) continue;
        atThreshold--;
      }
      this.free(slot);
    }
  }

  private scheduleSweep(): void {
    this.sweepTimer = setTimeout(() => this.sweepSome(), SWEEP_INTERVAL_MS);
    this.sweepTimer.unref();
  }

  /** Drops the expired buckets among the next `SWEEP_PER_TICK` rows of a round-robin pass. */
  private sweepSome(): void {
    this.sweepTimer = undefined;
    const now = this.clock();
    const end = Math.min(this.keys.length, this.sweepFrom + SWEEP_PER_TICK);
    for (let slot = this.sweepFrom; slot < end; slot++) {
      if (this.keys[slot] !== undefined && this.rows[slot * ROW] <= now) this.free(slot);
    }
    this.sweepFrom = end < this.keys.length ? end : 0;
    if (this.slots.size > 0) this.scheduleSweep();
  }

  /**
   * Gives back what `consume` took for these decisions (see `RateLimitStore.refund`), each as far
   * as its charge still counts. A bucket that has expired since is full already: nothing to do.
   */
  refund(decisions: readonly RateLimitDecision[]): Promise<void> {
    // a request some policy refused took nothing from any bucket (all-or-nothing)
    if (!decisions.every((decision) => decision.allowed)) return Promise.resolve();
    const now = this.clock();
    for (const decision of decisions) {
      const charge = chargeOf(decision);
      if (charge === undefined) continue;
      const { key, limit, cost } = charge.request;
      const slot = this.slots.get(key);
      const state = this.read(slot, limit, now);
      if (state === undefined) continue;
      const model = modelOf(limit);
      const refunded = model.refund(model.current(state, now, limit), limit, cost, charge.at);
      this.writeRow(slot!, limit, refunded, expiresAt(model, refunded, limit));
    }
    return Promise.resolve();
  }
}
