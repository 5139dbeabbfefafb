import { randomUUID } from 'node:crypto';
import { Test } from '@nestjs/testing';
import { RateLimiterService, RateLimitModule } from 'nestjs-ratelimit';
import { RateLimitStoreError, type SlidingWindowLogState } from 'nestjs-ratelimit/store';
import { ManualClock } from '../../../lib/testing/manual-clock.js';
import { CASE_EPOCH, ruleOf } from '../../cases/index.js';
import { KitStore } from '../../support/kit-store.js';
import { describeRefundCases } from '../../support/refund-cases.js';
import { clocked, describeStoreCases, requestsUnder, type StoredKeys } from '../../support/store-cases.js';

/**
 * A store written from `nestjs-ratelimit/store` alone (test/support/kit-store.ts) decides as the
 * built-in stores do: the same shared tests as test/integration/stores.spec.ts, on a key-value
 * server in the process (no Redis), the refund tests of test/integration/store-refund.spec.ts,
 * then what it does as a remote store would.
 */

const prefix = `rl-kit-${randomUUID()}:`;

/** What the kit store's server holds under a key, as the shared tests look at it. */
function keysOf(store: KitStore): StoredKeys {
  const stored = (key: string) => {
    const found = store.server.peekStored(key);
    if (found === undefined) throw new Error(`nothing stored under ${key}`);
    return found;
  };
  return {
    logEntries: async (key) => (JSON.parse(stored(key).value) as SlidingWindowLogState).count,
    expiresAt: async (key) => stored(key).expiresAt,
    // the server drops a key on the clock the store decides on
    lateByMs: () => 0,
  };
}

const kitStore = clocked((clock) => new KitStore({ clock }), keysOf);
describeStoreCases([['KitStore (a key-value server in the process)', kitStore]], prefix);
describeRefundCases([['KitStore', kitStore]], prefix);

describe('KitStore as a remote store', () => {
  const request = (rule = ruleOf('token_bucket', 1, 2)) => requestsUnder(prefix)('remote', rule, randomUUID());

  it('fails with a RateLimitStoreError while its server is down, and decides again once it is back', async () => {
    const store = new KitStore({ clock: new ManualClock(CASE_EPOCH) });
    const req = request();
    await store.consume([req]);
    store.server.down = true;
    for (const call of [store.consume([req]), store.peek([req]), store.reset([req.key])]) {
      await expect(call).rejects.toMatchObject({ name: 'RateLimitStoreError', reason: 'unavailable' });
      await expect(call).rejects.toBeInstanceOf(RateLimitStoreError);
    }
    // a bad request is the caller's mistake, told before the server is asked
    await expect(store.consume([{ ...req, cost: -1 }])).rejects.toBeInstanceOf(RangeError);
    store.server.down = false;
    expect(await store.consume([req])).toMatchObject([{ allowed: true, remaining: 0 }]);
  });

  it('puts back the charges of a refund its server failed: the next refund gives them back, once', async () => {
    const store = new KitStore({ clock: new ManualClock(CASE_EPOCH) });
    // one slot in flight, held for a minute at the most
    const slot = request({ algorithm: 'concurrency', rps: 1 / 60, burst: 1 });
    const held = await store.consume([slot]);
    store.server.down = true;
    await expect(store.refund(held)).rejects.toMatchObject({ name: 'RateLimitStoreError', reason: 'unavailable' });
    store.server.down = false;
    expect((await store.peek([slot]))[0].remaining).toBe(0);
    await store.refund(held);
    expect((await store.peek([slot]))[0].remaining).toBe(1);
    // the next request holds the slot: a third refund of the first one's decisions gives nothing
    expect((await store.consume([slot]))[0].allowed).toBe(true);
    await store.refund(held);
    expect((await store.peek([slot]))[0].remaining).toBe(0);
  });

  it('forgets the buckets under a prefix, and only those', async () => {
    const store = new KitStore({ clock: new ManualClock(CASE_EPOCH) });
    const inside = request();
    const outside = { ...request(), key: `other:${randomUUID()}` };
    await store.consume([inside, outside]);
    await store.resetAll(prefix);
    expect((await store.peek([inside, outside])).map((d) => d.remaining)).toEqual([2, 1]);
  });

  it("is the module's store: the service decides on it, on its clock", async () => {
    const clock = new ManualClock(0);
    const store = new KitStore({ clock });
    const moduleRef = await Test.createTestingModule({ imports: [RateLimitModule.forRoot({ store })] }).compile();
    const limiter = moduleRef.get(RateLimiterService);
    const policy = { name: 'kit', rps: 1, burst: 2 };
    const take = async () => (await limiter.consume('ip:1', policy))[0].allowed;
    expect([await take(), await take(), await take()]).toEqual([true, true, false]);
    clock.advance('1s');
    expect(await take()).toBe(true);
    await limiter.resetAll();
    expect([await take(), await take()]).toEqual([true, true]);
    await moduleRef.close();
  });
});
