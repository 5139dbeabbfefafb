import { afterEach, describe, expect, it } from '@jest/globals';
import type { RateLimitPolicy } from '../../../lib/policy/policy.types.js';
import { resolveOptions } from '../../../lib/rate-limit-options.js';
import type { RateLimitModuleOptions } from '../../../lib/rate-limit-options.interface.js';
import { MemoryStore } from '../../../lib/stores/memory/memory.store.js';
import type { RateLimitDecision, RateLimitRequest } from '../../../lib/stores/rate-limit-store.interface.js';
import { ManualClock } from '../../../lib/testing/manual-clock.js';
import { StandaloneLimiter } from '../../support/standalone-limiter.js';

/**
 * Hot-key shares (module option `shares`) on the memory store, as instances of one store would
 * take them: when a share is taken and how big, what is decided in the process, what goes back,
 * and that no admission is ever outside what the store charged. Time is a ManualClock.
 */

/** A memory store that counts what reaches it (it still decides everything it is asked). */
class CountingStore extends MemoryStore {
  readonly consumed: RateLimitRequest[][] = [];

  override consume(requests: readonly RateLimitRequest[]): Promise<RateLimitDecision[]> {
    this.consumed.push([...requests]);
    return super.consume(requests);
  }

  /** Store calls that took a share: a cost of more than one request's. */
  takes(cost = 1): RateLimitRequest[] {
    return this.consumed.flat().filter((request) => request.cost > cost);
  }
}

const T0 = Date.UTC(2026, 11, 7, 10, 0, 0);
const BUCKET: RateLimitPolicy = { name: 'hot', rps: 100, burst: 100 };
const WINDOW: RateLimitPolicy = { name: 'window', algorithm: 'fixed_window', limit: 50, window: '1s' };

let running: StandaloneLimiter[] = [];

afterEach(async () => {
  for (const limiter of running) {
    await limiter.beforeApplicationShutdown();
    await limiter.onApplicationShutdown();
  }
  running = [];
});

function limiterOn(store: MemoryStore, shares: RateLimitModuleOptions['shares']): StandaloneLimiter {
  const limiter = new StandaloneLimiter(resolveOptions({ shares }), store);
  running.push(limiter);
  return limiter;
}

/** `n` requests of `cost` one after the other; how many were admitted. */
async function admitted(limiter: StandaloneLimiter, n: number, policy = BUCKET, cost = 1, id = 'k'): Promise<number> {
  let count = 0;
  for (let i = 0; i < n; i++) if ((await limiter.consume(id, policy, cost))[0].allowed) count++;
  return count;
}

