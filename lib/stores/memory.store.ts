import { decideAll, expiresAt, modelOf } from '../algorithms/decide.js';
import type { Held } from '../algorithms/algorithm.types.js';
import { toDecision } from './decision.js';
import type { RateLimitDecision, RateLimitRequest, RateLimitStore } from './rate-limit-store.interface.js';

/** Options of `MemoryStore`. */
export interface MemoryStoreOptions {
  /** The clock, integer milliseconds. Default `Date.now`; tests pin it. */
  clock?: () => number;
}

interface Bucket {
  state: Held;
  /** When the state is the same as an absent key (full again), ms on `clock`. */
  expiresAt: number;
}

/** How many entries each write looks at for expiry. */
const SWEEP_PER_WRITE = 2;

/**
 * Buckets in this process's memory: exact for one process, no I/O, the default store.
 * Runs the same pure algorithm functions the Redis scripts mirror.
 *
 * No timers: an entry is dropped when read after it expired, and every write also looks at the
 * next two entries of a round-robin pass over the map, so expired entries of keys never seen
 * again are dropped while the store is in use.
 *
 * @example RateLimitModule.forRoot({ store: new MemoryStore() })
 */
export class MemoryStore implements RateLimitStore {
  private readonly buckets = new Map<string, Bucket>();
  private readonly clock: () => number;
  private sweep: Iterator<[string, Bucket]> = this.buckets.entries();

  constructor(options: MemoryStoreOptions = {}) {
    this.clock = options.clock ?? Date.now;
  }

  /** Number of live buckets (expired ones not yet swept included). */
  get size(): number {
    return this.buckets.size;
  }

  consume(requests: readonly RateLimitRequest[]): Promise<RateLimitDecision[]> {
    return Promise.resolve(this.decide(requests, true));
  }

  peek(requests: readonly RateLimitRequest[]): Promise<RateLimitDecision[]> {
    return Promise.resolve(this.decide(requests, false));
  }

  reset(keys: readonly string[]): Promise<void> {
    for (const key of keys) this.buckets.delete(key);
    return Promise.resolve();
  }

  close(): Promise<void> {
    this.buckets.clear();
    return Promise.resolve();
  }

  /** Decides synchronously; `consume` and `peek` wrap it in a promise. */
  decide(requests: readonly RateLimitRequest[], charge: boolean): RateLimitDecision[] {
    const now = this.clock();
    const entries = requests.map((request) => ({
      state: this.read(request.key, now),
      limit: request.limit,
      cost: request.cost,
    }));
    const verdict = decideAll(entries, now, charge);
    if (verdict.allowed && charge) {
      requests.forEach((request, i) => {
        const state = verdict.next[i];
        this.buckets.set(request.key, { state, expiresAt: expiresAt(modelOf(request.limit), state, request.limit) });
      });
      this.sweepSome(now);
    }
    return verdict.outcomes.map((outcome, i) => toDecision(requests[i], outcome));
  }

  private read(key: string, now: number): Held | undefined {
    const bucket = this.buckets.get(key);
    if (bucket === undefined) return undefined;
    if (bucket.expiresAt <= now) {
      this.buckets.delete(key);
      return undefined;
    }
    return bucket.state;
  }

  private sweepSome(now: number): void {
    for (let i = 0; i < SWEEP_PER_WRITE; i++) {
      let next = this.sweep.next();
      if (next.done) {
        this.sweep = this.buckets.entries();
        next = this.sweep.next();
        if (next.done) return;
      }
      const [key, bucket] = next.value;
      if (bucket.expiresAt <= now) this.buckets.delete(key);
    }
  }
}
