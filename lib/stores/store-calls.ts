import { Logger } from '@nestjs/common';
import { circuitOpen, resetAllUnsupported, storeBack, storeFailed, storeFailing } from '../rate-limit.messages.js';
import { DeadlineQueue } from '../utils/deadline-queue.js';
import { MemoryStore } from './memory/memory.store.js';
import { BREAKER_PROBE_MS, NodeBreakers, ONE_NODE } from './node-breakers.js';
import { RateLimitStoreError, storeTimeout } from './rate-limit-store.error.js';
import type {
  RateLimitCallOptions,
  RateLimitDecision,
  RateLimitRequest,
  RateLimitSettle,
  RateLimitStore,
} from './rate-limit-store.interface.js';
import { storeClock } from './store-clock.js';

/** What `StoreCalls` needs of the module's options. */
export interface StoreCallOptions {
  readonly timeout: number;
  readonly failMode: 'open' | 'closed' | 'local';
}

/**
 * How a decision's store call ended: answered (`ok`), too slow (`timeout`), failed (`error`), not
 * made while the circuit breaker is open (`breaker_open`), or not needed: the store knew the
 * answer without asking its server (`cached`, a remote store's remembered refusals).
 */
export type StoreCallOutcome = 'ok' | 'timeout' | 'error' | 'breaker_open' | 'cached';

/** What `StoreCalls` tells of its calls, for metrics and events (see lib/observability). */
export interface StoreCallWatcher {
  /** Whether decisions are timed: `called` hears of each only then. */
  readonly timed: boolean;
  /** A decision's store call ended, `seconds` after it started. */
  called(outcome: StoreCallOutcome, seconds: number): void;
  /** A store call failed or timed out: `failMode` decides. */
  failed(error: RateLimitStoreError, failMode: StoreCallOptions['failMode']): void;
  /** The circuit breaker opened (calls stop) or closed (the store answers again). */
  breaker(state: 'open' | 'closed'): void;
}

/**
 * Decisions made in this process from shares of their buckets (see `Shares`, module option
 * `shares`): their refunds and settles go there, not to the store.
 */
export interface SharedDecisions {
  owns(decision: RateLimitDecision): boolean;
  refund(decisions: readonly RateLimitDecision[]): Promise<void>;
  settle(settles: readonly RateLimitSettle[]): Promise<(RateLimitDecision | undefined)[]>;
}

/** Nobody watching: what `StoreCalls` tells goes nowhere, and nothing is timed. */
const UNWATCHED: StoreCallWatcher = {
  timed: false,
  called: () => undefined,
  failed: () => undefined,
  breaker: () => undefined,
};

/**
 * The module's store as the service calls it: each call within `timeout` (from when it leaves the
 * process, for a store that `timesCalls`; else from when it is asked); after 3 failures in a row
 * a circuit breaker stops calling it (one probe every 250 ms), per server for a store that says
 * which decides a call (`nodesOf`: a Redis Cluster's masters); a failed call takes `failMode`'s
 * way out (`'local'`: an in-process limiter decides). A store in this process cannot hang or lose
 * its server: it is called directly.
 */
export class StoreCalls {
  private readonly deadlines: DeadlineQueue;
  private readonly logger = new Logger('RateLimitModule');
  private readonly breakers: NodeBreakers;
  /** The servers that decide a call, for a store of several (see `RateLimitStore.nodesOf`). */
  private readonly nodesOf: RateLimitStore['nodesOf'];
  /** Decisions the local limiter made (failMode 'local'): their refunds go to it, not to the store. */
  private readonly localDecisions = new WeakSet<RateLimitDecision>();
  private local: MemoryStore | undefined;
  /** The in-process store's synchronous decisions, when it has them (see `RateLimitStore.decideNow`). */
  private readonly decideNow: RateLimitStore['decideNow'];
  /** What a remote store's every call is told, the module's timeout: frozen, as every call shares it. */
  private readonly callOptions: RateLimitCallOptions;
  /** Decisions made from shares of their buckets, when the module takes shares. */
  private shared: SharedDecisions | undefined;

