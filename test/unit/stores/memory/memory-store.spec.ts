import { jest } from '@jest/globals';
import fc from 'fast-check';
import { ALGORITHMS, type Rule } from '../../../../lib/algorithms/algorithm.types.js';
import { kthSmallest } from '../../../../lib/stores/memory/kth-smallest.js';
import { MemoryStore } from '../../../../lib/stores/memory/memory.store.js';

/** Refills one token per 1,000 s: a charged bucket stays limited for the whole test. */
const SLOW: Rule = { algorithm: 'token_bucket', rps: 0.001, burst: 2 };
/** Full again 1 s after a charge. */
const FAST: Rule = { algorithm: 'token_bucket', rps: 1, burst: 1 };

describe('MemoryStore bound (clock pinned)', () => {
  let now: number;
  const clock = () => now;
  beforeEach(() => (now = 1_000_000));

  const take = (store: MemoryStore, key: string, rule = SLOW, cost = 1) =>
    store.decideSync([{ key, policy: 'p', rule, cost }], true)[0];
  const remaining = (store: MemoryStore, key: string, rule = SLOW) =>
    store.decideSync([{ key, policy: 'p', rule, cost: 1 }], false)[0].remaining;

  it('holds at most maxKeys buckets, freeing 1 % of them when full', () => {
    const store = new MemoryStore({ clock, maxKeys: 1_000 });
    let largest = 0;
    for (let i = 0; i < 5_000; i++) {
      take(store, `k${i}`);
      largest = Math.max(largest, store.size);
    }
    expect(largest).toBe(1_000);
    // each time it was full, 10 went for the one new key: the size runs 991..1000
    expect(store.size).toBeGreaterThan(990);
  });

  it('frees every expired bucket before any bucket that still limits its client', () => {
    const store = new MemoryStore({ clock, maxKeys: 100 });
    for (let i = 0; i < 50; i++) take(store, `fast${i}`, FAST);
    for (let i = 0; i < 50; i++) take(store, `slow${i}`, SLOW, 2);
    now += 2_000; // the fast ones are full again, the slow ones still empty
    take(store, 'new');
    expect(store.size).toBe(51);
    for (let i = 0; i < 50; i++) expect(remaining(store, `slow${i}`)).toBe(0);
  });

  it('with nothing expired, drops the buckets that will be full soonest', () => {
    const store = new MemoryStore({ clock, maxKeys: 1_000 });
    for (let i = 0; i < 1_000; i++) {
      take(store, `k${i}`);
      now += 1; // k0 refills first, k999 last
    }
    take(store, 'new');
    expect(store.size).toBe(991);
    for (let i = 0; i < 10; i++) expect(remaining(store, `k${i}`)).toBe(2); // dropped: fresh
    for (let i = 10; i < 1_000; i++) expect(remaining(store, `k${i}`)).toBe(1);
  });

  it('never drops a bucket of the request it makes room for', () => {
    const store = new MemoryStore({ clock, maxKeys: 2 });
    take(store, 'a'); // full soonest
    now += 1;
    take(store, 'b');
    now += 1;
    const both = store.decideSync(
      [
        { key: 'a', policy: 'p', rule: SLOW, cost: 1 },
        { key: 'c', policy: 'q', rule: SLOW, cost: 1 },
      ],
      true,
    );
    expect(both.map((d) => d.allowed)).toEqual([true, true]);
    expect(store.size).toBe(2);
    expect(remaining(store, 'a')).toBe(0);
    expect(remaining(store, 'b')).toBe(2); // b went instead
  });

  it('drops a bucket when it is read after expiring, and reuses its row', () => {
    const store = new MemoryStore({ clock });
    take(store, 'a', FAST);
    now += 999;
    expect(remaining(store, 'a', FAST)).toBe(0);
    now += 1;
    expect(remaining(store, 'a', FAST)).toBe(1);
    expect(store.size).toBe(0);
    take(store, 'b', { algorithm: 'sliding_window_log', rps: 1, burst: 3 });
    expect(remaining(store, 'b', { algorithm: 'sliding_window_log', rps: 1, burst: 3 })).toBe(2);
  });

  it('under any mix of keys, costs and time, never holds more than maxKeys', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 50 }),
        fc.array(
          fc.tuple(
            fc.integer({ min: 0, max: 200 }),
            fc.integer({ min: 1, max: 2 }),
            fc.integer({ min: 0, max: 3_000 }),
          ),
        ),
        (maxKeys, steps) => {
          const store = new MemoryStore({ clock, maxKeys });
          for (const [key, cost, wait] of steps) {
            now += wait;
            take(store, `k${key}`, key % 2 === 0 ? FAST : SLOW, Math.min(cost, key % 2 === 0 ? 1 : 2));
            if (store.size > maxKeys) return false;
          }
          return true;
        },
      ),
    );
  });
});

