/**
 * `ThrottlerStorageService` of `nestjs-ratelimit/throttler`, made as NT's users make it (no
 * arguments), stays bounded under many distinct clients and holds no timer per hit. NT's grows
 * with every key whose hits have not expired (nestjs/throttler#2629, #2665): 300,000 keys of an
 * hour's ttl hold about 220 MB of its heap (measured on NT 6.7.1). NT 6.7.1 holds one sweep timer,
 * not one per hit, so the timer test passes on both.
 */
import { jest } from '@jest/globals';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { IMPLEMENTATIONS, loadNt, loadOurs } from '../support/throttler/implementations.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

/** Distinct keys in each half of the run: each half alone fills the storage's bound (100,000 buckets). */
const HALF = 100_000;
const HOUR_MS = 3_600_000;
/** Heap the storage may keep after 2 * HALF keys; NT's holds about 150 MB for as many. */
const MAX_HEAP_BYTES = 64 * 1024 * 1024;
/** What the second half may add once the bound is reached (NT's: about 75 MB). */
const MAX_SECOND_HALF_BYTES = 8 * 1024 * 1024;

function heapUsed(): number {
  gc();
  return process.memoryUsage().heapUsed;
}

type Storage = {
  increment(key: string, ttl: number, limit: number, blockDuration: number, name: string): Promise<unknown>;
  onApplicationShutdown?(): unknown;
  onModuleDestroy?(): unknown;
};

async function make(implementation: (typeof IMPLEMENTATIONS)[number]): Promise<Storage> {
  const api = implementation === '@nestjs/throttler' ? await loadNt() : await loadOurs();
  return new api.ThrottlerStorageService();
}

async function dispose(storage: Storage): Promise<void> {
  await storage.onModuleDestroy?.();
  await storage.onApplicationShutdown?.();
}

describe.each(IMPLEMENTATIONS)('%s ThrottlerStorageService', (implementation) => {
  afterEach(() => jest.useRealTimers());

  it('holds one timer at most, however many keys and hits', async () => {
    jest.useFakeTimers({ doNotFake: ['nextTick', 'setImmediate', 'queueMicrotask'] });
    const storage = await make(implementation);
    let most = 0;
    for (let i = 0; i < 2_000; i++) {
      await storage.increment(`timers-${i % 200}`, 60_000, 5, 60_000, 'default');
      most = Math.max(most, jest.getTimerCount());
    }
    expect(most).toBeLessThanOrEqual(1);
    await dispose(storage);
    expect(jest.getTimerCount()).toBe(0);
  });
});

describe('nestjs-ratelimit/throttler ThrottlerStorageService under many clients', () => {
  it(`its heap levels off: the second ${HALF.toLocaleString('en')} distinct keys of an hour's ttl add (almost) nothing`, async () => {
    const before = heapUsed();
    const storage = await make('nestjs-ratelimit/throttler');
    const started = performance.now();
    for (let i = 0; i < HALF; i++) await storage.increment(`client-${i}`, HOUR_MS, 10, HOUR_MS, 'default');
    const half = heapUsed();
    for (let i = HALF; i < 2 * HALF; i++) await storage.increment(`client-${i}`, HOUR_MS, 10, HOUR_MS, 'default');
    const all = heapUsed();
    const mb = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(1)} MB`;
    console.log(
      `ThrottlerStorageService: ${(2 * HALF).toLocaleString('en')} keys in ${Math.round(performance.now() - started)} ms, ` +
        `heap grown by ${mb(half - before)} after the first half, by ${mb(all - half)} more after the second`,
    );
    expect(all - before).toBeLessThan(MAX_HEAP_BYTES);
    expect(all - half).toBeLessThan(MAX_SECOND_HALF_BYTES);
    // still a limiter: a key over its limit is refused
    let last: unknown;
    for (let i = 0; i < 3; i++) last = await storage.increment('still-limited', HOUR_MS, 2, HOUR_MS, 'default');
    expect(last).toMatchObject({ totalHits: 3, isBlocked: true });
    await dispose(storage);
  }, 60_000);
});
