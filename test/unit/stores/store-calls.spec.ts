import { randomUUID } from 'node:crypto';
import { jest } from '@jest/globals';
import { Logger } from '@nestjs/common';
import type { Rule } from '../../../lib/algorithms/algorithm.types.js';
import { RateLimitStoreError } from '../../../lib/stores/rate-limit-store.error.js';
import type { RateLimitRequest } from '../../../lib/stores/rate-limit-store.interface.js';
import { StoreCalls } from '../../../lib/stores/store-calls.js';
import { ManualClock } from '../../../lib/testing/manual-clock.js';
import { CASE_EPOCH } from '../../cases/index.js';
import { KeyValueServer, KitStore } from '../../support/kit-store.js';

/** One slot in flight per identity, held for a minute at the most. */
const SLOT: Rule = { algorithm: 'concurrency', rps: 1 / 60, burst: 1 };
const slotOf = (identity = randomUUID()): RateLimitRequest[] => [
  { key: `rl:calls:cc:${identity}`, policy: 'exports', rule: SLOT, cost: 1 },
];

/** A key-value server whose writes wait, while `hold()` holds them, until `letGo()`. */
class HeldServer extends KeyValueServer {
  private held: Promise<void> | undefined;
  private letGoHeld: (() => void) | undefined;

  hold(): void {
    this.held = new Promise((resolve) => (this.letGoHeld = resolve));
  }

  letGo(): void {
    this.letGoHeld?.();
    this.held = undefined;
  }

  override async set(entries: Parameters<KeyValueServer['set']>[0]): Promise<void> {
    await this.held;
    return super.set(entries);
  }
}

/**
 * `StoreCalls.release`, the engine's refund that it retries: it settles when the store's refund
 * has, rejects when that failed (the charges stay on their decisions, so the next release gives
 * them back), and gives back in the local limiter what that decided. The store is the kit's, on
 * a key-value server in the process that can be taken down.
 */
describe('StoreCalls.release', () => {
  const clock = new ManualClock(CASE_EPOCH);
  beforeEach(() => {
    // the breaker's messages of a store taken down on purpose
    jest.spyOn(Logger.prototype, 'error').mockImplementation(() => undefined);
    jest.spyOn(Logger.prototype, 'log').mockImplementation(() => undefined);
  });
  afterEach(() => jest.restoreAllMocks());

  it('rejects while the store cannot give back, and the next release gives back, once', async () => {
    const store = new KitStore({ clock });
    const calls = new StoreCalls(store, { timeout: 1_000, failMode: 'open' });
    const slot = slotOf();
    const held = await calls.consume(slot);
    store.server.down = true;
    const failed = calls.release(held);
    await expect(failed).rejects.toBeInstanceOf(RateLimitStoreError);
    await expect(failed).rejects.toMatchObject({ reason: 'unavailable' });
    store.server.down = false;
    expect((await store.peek(slot))[0].remaining).toBe(0);
    await calls.release(held);
    expect((await store.peek(slot))[0].remaining).toBe(1);
    expect((await calls.consume(slot))[0].allowed).toBe(true);
    await calls.release(held);
    expect((await store.peek(slot))[0].remaining).toBe(0);
    await calls.close();
  });

  it("waits for the store's refund past the timeout, where refund gives up", async () => {
    const server = new HeldServer(() => clock.now());
    const store = new KitStore({ clock, server });
    const calls = new StoreCalls(store, { timeout: 5, failMode: 'open' });
    const [given, released] = [slotOf(), slotOf()];
    const [givenHeld, releasedHeld] = [await calls.consume(given), await calls.consume(released)];
    server.hold();
    let settled = false;
    const release = calls.release(releasedHeld).finally(() => (settled = true));
    // a refund of the same store ends at its timeout, with the store's writes still held
    await calls.refund(givenHeld);
    expect(settled).toBe(false);
    server.letGo();
    await release;
    expect((await store.peek(released))[0].remaining).toBe(1);
    await calls.close();
  });

  it("gives back in the local limiter what it decided while the store was down (failMode 'local')", async () => {
    const store = new KitStore({ clock });
    const calls = new StoreCalls(store, { timeout: 1_000, failMode: 'local' });
    const slot = slotOf();
    store.server.down = true;
    const held = await calls.consume(slot);
    expect(calls.decidedLocally(held[0])).toBe(true);
    expect((await calls.consume(slot))[0].allowed).toBe(false);
    // the store's server is still down: a release that went to it would reject
    await calls.release(held);
    expect((await calls.consume(slot))[0].allowed).toBe(true);
    await calls.close();
  });
});
