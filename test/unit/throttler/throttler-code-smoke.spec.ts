/**
 * A smoke check of `RateLimitThrottlerStorage` on a memory store at fixed instants (the real
 * checks of the entry are the throttler suites beside it): NT's counting with a block, without
 * one, and the edges that must not crash.
 */
import { MemoryStore } from '../../../lib/stores/memory/memory.store.js';
import { ManualClock } from '../../../lib/testing/manual-clock.js';
import { normalizeIp } from '../../../lib/throttler/ip.js';
import { RateLimitThrottlerStorage } from '../../../lib/throttler/rate-limit-throttler.storage.js';

function storageAt(): { clock: ManualClock; storage: RateLimitThrottlerStorage } {
  const clock = new ManualClock(1_000_000);
  return { clock, storage: new RateLimitThrottlerStorage({ store: new MemoryStore({ clock }) }) };
}

describe('RateLimitThrottlerStorage (smoke)', () => {
  it('with a block: limit + 1 on the refusal, refused while blocked, the first hit after it counts as 1', async () => {
    const { clock, storage } = storageAt();
    const hit = () => storage.increment('k', 10_000, 2, 5_000, 'default');
    const admitted = [await hit(), await hit()];
    expect(admitted.map((r) => [r.totalHits, r.isBlocked])).toEqual([
      [1, false],
      [2, false],
    ]);
    expect(await hit()).toMatchObject({ totalHits: 3, isBlocked: true, timeToBlockExpire: 5 });
    clock.advance('4s');
    expect(await hit()).toMatchObject({ isBlocked: true, timeToBlockExpire: 1 });
    clock.advance('1s');
    expect(await hit()).toMatchObject({ totalHits: 1, isBlocked: false, timeToBlockExpire: 0 });
  });

  it('without a block: refused while full, totalHits = hits + 1, until the oldest hit leaves', async () => {
    const { clock, storage } = storageAt();
    const hit = () => storage.increment('k', 10_000, 2, 0, 'default');
    await hit();
    clock.advance('3s');
    await hit();
    expect(await hit()).toMatchObject({ totalHits: 3, isBlocked: true, timeToBlockExpire: 7 });
    clock.advance('7s');
    expect(await hit()).toMatchObject({ totalHits: 2, isBlocked: false });
  });

  it('names and keys are their own buckets; limit < 1 refuses, ttl <= 0 admits, fractions never crash', async () => {
    const { storage } = storageAt();
    expect((await storage.increment('k', 1_000, 1, 0, 'a')).isBlocked).toBe(false);
    expect((await storage.increment('k', 1_000, 1, 0, 'b{x}')).isBlocked).toBe(false);
    expect((await storage.increment('k', 1_000, 0, 0, 'c')).isBlocked).toBe(true);
    expect((await storage.increment('k', 0, 1, 0, 'd')).isBlocked).toBe(false);
    expect((await storage.increment('k', 1_500.5, 2.5, 0.5, 'e')).isBlocked).toBe(false);
  });

  it("timeToExpire counts to a window anchored at the key's first hit; 'anchored-window' counts in it", async () => {
    const { clock, storage } = storageAt();
    expect((await storage.increment('k', 60_000, 5, 0, 'default')).timeToExpire).toBe(60);
    clock.advance('20s');
    expect((await storage.increment('k', 60_000, 5, 0, 'default')).timeToExpire).toBe(40);
    const store = new MemoryStore({ clock });
    const anchored = new RateLimitThrottlerStorage({ store, counting: 'anchored-window' });
    const hit = () => anchored.increment('k', 10_000, 1, 0, 'default');
    expect(await hit()).toMatchObject({ totalHits: 1, isBlocked: false, timeToExpire: 10 });
    clock.advance('4s');
    expect(await hit()).toMatchObject({ totalHits: 2, isBlocked: true, timeToBlockExpire: 6 });
    clock.advance('6s');
    expect(await hit()).toMatchObject({ totalHits: 1, isBlocked: false, timeToExpire: 10 });
    await anchored.onApplicationShutdown();
  });

  it('names a bad option', () => {
    expect(() => new RateLimitThrottlerStorage({ prefix: 'a{b' })).toThrow(/option "prefix"/);
    expect(() => new RateLimitThrottlerStorage({ failMode: 'maybe' as 'open' })).toThrow(/option "failMode"/);
  });

  it("normalizes IPs as NT 6.7's default tracker does", () => {
    expect(normalizeIp('::ffff:10.0.0.1')).toBe('10.0.0.1');
    expect(normalizeIp('2001:db8:1:2:3:4:5:6')).toBe('2001:db8:1:2::/64');
    expect(normalizeIp('2001:db8:1:2:3:4:5:6', 48)).toBe('2001:db8:1::/48');
    expect(normalizeIp('::1')).toBe('::1');
    expect(normalizeIp('not-an-ip')).toBe('not-an-ip');
  });
});