describe('MemoryStore requests (clock pinned)', () => {
  let now: number;
  const clock = () => now;
  beforeEach(() => (now = 1_000_000));
  afterEach(() => jest.useRealTimers());

  /** Full again 10 s after one token is taken, so a bucket charged twice lives longer than one charged once. */
  const TENTH: Rule = { algorithm: 'token_bucket', rps: 0.1, burst: 2 };
  const req = (key: string, rule: Rule, cost: unknown = 1) => ({ key, policy: key, rule, cost: cost as number });
  const COST = 'must be a finite number > 0 (the tokens the request takes)';

  /** The error `promise` rejects with; the call that made it must not have thrown. */
  const rejection = async (promise: Promise<unknown>) =>
    promise.then(
      () => undefined,
      (error: unknown) => error as Error,
    );

  it('keeps one live bucket for a key given twice in one call: no sweep drops it', async () => {
    jest.useFakeTimers();
    const store = new MemoryStore({ clock });
    const twice = await store.consume([req('k', TENTH), req('k', TENTH)]);
    expect(twice.map((d) => [d.allowed, d.remaining])).toEqual([
      [true, 1],
      [true, 1],
    ]);
    now += 5_000;
    expect((await store.consume([req('k', TENTH)]))[0]).toMatchObject({ allowed: true, remaining: 0 }); // 0.5 left
    now += 6_000;
    // a second row for k, unchanged since the first call, expired at +10 s: a sweep must not take k with it
    jest.advanceTimersByTime(1_000);
    expect((await store.consume([req('k', TENTH)]))[0]).toMatchObject({ allowed: true, remaining: 0 }); // 0.1 left
    expect((await store.consume([req('k', TENTH)]))[0]).toMatchObject({ allowed: false, retryAfter: 9 });
    await store.close();
  });

  it.each<[string, ReturnType<typeof req>, string]>([
    ['rule', req('k', { algorithm: 'token_bucket', rps: 1, burst: 100 }), 'rule'],
    ['algorithm', req('k', { ...TENTH, algorithm: 'gcra' }), 'rule'],
    ['cost', req('k', TENTH, 2), 'cost'],
  ])('refuses a key given twice with a different %s, storing nothing', async (_what, second, field) => {
    const store = new MemoryStore({ clock });
    for (const charge of [true, false]) {
      let promise!: Promise<unknown>;
      expect(
        () =>
          (promise = charge
            ? store.consume([req('k', TENTH), req('j', TENTH), second])
            : store.peek([req('k', TENTH), second])),
      ).not.toThrow();
      const error = await rejection(promise);
      expect(error).toBeInstanceOf(TypeError);
      expect(error?.message).toBe(
        `Invalid argument to MemoryStore.${charge ? 'consume' : 'peek'}: requests[0] and requests[${charge ? 2 : 1}] are for the same key "k" with a different ${field}; a key is one bucket, decided once per call: give each key once`,
      );
    }
    expect(store.size).toBe(0);
  });

  it.each<[string, unknown, ErrorConstructor, string]>([
    ['NaN', NaN, RangeError, 'NaN'],
    ['-1', -1, RangeError, '-1'],
    ['0', 0, RangeError, '0'],
    ['Infinity', Infinity, RangeError, 'Infinity'],
    ["'1'", '1', TypeError, '"1"'],
    ['null', null, TypeError, 'null'],
    ['undefined', undefined, TypeError, 'undefined'],
  ])('rejects a cost of %s clearly, on every algorithm, charging nothing', async (_name, cost, type, shown) => {
    const store = new MemoryStore({ clock });
    for (const algorithm of ALGORITHMS) {
      const rule: Rule = { algorithm, rps: 1, burst: 5 };
      for (const charge of [true, false]) {
        let promise!: Promise<unknown>;
        // the request's other policy is fine: the call as a whole is refused
        const requests = [req(`ok:${algorithm}`, rule), { ...req(algorithm, rule), cost: cost as number }];
        expect(() => (promise = charge ? store.consume(requests) : store.peek(requests))).not.toThrow();
        const error = await rejection(promise);
        expect(error).toBeInstanceOf(type);
        expect(error?.message).toBe(
          `Invalid argument to MemoryStore.${charge ? 'consume' : 'peek'}: "requests[1].cost" ${COST}, got ${shown}`,
        );
      }
    }
    expect(store.size).toBe(0);
  });

  it('rejects a call that is not a list of requests, never synchronously', async () => {
    const store = new MemoryStore({ clock });
    let promise!: Promise<unknown>;
    expect(() => (promise = store.consume(undefined as never))).not.toThrow();
    expect((await rejection(promise))?.message).toBe(
      'Invalid argument to MemoryStore.consume: "requests" must be a list of requests, got undefined',
    );
    expect(() => (promise = store.peek([null as never]))).not.toThrow();
    expect((await rejection(promise))?.message).toBe(
      'Invalid argument to MemoryStore.peek: "requests[0]" must be a request such as { key, policy, rule, cost }, got null',
    );
    expect(() => (promise = store.consume([req(5 as never, SLOW)]))).not.toThrow();
    expect((await rejection(promise))?.message).toBe(
      'Invalid argument to MemoryStore.consume: "requests[0].key" must be a string, got 5',
    );
    expect(() => (promise = store.reset(undefined as never))).not.toThrow();
    await expect(promise).rejects.toThrow(TypeError);
  });

  it('keeps every bucket of a request that has more policies than maxKeys', () => {
    const store = new MemoryStore({ clock, maxKeys: 1 });
    const both = [req('a', SLOW), req('b', SLOW)];
    for (const expected of [1, 0])
      expect(store.decideSync(both, true).map((d) => [d.allowed, d.remaining])).toEqual([
        [true, expected],
        [true, expected],
      ]);
    expect(store.decideSync(both, true).map((d) => [d.allowed, d.remaining])).toEqual([
      [false, 0],
      [false, 0],
    ]);
    expect(store.size).toBe(2);
    // the next new bucket makes room: the store is back within maxKeys
    expect(store.decideSync([req('c', SLOW)], true)[0].remaining).toBe(1);
    expect(store.size).toBe(1);
    expect(store.decideSync([req('a', SLOW)], false)[0].remaining).toBe(2);
  });
});

