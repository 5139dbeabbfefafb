import { randomUUID } from 'node:crypto';
import { Injectable } from '@nestjs/common';
import { finalize, type Observable, ReplaySubject } from 'rxjs';
import type { RateLimitMeter } from '../../lib/index.js';
import type { RateLimitDecision, RateLimitSettle, RateLimitStore } from '../../lib/store/index.js';

/**
 * The harness of the token budget specs (`test/e2e/token-budgets*.e2e-spec.ts`): a watch on a
 * store's settles, so a test waits for the charge a request's end makes rather than for time;
 * streams whose events the test sends one by one (`Feeds`); and a reader of Server-Sent Events.
 */

/** A fresh API key (or tenant): a test's buckets are its own. */
export const newKey = (): string => `key-${randomUUID()}`;

/**
 * Counts the settles a store has answered (each request's end, each interval settle, each
 * `RateLimitReservation.settle`), failed or not: `landed(n)` resolves once `n` have.
 */
export class SettleWatch {
  private count = 0;
  private readonly waiting = new Set<{ count: number; resolve: () => void }>();

  /** Wraps `store.settle` (the store must have one). */
  constructor(store: RateLimitStore) {
    const settle = store.settle?.bind(store);
    if (settle === undefined) throw new Error('the store has no settle');
    store.settle = async (settles: readonly RateLimitSettle[]): Promise<(RateLimitDecision | undefined)[]> => {
      try {
        return await settle(settles);
      } finally {
        this.count += settles.length;
        // what the engine does with the answer (a meter's `charged`) runs first, in its microtasks
        setImmediate(() => this.wake());
      }
    };
  }

  private wake(): void {
    for (const waiter of this.waiting) {
      if (waiter.count > this.count) continue;
      this.waiting.delete(waiter);
      waiter.resolve();
    }
  }

  /** Settles answered so far. */
  get landed(): number {
    return this.count;
  }

  /** Resolves once `count` settles in all have been answered, and the engine has heard their answers. */
  until(count: number): Promise<void> {
    return new Promise((resolve) => {
      this.waiting.add({ count, resolve });
      if (this.count >= count) setImmediate(() => this.wake());
    });
  }

  /** Runs `act`, then waits for `count` more settles than had landed before it. */
  async after<T>(count: number, act: () => Promise<T>): Promise<T> {
    const target = this.count + count;
    const result = await act();
    await this.until(target);
    return result;
  }
}

/** A stream a handler opened for a request: the test sends its events and ends it. */
export interface Feed {
  /** The request's meter, as the handler was given it. */
  readonly meter: RateLimitMeter;
  /** Sends one event; the handler counts `tokens` on its meter first. */
  push(tokens: number): void;
  /** Completes the stream. */
  end(): void;
  /** Resolves when the stream is torn down (completed, or its client gone). */
  readonly closed: Promise<void>;
  /** What the handler returns: the events, `{ data: { tokens, total } }`. */
  readonly stream: Observable<MessageEvent>;
}

/**
 * The streams handlers open, by the id each request carries: `open` is called by the handler, and
 * `opened(id)` resolves in the test once it has been.
 */
@Injectable()
export class Feeds {
  private readonly feeds = new Map<string, { promise: Promise<Feed>; resolve: (feed: Feed) => void }>();
  private readonly running = new Set<Feed>();

  /** Run by a handler: a stream of `{ data: { tokens, total } }` events that the test drives. */
  open(id: string, meter: RateLimitMeter): Feed {
    // events sent before the framework subscribes are kept for it
    const events = new ReplaySubject<MessageEvent>();
    let total = 0;
    let closed!: () => void;
    const feed: Feed = {
      meter,
      push(tokens) {
        meter.add(tokens);
        total += tokens;
        events.next({ data: { tokens, total } } as MessageEvent);
      },
      end: () => events.complete(),
      closed: new Promise<void>((resolve) => (closed = resolve)),
      stream: events.pipe(finalize(() => closed())),
    };
    this.running.add(feed);
    void feed.closed.then(() => this.running.delete(feed));
    this.slot(id).resolve(feed);
    return feed;
  }

  /** Ends every stream still running (a test that failed half-way left it open): the app can close. */
  endAll(): void {
    for (const feed of this.running) feed.end();
  }

  /** The feed of request `id`, once its handler has opened it. */
  opened(id: string): Promise<Feed> {
    return this.slot(id).promise;
  }

  private slot(id: string) {
    let slot = this.feeds.get(id);
    if (slot === undefined) {
      let resolve!: (feed: Feed) => void;
      const promise = new Promise<Feed>((settle) => (resolve = settle));
      this.feeds.set(id, (slot = { promise, resolve }));
    }
    return slot;
  }
}

/** Reads Server-Sent Events from a response body, one `data:` payload at a time. */
export class SseReader {
  private readonly reader: ReadableStreamDefaultReader<Uint8Array>;
  private readonly decoder = new TextDecoder();
  private buffer = '';

  constructor(response: Response) {
    if (response.body === null) throw new Error(`no body (status ${response.status})`);
    this.reader = response.body.getReader();
  }

  /** The next `count` events' data, parsed. */
  async next(count = 1): Promise<unknown[]> {
    const events: unknown[] = [];
    while (events.length < count) {
      const end = this.buffer.indexOf('\n\n');
      if (end >= 0) {
        const block = this.buffer.slice(0, end);
        this.buffer = this.buffer.slice(end + 2);
        const data = block
          .split('\n')
          .filter((line) => line.startsWith('data:'))
          .map((line) => line.slice(5).trim())
          .join('\n');
        if (data !== '') events.push(JSON.parse(data));
        continue;
      }
      const { done, value } = await this.reader.read();
      if (done) throw new Error(`the stream ended after ${events.length} of ${count} events`);
      this.buffer += this.decoder.decode(value, { stream: true });
    }
    return events;
  }

  /** Reads to the end: the data of the events left. */
  async rest(): Promise<unknown[]> {
    const events: unknown[] = [];
    for (;;) {
      const { done, value } = await this.reader.read();
      if (done) break;
      this.buffer += this.decoder.decode(value, { stream: true });
    }
    for (const block of this.buffer.split('\n\n')) {
      const data = block
        .split('\n')
        .filter((line) => line.startsWith('data:'))
        .map((line) => line.slice(5).trim())
        .join('\n');
      if (data !== '') events.push(JSON.parse(data));
    }
    this.buffer = '';
    return events;
  }
}

/** Whole seconds of a per-dimension reset header (`'45s'`, `'6m0s'`, `'1h0m5s'`). */
export function resetSeconds(text: string | undefined): number {
  const match = /^(?:(\d+)h)?(?:(\d+)m)?(\d+)s$/.exec(text ?? '');
  if (match === null) throw new Error(`not a reset duration: ${text}`);
  const [, h = '0', m = '0', s] = match;
  return Number(h) * 3600 + Number(m) * 60 + Number(s);
}
