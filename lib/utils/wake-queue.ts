/** Longest delay a Node timer takes (2^31 - 1 ms, about 24.8 days); a longer one fires after 1 ms. */
export const MAX_TIMER_MS = 2_147_483_647;

/** The time a `WakeQueue` counts on, ms (a store's `StoreClock` is one). */
export interface WakeClock {
  now(): number;
  /**
   * Only on a clock that moves when it is moved, and not otherwise (`ManualClock`): calls
   * `listener` after each move, until the function it returns is called.
   */
  onChange?(listener: () => void): () => void;
}

/**
 * Least time between two looks at a clock that stood still while the timer ran, ms: one that
 * does not say when it moves (a test's pinned function) would otherwise be looked at again and
 * again, as often as its sleeper's last millisecond comes round.
 */
const STILL_CLOCK_MS = 1_000;

/** Real time, as a timer counts it: `performance.now()`, which nothing sets back. */
const REAL_TIME: WakeClock = { now: () => performance.now() };

interface Sleeper {
  /** The clock's time at which to wake. */
  at: number;
  /** Where it is in the heap, so a cancelled sleeper is taken out without a search. */
  index: number;
  /** Ends the wait: `true` when its time came, `false` when it was cancelled or the queue closed. */
  end: (turn: boolean) => void;
}

/**
 * Lets callers wait, with one timer for all of them instead of one per call: a binary min-heap
 * of wake-up times, the single timer armed for the earliest. The timer is `unref()`'d.
 *
 * The times are the clock's: real time by default. On another clock (a store's given clock) the
 * timer is armed for the wait as real time counts it, and when it fires the clock says who wakes.
 * A clock moved by hand (`onChange`: `ManualClock`) needs no timer at all: the queue listens to
 * it while anyone sleeps, and each move wakes the sleepers whose time has come.
 *
 * A wait can be cancelled with an `AbortSignal`: the sleeper leaves the heap at once (O(log n),
 * so a queue of clients that go away holds nothing for them), and the signal's listener is
 * removed when a sleeper wakes, so a long-lived signal collects none. `close()` ends every wait
 * at once, and every later one, so nothing waits past shutdown.
 */
export class WakeQueue {
  private readonly heap: Sleeper[] = [];
  private timer: NodeJS.Timeout | undefined;
  /** When the armed timer fires, the clock's time. */
  private armedFor = Infinity;
  /** The clock's time when the timer was armed. */
  private armedAt = NaN;
  /** Stops listening to a clock moved by hand: set while anyone sleeps on one. */
  private unwatch: (() => void) | undefined;
  private closed = false;

  /** @param clock what the waits are counted on; default real time */
  constructor(private readonly clock: WakeClock = REAL_TIME) {}

  /** Sleepers waiting. */
  get size(): number {
    return this.heap.length;
  }

  /**
   * Resolves with `true` after `ms` milliseconds (at once when `ms` <= 0), or with `false` as
   * soon as `signal` aborts or the queue is closed, whichever comes first. Never rejects.
   */
  wait(ms: number, signal?: AbortSignal): Promise<boolean> {
    if (ms <= 0) return Promise.resolve(true);
    if (this.closed || signal?.aborted) return Promise.resolve(false);
    return new Promise<boolean>((resolve) => {
      const sleeper: Sleeper = { at: this.clock.now() + ms, index: -1, end: resolve };
      if (signal !== undefined) {
        const cancel = (): void => {
          this.remove(sleeper);
          resolve(false);
        };
        signal.addEventListener('abort', cancel, { once: true });
        sleeper.end = (turn) => {
          signal.removeEventListener('abort', cancel);
          resolve(turn);
        };
      }
      this.push(sleeper);
      this.arm();
    });
  }

  /** Ends every wait now (`false`), clears the timer, and ends every later wait at once. */
  close(): void {
    this.closed = true;
    this.disarm();
    for (const sleeper of this.heap.splice(0)) sleeper.end(false);
  }

  /** Listens to a clock moved by hand, or arms the timer for the earliest sleeper (`still`: the clock stood still while the last one ran). */
  private arm(still = false): void {
    const next = this.heap[0];
    if (next === undefined) return;
    if (typeof this.clock.onChange === 'function') {
      this.unwatch ??= this.clock.onChange(this.fire);
      return;
    }
    if (next.at >= this.armedFor) return;
    clearTimeout(this.timer);
    this.armedFor = next.at;
    this.armedAt = this.clock.now();
    // a longer wait is armed in steps: the timer fires early, wakes no one and arms again (so
    // does a clock that ran slower than real time)
    const ms = Math.max(Math.ceil(next.at - this.armedAt), still ? STILL_CLOCK_MS : 0);
    this.timer = setTimeout(this.fire, Math.min(MAX_TIMER_MS, ms));
    this.timer.unref();
  }

  private disarm(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.armedFor = Infinity;
    this.unwatch?.();
    this.unwatch = undefined;
  }

  /** Wakes the sleepers whose time has come: the timer fired, or a clock moved by hand moved. */
  private readonly fire = (): void => {
    this.timer = undefined;
    this.armedFor = Infinity;
    const now = this.clock.now();
    while (this.heap.length > 0 && this.heap[0].at <= now) this.removeAt(0).end(true);
    if (this.heap.length === 0) this.disarm();
    else this.arm(now === this.armedAt);
  };

  /** Takes a cancelled sleeper out; the timer stays armed unless none is left (an early firing wakes no one). */
  private remove(sleeper: Sleeper): void {
    if (this.heap[sleeper.index] !== sleeper) return;
    this.removeAt(sleeper.index);
    if (this.heap.length === 0) this.disarm();
  }

  private push(sleeper: Sleeper): void {
    this.heap.push(sleeper);
    this.up(sleeper, this.heap.length - 1);
  }

  /** Takes the sleeper at `i` out of the heap and fills its place with the last one. */
  private removeAt(i: number): Sleeper {
    const heap = this.heap;
    const removed = heap[i];
    const last = heap.pop()!;
    removed.index = -1;
    if (last !== removed) {
      // the last one may belong above or below the hole it fills
      if (i > 0 && heap[(i - 1) >> 1].at > last.at) this.up(last, i);
      else this.down(last, i);
    }
    return removed;
  }

  /** Places `sleeper` at `i` or above, moving larger parents down. */
  private up(sleeper: Sleeper, i: number): void {
    const heap = this.heap;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (heap[parent].at <= sleeper.at) break;
      heap[i] = heap[parent];
      heap[i].index = i;
      i = parent;
    }
    heap[i] = sleeper;
    sleeper.index = i;
  }

  /** Places `sleeper` at `i` or below, moving smaller children up. */
  private down(sleeper: Sleeper, i: number): void {
    const heap = this.heap;
    for (;;) {
      let child = 2 * i + 1;
      if (child >= heap.length) break;
      if (child + 1 < heap.length && heap[child + 1].at < heap[child].at) child++;
      if (heap[child].at >= sleeper.at) break;
      heap[i] = heap[child];
      heap[i].index = i;
      i = child;
    }
    heap[i] = sleeper;
    sleeper.index = i;
  }
}