describe('MemoryStore sweep timer (fake timers)', () => {
  let now: number;
  beforeEach(() => {
    now = 1_000_000;
    jest.useFakeTimers();
  });
  afterEach(() => jest.useRealTimers());

  it('runs one timer while it holds buckets, drops expired ones with it, and stops when empty', async () => {
    const store = new MemoryStore({ clock: () => now });
    expect(jest.getTimerCount()).toBe(0);
    for (let i = 0; i < 100; i++) await store.consume([{ key: `k${i}`, policy: 'p', rule: FAST, cost: 1 }]);
    expect(jest.getTimerCount()).toBe(1);
    jest.advanceTimersByTime(1_000);
    expect(store.size).toBe(100); // the pinned clock has not moved: nothing expired
    expect(jest.getTimerCount()).toBe(1);
    now += 1_000;
    jest.advanceTimersByTime(1_000);
    expect(store.size).toBe(0);
    expect(jest.getTimerCount()).toBe(0);
  });

  it('clears its timer on close', async () => {
    const store = new MemoryStore({ clock: () => now });
    await store.consume([{ key: 'k', policy: 'p', rule: SLOW, cost: 1 }]);
    expect(jest.getTimerCount()).toBe(1);
    await store.close();
    expect(jest.getTimerCount()).toBe(0);
    expect(store.size).toBe(0);
  });
});

describe('MemoryStore sweep timer (real timers)', () => {
  it('does not keep the process alive: its timer is unref()d', async () => {
    const timeouts = () => process.getActiveResourcesInfo().filter((type) => type === 'Timeout').length;
    const before = timeouts();
    const store = new MemoryStore();
    try {
      await store.consume([{ key: 'k', policy: 'p', rule: SLOW, cost: 1 }]);
      expect(timeouts()).toBe(before);
    } finally {
      await store.close();
    }
  });
});

