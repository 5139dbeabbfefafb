/** Longest delay a Node timer takes (2^31 - 1 ms, about 24.8 days); a longer one fires after 1 ms. */
const MAX_TIMER_MS = 2_147_483_647;

interface Sleeper {
  /** `performance.now()` at which to wake. */
  at: number;
  wake: () => void;
}

/**
 * Lets callers wait, with one timer for all of them instead of one per call: a binary min-heap
 * of wake-up times, the single timer armed for the earliest. The timer is `unref()`'d, and
 * `close()` wakes every sleeper at once so nothing hangs past shutdown.
 */
export class WakeQueue {
  private readonly heap: Sleeper[] = [];
  private timer: NodeJS.Timeout | undefined;
  /** When the armed timer fires, `performance.now()`. */
  private armedFor = Infinity;

  /** Resolves after `ms` milliseconds (at once when `ms` <= 0). */
  wait(ms: number): Promise<void> {
    if (ms <= 0) return Promise.resolve();
    return new Promise<void>((wake) => {
      this.push({ at: performance.now() + ms, wake });
      this.arm();
    });
  }

  /** Wakes every sleeper now and clears the timer. */
  close(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.armedFor = Infinity;
    for (const sleeper of this.heap.splice(0)) sleeper.wake();
  }

  private arm(): void {
    const next = this.heap[0];
    if (next === undefined || next.at >= this.armedFor) return;
    clearTimeout(this.timer);
    this.armedFor = next.at;
    // a longer wait is armed in steps: the timer fires early, wakes no one and arms again
    this.timer = setTimeout(this.fire, Math.min(MAX_TIMER_MS, Math.max(0, Math.ceil(next.at - performance.now()))));
    this.timer.unref();
  }

  private readonly fire = (): void => {
    this.timer = undefined;
    this.armedFor = Infinity;
    const now = performance.now();
    while (this.heap.length > 0 && this.heap[0].at <= now) this.pop().wake();
    this.arm();
  };

  private push(sleeper: Sleeper): void {
    const heap = this.heap;
    let i = heap.push(sleeper) - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (heap[parent].at <= sleeper.at) break;
      heap[i] = heap[parent];
      i = parent;
    }
    heap[i] = sleeper;
  }

  private pop(): Sleeper {
    const heap = this.heap;
    const top = heap[0];
    const last = heap.pop()!;
    if (heap.length > 0) {
      let i = 0;
      for (;;) {
        let child = 2 * i + 1;
        if (child >= heap.length) break;
        if (child + 1 < heap.length && heap[child + 1].at < heap[child].at) child++;
        if (heap[child].at >= last.at) break;
        heap[i] = heap[child];
        i = child;
      }
      heap[i] = last;
    }
    return top;
  }
}
