interface Pending {
  /** `performance.now()` after which the call has timed out. */
  deadline: number;
  settled: boolean;
  expire: () => void;
}

/** Entries already passed before the array is compacted. */
const COMPACT_AFTER = 1024;

/**
 * Bounds how long promises may take, with one timer for all of them instead of one per call.
 * Every call gets the same timeout, so deadlines arrive in the order calls were made: a FIFO
 * queue, with the single timer armed for the oldest pending deadline. The timer is `unref()`'d
 * and `close()` clears it.
 *
 * A deadline is checked one step after its timer fires (`setImmediate`): when the process itself
 * was busy past a deadline (a long collection pause, a CPU-bound request), the answers that arrived
 * meanwhile are read first (Node runs timers before it reads sockets), so the pause of the app is
 * not taken for a slow store.
 */
export class DeadlineQueue {
  private readonly pending: Pending[] = [];
  private head = 0;
  private timer: NodeJS.Timeout | undefined;
  /** Set from the timer's firing until the deadlines are checked (see above). */
  private check: NodeJS.Immediate | undefined;

  /** @param timeoutMs how long each promise may take, milliseconds */
  constructor(private readonly timeoutMs: number) {}

  /**
   * Settles like `promise` when it settles within the timeout; otherwise rejects with
   * `onTimeout()` (and ignores what `promise` does later).
   */
  race<T>(promise: Promise<T>, onTimeout: () => Error): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const entry: Pending = {
        deadline: performance.now() + this.timeoutMs,
        settled: false,
        expire: () => reject(onTimeout()),
      };
      this.pending.push(entry);
      this.arm();
      promise.then(
        (value) => {
          entry.settled = true;
          resolve(value);
        },
        (error: unknown) => {
          entry.settled = true;
          reject(error);
        },
      );
    });
  }

  /** Clears the timer; promises still pending are left to settle on their own. */
  close(): void {
    clearTimeout(this.timer);
    clearImmediate(this.check);
    this.check = undefined;
    this.timer = undefined;
    this.pending.length = 0;
    this.head = 0;
  }

  private arm(): void {
    if (this.timer !== undefined || this.check !== undefined || this.head >= this.pending.length) return;
    const wait = Math.max(0, this.pending[this.head].deadline - performance.now());
    this.timer = setTimeout(this.afterReads, Math.ceil(wait));
    this.timer.unref();
  }

  // Not unref()'d: while only unref()'d immediates are pending, Node does not keep its poll phase
  // from blocking, so with no socket to read (Redis stopped) the check would wait for the next
  // event of any kind (a reconnect timer 200 ms on) instead of running right after the reads.
  private readonly afterReads = (): void => {
    this.timer = undefined;
    this.check = setImmediate(this.expire);
  };

  private readonly expire = (): void => {
    this.check = undefined;
    const now = performance.now();
    while (this.head < this.pending.length) {
      const entry = this.pending[this.head];
      if (!entry.settled) {
        if (entry.deadline > now) break;
        entry.settled = true;
        entry.expire();
      }
      this.head++;
    }
    if (this.head >= COMPACT_AFTER && this.head * 2 >= this.pending.length) {
      this.pending.splice(0, this.head);
      this.head = 0;
    }
    this.arm();
  };
}

/**
 * One `DeadlineQueue` per timeout, made when a call first needs it: for calls whose timeouts may
 * differ (a store's callers pass theirs), still one timer per timeout rather than one per call.
 */
export class Deadlines {
  private readonly queues = new Map<number, DeadlineQueue>();

  /** `DeadlineQueue.race` with a timeout of `timeoutMs`, counted from now. */
  race<T>(promise: Promise<T>, timeoutMs: number, onTimeout: () => Error): Promise<T> {
    let queue = this.queues.get(timeoutMs);
    if (queue === undefined) this.queues.set(timeoutMs, (queue = new DeadlineQueue(timeoutMs)));
    return queue.race(promise, onTimeout);
  }

  /** Clears every timer (see `DeadlineQueue.close`). */
  close(): void {
    for (const queue of this.queues.values()) queue.close();
    this.queues.clear();
  }
}
