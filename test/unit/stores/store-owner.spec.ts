import { Redis } from 'ioredis';
import { MemoryStore } from '../../../lib/stores/memory/memory.store.js';
import { RedisStore } from '../../../lib/stores/redis/redis.store.js';
import { StoreOwner } from '../../../lib/stores/store-owner.js';

/** A memory store that notes when it is closed. */
class NotedStore extends MemoryStore {
  closed = false;
  override close(): Promise<void> {
    this.closed = true;
    return super.close();
  }
}

/**
 * `StoreOwner` closes exactly what the module opened: never a store or a client the app passed
 * in. (That a client it created from a URL is closed, on shutdown and on a failed start, is
 * checked against a real Redis in module.e2e-spec.ts.)
 */
describe('StoreOwner', () => {
  it('uses a store the app passes in and leaves it open', async () => {
    const store = new NotedStore();
    const owner = await StoreOwner.open({ store });
    expect(owner.store).toBe(store);
    await owner.onApplicationShutdown();
    expect(store.closed).toBe(false);
    await store.close();
  });

  it('opens a MemoryStore when no store is chosen, and closes it', async () => {
    const owner = await StoreOwner.open({});
    expect(owner.store).toBeInstanceOf(MemoryStore);
    await owner.store.consume([
      { key: 'k', policy: 'p', rule: { algorithm: 'token_bucket', rps: 1, burst: 2 }, cost: 1 },
    ]);
    expect((owner.store as MemoryStore).size).toBe(1);
    await owner.close();
    expect((owner.store as MemoryStore).size).toBe(0);
  });

  it('makes a RedisStore on a client the app passes in, and never closes that client', async () => {
    // lazyConnect: the client never connects, so no Redis is needed; quit() would end it
    const client = new Redis({ lazyConnect: true });
    const owner = await StoreOwner.open({ redis: client });
    expect(owner.store).toBeInstanceOf(RedisStore);
    await owner.close();
    expect(client.status).toBe('wait');
    client.disconnect();
  });
});
