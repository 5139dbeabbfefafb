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
 */
export class DeadlineQueue {
  private readonly pending: Pending[] = [];
  private head = 0;
  private timer: NodeJS.Timeout | undefined;

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
    this.timer = undefined;
    this.pending.length = 0;
    this.head = 0;
  }

  private arm(): void {
    if (this.timer !== undefined || this.head >= this.pending.length) return;
    const wait = Math.max(0, this.pending[this.head].deadline - performance.now());
    this.timer = setTimeout(this.expire, Math.ceil(wait));
    this.timer.unref();
  }

  private readonly expire = (): void => {
    this.timer = undefined;
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
