import { jest } from '@jest/globals';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import type { Rule } from '../../lib/algorithms/algorithm.types.js';
import { bucketKey } from '../../lib/keys/bucket-key.js';
import { MemoryStore } from '../../lib/stores/memory/memory.store.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

const KEYS = 1_000_000;
const MAX_KEYS = 100_000;
/** One token per 100 s: every charged bucket stays limited, so the bound is held by eviction. */
const RULE: Rule = { algorithm: 'token_bucket', rps: 0.01, burst: 10 };

function heapUsed(): number {
  gc();
  return process.memoryUsage().heapUsed;
}

/**
 * A million distinct clients through a store bounded to 100,000 buckets, with the clock pinned
 * and timers faked: the sweep timer is counted after every request and fired by hand.
 */
describe('MemoryStore under a million keys', () => {
  beforeEach(() => jest.useFakeTimers());
  afterEach(() => jest.useRealTimers());

  it('stays within maxKeys, with one timer at most, and is empty once every bucket expired', async () => {
    let now = 1_700_000_000_000;
    // recent identities' digests are kept in a table of fixed size (see `digest`), about 2 MB of
    // IP addresses once full: filled first, so that what follows measures the store's own heap
    for (let i = 0; i < 200_000; i++)
      bucketKey('rl:', 'default', 'token_bucket', `ip:11.${i >> 16}.${(i >> 8) & 255}.${i & 255}`);
    const before = heapUsed();
    const store = new MemoryStore({ clock: () => now, maxKeys: MAX_KEYS });
    let largest = 0;
    let timers = 0;
    for (let i = 0; i < KEYS; i++) {
      const key = bucketKey('rl:', 'default', 'token_bucket', `ip:10.${i >> 16}.${(i >> 8) & 255}.${i & 255}`);
      store.decideSync([{ key, policy: 'default', rule: RULE, cost: 1 }], true);
      largest = Math.max(largest, store.size);
      timers = Math.max(timers, jest.getTimerCount());
      if (i % 10 === 0) now += 1;
    }
    const perKey = (heapUsed() - before) / store.size;
    console.log(
      `MemoryStore: ${KEYS.toLocaleString('en')} keys through maxKeys ${MAX_KEYS.toLocaleString('en')}: ` +
        `largest size ${largest.toLocaleString('en')}, ${store.size.toLocaleString('en')} live, ` +
        `${perKey.toFixed(1)} bytes of heap per live key (target <= 150), most timers at once ${timers}`,
    );
    expect(largest).toBeLessThanOrEqual(MAX_KEYS);
    expect(timers).toBe(1);
    expect(perKey).toBeLessThanOrEqual(150);

    now += 1_000_000; // every bucket is full again
    for (let tick = 0; tick < 10 && store.size > 0; tick++) jest.advanceTimersByTime(1_000);
    expect(store.size).toBe(0);
    expect(jest.getTimerCount()).toBe(0);
    await store.close();
  });
});