  constructor(
    private readonly store: RateLimitStore,
    private readonly options: StoreCallOptions,
    private readonly watcher: StoreCallWatcher = UNWATCHED,
  ) {
    this.deadlines = new DeadlineQueue(options.timeout);
    this.callOptions = Object.freeze({ timeoutMs: options.timeout });
    this.decideNow = store.inProcess ? store.decideNow : undefined;
    this.nodesOf = store.nodesOf?.bind(store);
    this.breakers = new NodeBreakers({
      transition: (state) => watcher.breaker(state),
      outage: (failure, node) =>
        this.logger.error(storeFailing(failure.message, options.failMode, BREAKER_PROBE_MS, node)),
      over: (node) => this.logger.log(storeBack(node)),
    });
  }

  /**
   * Decides store requests within the timeout and, when every policy admits them, charges them:
   * the decisions themselves from a store that has `decideNow` (which throws a bad request's error
   * instead of rejecting), a promise from any other.
   *
   * @throws RateLimitStoreError when the store fails or is too slow and failMode is not 'local'
   */
  consume(requests: readonly RateLimitRequest[]): RateLimitDecision[] | Promise<RateLimitDecision[]> {
    return this.decisions(requests, true);
  }

  /**
   * The decisions `consume` would give, charging nothing (see `consume`).
   *
   * @throws RateLimitStoreError when the store fails or is too slow and failMode is not 'local'
   */
  peek(requests: readonly RateLimitRequest[]): RateLimitDecision[] | Promise<RateLimitDecision[]> {
    return this.decisions(requests, false);
  }

  private decisions(
    requests: readonly RateLimitRequest[],
    charge: boolean,
  ): RateLimitDecision[] | Promise<RateLimitDecision[]> {
    if (!this.store.inProcess) return this.decideRemote(requests, charge);
    // an in-process store has decided when it returns: that is its time, and no wrapper per call
    const started = this.watcher.timed ? performance.now() : 0;
    const decided =
      this.decideNow !== undefined ? this.decideNow(requests, charge) : this.decideInProcess(requests, charge);
    this.ended('ok', started);
    return decided;
  }

