import type {
  RateLimitCallOptions,
  RateLimitDecision,
  RateLimitRequest,
  RateLimitSettle,
  RateLimitStore,
} from '../../lib/stores/rate-limit-store.interface.js';
import type { StoreClock } from '../../lib/stores/store-clock.js';

/**
 * What an `ObservedStore` tells of the calls that change buckets, each as it reaches the real
 * store: each hook is handed the call itself (`send`), and makes it once, at once; the store's
 * answer goes back to the caller as it is.
 */
export interface StoreObserver {
  consume(instance: number, requests: readonly RateLimitRequest[], send: () => Promise<RateLimitDecision[]>): void;
  settle(
    instance: number,
    settles: readonly RateLimitSettle[],
    send: () => Promise<(RateLimitDecision | undefined)[]>,
  ): void;
  refund(instance: number, decisions: readonly RateLimitDecision[], send: () => Promise<void>): void;
}

/**
 * One instance's view of a store several instances share: every call goes to the real store as it
 * is, and its answer comes back as the store gave it (the same objects); `consume`, `settle` and
 * `refund` are told to the observer first, in the order the store runs them. For a store in this
 * process that is the order of the calls; a remote one gets them one at a time (`Serial`), so that
 * a settle never overtakes a consume waiting for its batch. Observation, not a stand-in: it has no
 * `decideNow` (the module then calls `consume`), no `cached` (the store's remembered refusals are
 * off in the specs that use it), and the store's clock.
 */
export class ObservedStore implements RateLimitStore {
  readonly inProcess: boolean | undefined;
  readonly kind: 'memory' | 'redis' | undefined;
  readonly timesCalls: boolean | undefined;
  readonly clock: StoreClock | undefined;

  constructor(
    private readonly store: RateLimitStore,
    private readonly observer: StoreObserver,
    private readonly serial: Serial,
    /** Which instance this view is, as the observer is told. */
    readonly instance: number,
  ) {
    this.inProcess = store.inProcess;
    this.kind = store.kind;
    this.timesCalls = store.timesCalls;
    this.clock = store.clock;
  }

  consume(requests: readonly RateLimitRequest[], options?: RateLimitCallOptions): Promise<RateLimitDecision[]> {
    return this.serial.run(() => {
      let answer!: Promise<RateLimitDecision[]>;
      this.observer.consume(this.instance, requests, () => (answer = this.store.consume(requests, options)));
      return answer;
    });
  }

  peek(requests: readonly RateLimitRequest[], options?: RateLimitCallOptions): Promise<RateLimitDecision[]> {
    return this.store.peek(requests, options);
  }

  reset(keys: readonly string[]): Promise<void> {
    return this.store.reset(keys);
  }

  settle(settles: readonly RateLimitSettle[]): Promise<(RateLimitDecision | undefined)[]> {
    return this.serial.run(() => {
      let answer!: Promise<(RateLimitDecision | undefined)[]>;
      this.observer.settle(this.instance, settles, () => (answer = this.store.settle!(settles)));
      return answer;
    });
  }

  refund(decisions: readonly RateLimitDecision[]): Promise<void> {
    return this.serial.run(() => {
      let answer!: Promise<void>;
      this.observer.refund(this.instance, decisions, () => (answer = this.store.refund!(decisions)));
      return answer;
    });
  }
}

/**
 * The calls of every view of one store, and whether each waits for the one before it (`oneByOne`,
 * for a remote store): `idle` resolves once none is on its way.
 */
export class Serial {
  private last: Promise<unknown> = Promise.resolve();
  private readonly pending = new Set<Promise<unknown>>();

  constructor(private readonly oneByOne: boolean) {}

  run<T>(call: () => Promise<T>): Promise<T> {
    const running = this.oneByOne ? this.last.then(call) : call();
    if (this.oneByOne) this.last = running.catch(() => undefined);
    this.pending.add(running);
    const done = () => void this.pending.delete(running);
    running.then(done, done);
    return running;
  }

  /** Resolves once no call is on its way, and none followed within a turn of the event loop. */
  async idle(): Promise<void> {
    for (;;) {
      await Promise.allSettled([...this.pending]);
      await new Promise((resolve) => setImmediate(resolve));
      if (this.pending.size === 0) return;
    }
  }
}