describe('shares', () => {
  it('are off unless asked: every request goes to the store', async () => {
    const store = new CountingStore({ clock: new ManualClock(T0) });
    expect(await admitted(limiterOn(store, false), 60)).toBe(60);
    expect(store.consumed).toHaveLength(60);
  });

  it('take a share once a key passes `after` a second, and decide from it with no store call', async () => {
    const clock = new ManualClock(T0);
    const store = new CountingStore({ clock });
    const limiter = limiterOn(store, { after: 5, hold: '1s' });
    expect(await admitted(limiter, 40)).toBe(40);
    // 4 requests before the key is hot, then shares: far fewer calls than requests
    const takes = store.takes();
    expect(takes.length).toBeGreaterThan(0);
    expect(store.consumed.length).toBeLessThan(20);
    // every admission came out of what the store charged: the bucket holds 100 - what was taken
    const [peeked] = await limiter.peek('k', BUCKET);
    const charged = store.consumed.flat().reduce((sum, request) => sum + request.cost, 0);
    expect(peeked.remaining).toBe(100 - charged);
    expect(charged).toBeGreaterThanOrEqual(40);
  });

  it("tell the store's figure when the share was taken, less what the share used since", async () => {
    const clock = new ManualClock(T0);
    const store = new CountingStore({ clock });
    const limiter = limiterOn(store, { after: 2, hold: '1s' });
    const remaining: number[] = [];
    for (let i = 0; i < 10; i++) remaining.push((await limiter.consume('k', BUCKET))[0].remaining);
    expect(remaining).toEqual([99, 98, 97, 96, 95, 94, 93, 92, 91, 90]);
  });

  it('never admit more than the limit across instances of one store', async () => {
    const clock = new ManualClock(T0);
    const store = new CountingStore({ clock });
    const instances = [0, 1, 2].map(() => limiterOn(store, { after: 3, hold: '1s' }));
    let total = 0;
    // 3 instances, 3 rounds of 100 each, 200 ms apart: 100 + 3 * 20 tokens can ever be taken... at most
    for (let round = 0; round < 3; round++) {
      for (const limiter of instances) total += await admitted(limiter, 100);
      clock.advance(200);
    }
    expect(total).toBeLessThanOrEqual(100 + 100 * 0.4);
    // and nothing went missing: every token the store gave out, some instance admitted or still holds
    expect(total).toBeGreaterThanOrEqual(100);
  });

  it("end a window's share with its window: the next window takes its own", async () => {
    const clock = new ManualClock(T0);
    const store = new CountingStore({ clock });
    const limiter = limiterOn(store, { after: 2, hold: '10s' });
    expect(await admitted(limiter, 80, WINDOW)).toBe(50);
    clock.advance(1000);
    expect(await admitted(limiter, 80, WINDOW)).toBe(50);
  });

  it('give back what is left when the hold ends, and at shutdown', async () => {
    const slow: RateLimitPolicy = { name: 'slow', rps: 1, burst: 100 };
    const clock = new ManualClock(T0);
    const store = new CountingStore({ clock });
    const limiter = limiterOn(store, { after: 2, hold: '1s' });
    expect(await admitted(limiter, 30, slow)).toBe(30);
    const held = store.takes().reduce((sum, request) => sum + request.cost, 0);
    clock.advance(1100);
    // the share's hold has ended: this request retires it (what is left goes back) and takes another
    expect(await admitted(limiter, 1, slow)).toBe(1);
    expect(store.takes().reduce((sum, request) => sum + request.cost, 0)).toBeGreaterThan(held);
    await limiter.beforeApplicationShutdown();
    await limiter.onApplicationShutdown();
    running = [];
    // 31 admitted, 1.1 tokens regained: the store holds 70.1, whatever the shares took
    const [peeked] = await new StandaloneLimiter(resolveOptions({}), store).peek('k', slow);
    expect(peeked.remaining).toBe(70);
  });

  it('take refunds into the share while it is held', async () => {
    const clock = new ManualClock(T0);
    const store = new CountingStore({ clock });
    const limiter = limiterOn(store, { after: 2, hold: '1s' });
    await admitted(limiter, 20);
    // a request decided from the share: no store call for it
    let calls: number;
    let decisions: RateLimitDecision[];
    do {
      calls = store.consumed.length;
      decisions = await limiter.consume('k', BUCKET);
    } while (store.consumed.length !== calls);
    await limiter.refund(decisions);
    const again = await limiter.consume('k', BUCKET);
    expect(store.consumed.length).toBe(calls);
    expect(again[0].remaining).toBe(decisions[0].remaining);
  });

  it('leave a policy with shares: false, a sliding log and a request with a cold policy to the store', async () => {
    const clock = new ManualClock(T0);
    const store = new CountingStore({ clock });
    const limiter = limiterOn(store, { after: 2, hold: '1s' });
    await admitted(limiter, 20, { ...BUCKET, shares: false });
    await admitted(limiter, 20, { name: 'log', algorithm: 'sliding_window_log', limit: 100, window: '1s' });
    expect(store.consumed).toHaveLength(40);
    // hot and cold together: the cold one is asked about once per identity, so it is never hot
    for (let i = 0; i < 10; i++) await limiter.consume(`k`, [BUCKET, { ...WINDOW, name: `cold-${i}` }]);
    expect(store.consumed.length).toBeGreaterThanOrEqual(50);
  });

  it('refuse in the process while the bucket cannot hold a share, and take one once it can', async () => {
    const clock = new ManualClock(T0);
    const store = new CountingStore({ clock });
    const limiter = limiterOn(store, { after: 2, hold: '1s' });
    /** Admits `n` at once: every token is admitted but what the store keeps, less than the share last asked for. */
    const drain = async (n: number): Promise<void> => {
      const first = await admitted(limiter, n);
      const [left] = await limiter.peek('k', BUCKET);
      expect(first + left.remaining).toBe(100);
      expect(left.remaining).toBeLessThan(store.consumed.at(-1)![0].cost);
    };
    await drain(150);
    const calls = store.consumed.length;
    expect(await admitted(limiter, 20)).toBe(0);
    // refused from what the refused take said: no call for each
    expect(store.consumed.length).toBe(calls);
    // once the bucket can hold a share again, it is taken, with the tokens kept back
    clock.advance(1000);
    await drain(150);
  });
});