  /** Another in-process store's promise; one that throws instead of rejecting is answered with a rejection, a store error's `failMode` included. */
  private decideInProcess(requests: readonly RateLimitRequest[], charge: boolean): Promise<RateLimitDecision[]> {
    try {
      return charge ? this.store.consume(requests) : this.store.peek(requests);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /**
   * Charges a share of buckets (see `Shares`): `consume` within the timeout and behind the circuit
   * breaker, but never `failMode`'s way out. A remote store's remembered refusals (its refusal
   * gate, in its `consume`) may still answer a take it knows it would refuse.
   *
   * @throws RateLimitStoreError when the store fails, is too slow, or its breaker is open
   */
  async take(requests: readonly RateLimitRequest[]): Promise<RateLimitDecision[]> {
    if (this.store.inProcess) return this.store.consume(requests);
    return this.remote(requests, true, performance.now());
  }

  /** Sends the refunds and settles of decisions made from shares to `shared` (see `SharedDecisions`). */
  shareWith(shared: SharedDecisions): void {
    this.shared = shared;
  }

  /** Whether `decision` is the local limiter's (failMode 'local'), not the store's. */
  decidedLocally(decision: RateLimitDecision): boolean {
    return this.localDecisions.has(decision);
  }

  /** Forgets the buckets of `keys`, in the store and in the local limiter. */
  async reset(keys: readonly string[]): Promise<void> {
    await this.bounded(this.store.reset(keys));
    await this.local?.reset(keys);
  }

  /**
   * Forgets every bucket under `prefix`, in the local limiter and in the store. Neither within
   * `timeout` nor behind the breaker: a large keyspace takes longer to walk than a decision may.
   *
   * @throws RateLimitStoreError when the store fails, Error when it has no `resetAll`
   */
  async resetAll(prefix: string): Promise<void> {
    if (this.store.resetAll === undefined) throw new Error(resetAllUnsupported);
    await this.local?.resetAll(prefix);
    await this.store.resetAll(prefix).catch((error: unknown) => {
      throw storeError(error);
    });
  }

  /**
   * Gives back what `decisions` took, in the store that took it, within the timeout. Never
   * rejects: a refund that failed or took too long is given up (one that failed leaves its charges
   * on the decisions, for `release` to give back).
   */
  async refund(decisions: readonly RateLimitDecision[]): Promise<void> {
    if (this.fromShares(decisions)) return this.shared!.refund(decisions);
    const store = this.storeOf(decisions);
    if (store.refund === undefined) return;
    if (store.inProcess) return store.refund(decisions);
    await this.bounded(store.refund(decisions)).catch(() => undefined);
  }

  /**
   * Gives back what `decisions` took, in the store that took it, for a caller that retries until
   * it is given back (the engine): resolves once it is, or when there was nothing to give (given
   * back already, or by a refund still on its way); rejects when the store's refund failed, which
   * leaves the charges it could not give back on their decisions, so that releasing them again
   * tries again. Not bounded by `timeout`: a refund given up there is still on its way with the
   * charges, so a retry would find nothing to give while that refund could yet fail; a retry must
   * follow only a refund that has settled as failed.
   *
   * @throws RateLimitStoreError when the store's refund failed
   */
  async release(decisions: readonly RateLimitDecision[]): Promise<void> {
    if (this.fromShares(decisions)) return this.shared!.refund(decisions);
    const store = this.storeOf(decisions);
    if (store.refund === undefined) return;
    try {
      await store.refund(decisions);
    } catch (error) {
      throw storeError(error);
    }
  }

  /**
   * Charges admitted decisions their real costs (see `RateLimitStore.settle`), in the store that
   * made them, and answers how their buckets stand after. A store without `settle` gives back the
   * settles of nothing (as refunds) and leaves the others' reservations standing. Not bounded by
   * `timeout`, for the reason `release` is not.
   *
   * @throws RateLimitStoreError when the store's settle failed (what it could not charge stays on the decisions)
   */
  async settle(settles: readonly RateLimitSettle[]): Promise<(RateLimitDecision | undefined)[]> {
    const decisions = settles.map(({ decision }) => decision);
    if (this.fromShares(decisions)) return this.shared!.settle(settles);
    const store = this.storeOf(decisions);
    try {
      if (store.settle !== undefined) return await store.settle(settles);
      const nothing = settles.filter(({ actual }) => actual === 0).map(({ decision }) => decision);
      if (nothing.length > 0) await store.refund?.(nothing);
      return settles.map(() => undefined);
    } catch (error) {
      throw storeError(error);
    }
  }

  /**
   * Under `failMode: 'local'`, what a settle the store failed was to take more (`extra`, per
   * request, tokens) goes to the local limiter too, which decides meanwhile: taken as a charge of
   * nothing, then settled to it. Its bucket already in debt takes no more.
   */
  settleLocally(requests: readonly RateLimitRequest[], extra: readonly number[]): void {
    if (this.options.failMode !== 'local') return;
    const local = this.localStore();
    requests.forEach((request, i) => {
      if (!(extra[i] > 0)) return;
      const [decision] = local.decideSync([{ ...request, cost: 0 }], true);
      if (decision.allowed) void local.settle([{ decision, actual: extra[i] }]);
    });
  }

  /** Stops the deadline timer and the local limiter; the store is closed by whoever opened it. */
  async close(): Promise<void> {
    this.deadlines.close();
    await this.local?.close();
  }

  private async decideRemote(requests: readonly RateLimitRequest[], charge: boolean): Promise<RateLimitDecision[]> {
    // what the store knows without asking its server: taken even while the breaker is open,
    // and no sign either way of the server's health (only real answers feed the breaker)
    const started = this.watcher.timed ? performance.now() : 0;
    const known = charge ? this.store.cached?.(requests) : undefined;
    if (known !== undefined) {
      this.ended('cached', started);
      return known;
    }
    try {
      // the same array `cached` was just asked for: a refusal gate does not look it up again
      return await this.remote(requests, charge, started);
    } catch (error) {
      return this.fallback(requests, charge, error as RateLimitStoreError);
    }
  }

  /**
   * The store's answer within the timeout and behind the circuit breaker, told to the watcher.
   *
   * @throws RateLimitStoreError when the store fails, is too slow, or its breaker is open
   */
  private async remote(
    requests: readonly RateLimitRequest[],
    charge: boolean,
    started: number,
  ): Promise<RateLimitDecision[]> {
    const nodes = this.nodesOf?.(requests) ?? ONE_NODE;
    if (!this.breakers.allow(nodes)) {
      this.ended('breaker_open', started);
      throw new RateLimitStoreError(circuitOpen, { reason: 'breaker_open' });
    }
    let decisions: RateLimitDecision[];
    try {
      const call = charge
        ? this.store.consume(requests, this.callOptions)
        : this.store.peek(requests, this.callOptions);
      decisions = await (this.store.timesCalls === true ? call : this.bounded(call));
    } catch (error) {
      const failure = storeError(error);
      // a call Redis dropped as run too late timed out as much as one never answered
      this.ended(failure.reason === 'timeout' || failure.reason === 'stale' ? 'timeout' : 'error', started);
      this.watcher.failed(failure, this.options.failMode);
      this.breakers.failed(nodes, failure);
      throw failure;
    }
    this.ended('ok', started);
    this.breakers.succeeded(nodes);
    return decisions;
  }

  /** Whether `decisions` were made from shares of their buckets (a request's are, all of them, or none). */
  private fromShares(decisions: readonly RateLimitDecision[]): boolean {
    return this.shared !== undefined && decisions.length > 0 && this.shared.owns(decisions[0]);
  }

  /** What `failMode` makes of a failed store call: the local limiter's decisions, or the error. */
  private fallback(
    requests: readonly RateLimitRequest[],
    charge: boolean,
    failure: RateLimitStoreError,
  ): RateLimitDecision[] {
    if (this.options.failMode !== 'local') throw failure;
    const decisions = this.localStore().decideSync(requests, charge);
    for (const decision of decisions) this.localDecisions.add(decision);
    return decisions;
  }

  /** The local limiter (failMode 'local'), made on first use: on the store's clock, if it was given one, so its waits are timed on it. */
  private localStore(): MemoryStore {
    return (this.local ??= new MemoryStore({ clock: storeClock(this.store.clock) }));
  }

  /** The store that made `decisions`: the local limiter for those it made (failMode 'local'), else the module's. */
  private storeOf(decisions: readonly RateLimitDecision[]): RateLimitStore {
    return this.local !== undefined && decisions.some((decision) => this.localDecisions.has(decision))
      ? this.local
      : this.store;
  }

  /** Tells the watcher, if it times calls, how the call that started at `started` ended. */
  private ended(outcome: StoreCallOutcome, started: number): void {
    if (this.watcher.timed) this.watcher.called(outcome, (performance.now() - started) / 1000);
  }

  private bounded<T>(promise: Promise<T>): Promise<T> {
    return this.deadlines.race(promise, () => storeTimeout(this.options.timeout));
  }
}

/** A store's failure as a `RateLimitStoreError`: as it is, or wrapping what the store threw. */
function storeError(error: unknown): RateLimitStoreError {
  return error instanceof RateLimitStoreError ? error : new RateLimitStoreError(storeFailed(error), { cause: error });
}
