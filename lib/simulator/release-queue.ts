/**
 * What an admitted request owes one policy's bucket when it ends (see `LaneRun`): a slot it holds,
 * given back, or the difference between its actual cost and what it reserved, settled.
 */
export interface Release<Owner> {
  /** When the request ends, ms on the traffic's clock. */
  at: number;
  /** The key's record whose bucket the request was charged in. */
  owner: Owner;
  /** The index of the policy in the lane. */
  policy: number;
  /** What the request took (reserved): a refund gives back up to as much. */
  cost: number;
  /** When it was charged (the charged state's `at`), whose window a refund gives back to (and the log drops). */
  chargedAt: number;
  /** What the request costs in all: 0 gives back everything it took (a slot), more than `cost` takes the rest. */
  actual: number;
}

/**
 * The requests in flight, soonest to end first: a binary min-heap on `at` (ties in the order
 * pushed), since a trace's times need not rise, and requests of a trace that goes back in time
 * end before ones pushed earlier. Holds at most the slots in flight (a limit per key) and the
 * settles of requests that have not ended yet.
 */
export class ReleaseQueue<Owner> {
  private readonly heap: Array<Release<Owner> & { order: number }> = [];
  private pushed = 0;

  get size(): number {
    return this.heap.length;
  }

  push(release: Release<Owner>): void {
    const heap = this.heap;
    heap.push({ ...release, order: this.pushed++ });
    let i = heap.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!this.before(i, parent)) break;
      this.swap(i, parent);
      i = parent;
    }
  }

  /** The release that ends soonest, removed, when it ends at `time` or before; else `undefined`. */
  popUntil(time: number): Release<Owner> | undefined {
    const heap = this.heap;
    if (heap.length === 0 || heap[0].at > time) return undefined;
    const top = heap[0];
    const last = heap.pop()!;
    if (heap.length > 0) {
      heap[0] = last;
      let i = 0;
      for (;;) {
        const left = 2 * i + 1;
        const right = left + 1;
        let least = i;
        if (left < heap.length && this.before(left, least)) least = left;
        if (right < heap.length && this.before(right, least)) least = right;
        if (least === i) break;
        this.swap(i, least);
        i = least;
      }
    }
    const { order: _order, ...release } = top;
    return release;
  }

  private before(a: number, b: number): boolean {
    const x = this.heap[a];
    const y = this.heap[b];
    return x.at < y.at || (x.at === y.at && x.order < y.order);
  }

  private swap(a: number, b: number): void {
    const t = this.heap[a];
    this.heap[a] = this.heap[b];
    this.heap[b] = t;
  }
}