describe('MemoryStore as the module sees it', () => {
  const request = { key: 'k', policy: 'p', rule: SLOW, cost: 1 };

  it('says it is the memory store, and hands out its synchronous decisions', () => {
    const store = new MemoryStore({ clock: () => 1_000_000 });
    expect(store.kind).toBe('memory');
    expect(store.decideNow).toBe(store.decideNow);
    expect(store.decideNow?.([request], true).map((d) => d.remaining)).toEqual([1]);
    expect(store.decideNow?.([request], false).map((d) => d.remaining)).toEqual([1]);
  });

  it('hands out none when a subclass overrides consume or peek: the module must call the override', () => {
    class Consuming extends MemoryStore {
      override consume(requests: Parameters<MemoryStore['consume']>[0]) {
        return super.consume(requests);
      }
    }
    class Peeking extends MemoryStore {
      override peek(requests: Parameters<MemoryStore['peek']>[0]) {
        return super.peek(requests);
      }
    }
    class Closing extends MemoryStore {
      override close() {
        return super.close();
      }
    }
    expect([new Consuming().decideNow, new Peeking().decideNow]).toEqual([undefined, undefined]);
    expect(new Closing().decideNow).toBeInstanceOf(Function);
  });
});

describe('MemoryStore options', () => {
  it.each([
    [{ maxKeys: 0 }, 'Invalid MemoryStore option "maxKeys": must be a whole number >= 1, got 0'],
    [{ maxKeys: 1.5 }, 'Invalid MemoryStore option "maxKeys": must be a whole number >= 1, got 1.5'],
    [{ maxKeys: '10' }, 'Invalid MemoryStore option "maxKeys": must be a whole number >= 1, got "10"'],
    [{ clock: 5 }, 'Invalid MemoryStore option "clock": must be { now() } or a function returning ms, got 5'],
  ])('%p: %s', (options, message) => {
    expect(() => new MemoryStore(options as never)).toThrow(message);
  });
});

describe('kthSmallest', () => {
  it('finds the k-th smallest of any numbers and puts the k + 1 smallest first', () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: -5, max: 5 }), { minLength: 1 }), fc.nat(), (numbers, seed) => {
        const k = seed % numbers.length;
        const values = Float64Array.from(numbers);
        const sorted = [...numbers].sort((a, b) => a - b);
        expect(kthSmallest(values, k)).toBe(sorted[k]);
        expect([...values.subarray(0, k + 1)].sort((a, b) => a - b)).toEqual(sorted.slice(0, k + 1));
      }),
    );
  });
});

describe('MemoryStore settle (clock pinned)', () => {
  /** 2 tokens, one back every 1,000 s, that a settle may take 2 past empty. */
  const SETTLING: Rule = { ...SLOW, debt: 2 };
  const request = (key: string, cost: number) => ({ key, policy: 'p', rule: SETTLING, cost });

  it('holds a bucket a settle takes from, within maxKeys, and drops one it gives back to full', async () => {
    const store = new MemoryStore({ clock: () => 1_000_000, maxKeys: 10 });
    // reservations of nothing: full buckets, the same as no key, so nothing is held
    const reserved = Array.from({ length: 20 }, (_, i) => store.decideSync([request(`k${i}`, 0)], true)[0]);
    expect(reserved.every((decision) => decision.allowed)).toBe(true);
    expect(store.size).toBe(0);
    // each settled to 3: a bucket 1 past empty, held until paid back, never more than maxKeys of them
    const settled = await store.settle(reserved.map((decision) => ({ decision, actual: 3 })));
    expect(settled.every((decision) => decision?.allowed === false && decision.remaining === 0)).toBe(true);
    expect(store.size).toBeLessThanOrEqual(10);
    expect(store.decideSync([request('k19', 0)], false)[0]).toMatchObject({ allowed: false, retryAfter: 1_000 });
    // settled down to nothing: full again, its key dropped
    await store.settle([{ decision: reserved[19], actual: 0 }]);
    expect(store.decideSync([request('k19', 2)], false)[0]).toMatchObject({ allowed: true, remaining: 2 });
    expect(store.size).toBeLessThanOrEqual(9);
    await store.close();
  });
});
