import { resolveOptions } from '../../../lib/rate-limit-options.js';
import { MemoryStore } from '../../../lib/stores/memory/memory.store.js';
import type { RateLimitStore } from '../../../lib/stores/rate-limit-store.interface.js';
import { globLiteral } from '../../../lib/stores/redis/unlink-under.js';
import { ManualClock } from '../../../lib/testing/index.js';
import { StandaloneLimiter } from '../../support/standalone-limiter.js';

/** `RateLimiterService.resetAll()` on the memory store (Redis: test/integration/reset-all.spec.ts). */

/** 1 token a second, 2 at most: two requests empty it. */
const POLICY = { name: 'api', rps: 1, burst: 2 };

describe('resetAll on the memory store', () => {
  it("empties the buckets under the module's prefix, and only those", async () => {
    const store = new MemoryStore({ clock: new ManualClock(1_767_225_600_000) });
    // two prefixes, one the start of the other: only keys that start with the whole prefix go
    const mine = new StandaloneLimiter(resolveOptions({ prefix: 'rl:' }), store);
    const theirs = new StandaloneLimiter(resolveOptions({ prefix: 'rl' }), store);
    const others = new StandaloneLimiter(resolveOptions({ prefix: 'rl-other:' }), store);
    for (const limiter of [mine, theirs, others]) {
      for (const id of ['ip:1', 'ip:2', 'user:3']) await limiter.consume(id, POLICY, 2);
    }
    expect(store.size).toBe(9);
    await mine.resetAll();
    expect(store.size).toBe(6);
    expect((await mine.peek('ip:1', POLICY))[0].remaining).toBe(2);
    expect((await mine.peek('user:3', POLICY))[0].remaining).toBe(2);
    expect((await theirs.peek('ip:1', POLICY))[0].remaining).toBe(0);
    expect((await others.peek('ip:1', POLICY))[0].remaining).toBe(0);
    // the freed rows are reused
    await mine.consume('ip:1', POLICY);
    expect(store.size).toBe(7);
    await store.close();
  });

  it('rejects, saying what is missing, on a store of its own without resetAll', async () => {
    const memory = new MemoryStore();
    const custom: RateLimitStore = {
      consume: (requests) => memory.consume(requests),
      peek: (requests) => memory.peek(requests),
      reset: (keys) => memory.reset(keys),
    };
    const limiter = new StandaloneLimiter(resolveOptions({}), custom);
    await expect(limiter.resetAll()).rejects.toThrow(
      'RateLimiterService.resetAll() needs a store with resetAll(prefix), as MemoryStore and RedisStore have: this store has none',
    );
    await limiter.onApplicationShutdown();
  });
});

describe('globLiteral', () => {
  it('escapes every character a Redis glob treats specially, and nothing else', () => {
    expect(globLiteral('a*b?c[d]e\\f{g}:h^-')).toBe('a\\*b\\?c\\[d\\]e\\\\f{g}:h^-');
  });
});
