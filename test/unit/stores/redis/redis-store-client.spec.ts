import { jest } from '@jest/globals';
import { Logger } from '@nestjs/common';
import { Cluster, Redis } from 'ioredis';
import { clientCommandTimeout } from '../../../../lib/rate-limit.messages.js';
import { RedisStore } from '../../../../lib/stores/redis/redis.store.js';

/**
 * A client given to `RedisStore` that sets ioredis's `commandTimeout` fails, by ioredis's own
 * timer, a command whose reply arrived while the app was busy: the store says so once, when it is
 * made. The clients here are lazyConnect and never used: nothing connects.
 */
describe('RedisStore and its client’s commandTimeout', () => {
  let warn: jest.SpiedFunction<Logger['warn']>;
  beforeEach(() => {
    warn = jest.spyOn(Logger.prototype, 'warn').mockImplementation(() => undefined);
  });
  afterEach(() => jest.restoreAllMocks());

  it.each([
    ['a Redis', () => new Redis({ lazyConnect: true, commandTimeout: 100 })],
    [
      'a Cluster',
      () => new Cluster([{ host: '127.0.0.1', port: 1 }], { lazyConnect: true, redisOptions: { commandTimeout: 100 } }),
    ],
  ])('warns when %s client sets one', async (_name, client) => {
    const store = new RedisStore({ client: client(), clock: 'app' });
    expect(warn.mock.calls.map(([message]: unknown[]) => message)).toEqual([clientCommandTimeout(100)]);
    await store.close();
  });

  it('says nothing of a client without one', async () => {
    const store = new RedisStore({ client: new Redis({ lazyConnect: true }), clock: 'app' });
    expect(warn).not.toHaveBeenCalled();
    await store.close();
  });
});
