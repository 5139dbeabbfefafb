import { jest } from '@jest/globals';
import { Logger } from '@nestjs/common';
import { type Cluster, Redis } from 'ioredis';
import { evictingRedis } from '../../lib/rate-limit.messages.js';
import { EVICTING_POLICIES } from '../../lib/stores/redis/eviction-check.js';
import { RedisStore } from '../../lib/stores/redis/redis.store.js';
import { freePort, type RedisServer, startRedisServer, stopRedisServer } from '../support/redis/process.js';
import { connectTestCluster } from '../support/redis/test-redis.js';

/**
 * The warning a `RedisStore` logs at start when its server's `maxmemory-policy` can evict the
 * store's keys: one per such policy, none for `noeviction`, read where `CONFIG` is disabled, once
 * per server however many stores and reconnections, on a server that was down at start once it is
 * up, and per master of a Cluster. Each store's reading is an `INFO` it sends when made (or when
 * its client is ready): a `PING` sent after it is answered after it.
 */

/** The server's `CONFIG` under another name, as a managed service hides it: the store must not need it. */
const CONFIG = 'rl-eviction-test-config';

let server: RedisServer;
let admin: Redis;
let warn: jest.SpiedFunction<Logger['warn']>;

beforeAll(async () => {
  server = await startRedisServer(['--rename-command', 'CONFIG', CONFIG]);
  admin = new Redis({ port: server.port, host: '127.0.0.1' });
});
afterAll(async () => {
  await admin.quit();
  stopRedisServer(server.pid);
});
beforeEach(() => {
  warn = jest.spyOn(Logger.prototype, 'warn').mockImplementation(() => undefined);
});
afterEach(() => {
  jest.restoreAllMocks();
});

/** The eviction warnings logged so far. */
const evictionWarnings = (): string[] =>
  warn.mock.calls.map(([message]) => String(message)).filter((message) => message.includes('maxmemory-policy'));

/** Once what `client` sent before now has been answered and acted on. */
async function answered(client: Redis): Promise<void> {
  await client.ping();
  await new Promise(setImmediate);
}

async function setPolicy(policy: string, maxmemory = 0): Promise<void> {
  await admin.call(CONFIG, 'SET', 'maxmemory-policy', policy, 'maxmemory', String(maxmemory));
}

describe('a single server, CONFIG disabled', () => {
  it.each([...EVICTING_POLICIES])('%s: one warning naming it', async (policy) => {
    await setPolicy(policy);
    const client = new Redis({ port: server.port, host: '127.0.0.1' });
    try {
      const store = new RedisStore({ client });
      await answered(client);
      expect(evictionWarnings()).toEqual([evictingRedis(policy, 0)]);
      await store.close();
    } finally {
      client.disconnect();
    }
  });

  it('noeviction: no warning', async () => {
    await setPolicy('noeviction', 100 * 2 ** 20);
    const client = new Redis({ port: server.port, host: '127.0.0.1' });
    try {
      const store = new RedisStore({ client });
      await answered(client);
      await answered(client);
      expect(evictionWarnings()).toEqual([]);
      await store.close();
    } finally {
      client.disconnect();
    }
  });

  it('once per server: not again for a second store on the client, nor after a reconnection', async () => {
    const maxmemory = 100 * 2 ** 20;
    await setPolicy('allkeys-lru', maxmemory);
    const client = new Redis({ port: server.port, host: '127.0.0.1' });
    try {
      const stores = [new RedisStore({ client })];
      await answered(client);
      stores.push(new RedisStore({ client }));
      client.disconnect(true);
      await new Promise((ready) => client.once('ready', ready));
      await answered(client);
      expect(evictionWarnings()).toEqual([evictingRedis('allkeys-lru', maxmemory)]);
      expect(evictionWarnings()[0]).toContain(`maxmemory ${maxmemory} bytes`);
      for (const store of stores) await store.close();
    } finally {
      client.disconnect();
    }
  });
});

describe('a server that is down when the store is made (own redis-server)', () => {
  let late: RedisServer | undefined;
  afterEach(() => {
    if (late) stopRedisServer(late.pid);
  });

  it('is read once it is up', async () => {
    const port = await freePort();
    const client = new Redis({ port, host: '127.0.0.1', maxRetriesPerRequest: 0, retryStrategy: () => 50 });
    client.on('error', () => undefined);
    try {
      const store = new RedisStore({ client });
      late = await startRedisServer(['--maxmemory-policy', 'volatile-ttl'], { port });
      if (client.status !== 'ready') await new Promise((ready) => client.once('ready', ready));
      await answered(client);
      expect(evictionWarnings()).toEqual([evictingRedis('volatile-ttl', 0)]);
      await store.close();
    } finally {
      client.disconnect();
    }
  });
});

describe('a Cluster', () => {
  let cluster: Cluster;
  beforeAll(async () => {
    cluster = await connectTestCluster();
  });
  afterAll(async () => {
    await cluster.quit();
  });

  it('warns of the master whose policy evicts, by its address, and of no other', async () => {
    const [evicting, ...others] = cluster.nodes('master');
    await evicting.config('SET', 'maxmemory-policy', 'volatile-lfu');
    try {
      const store = new RedisStore({ client: cluster });
      await Promise.all([evicting, ...others].map(answered));
      const address = `${evicting.options.host}:${evicting.options.port}`;
      expect(evictionWarnings()).toEqual([evictingRedis('volatile-lfu', 0, address)]);
      await store.close();
    } finally {
      await evicting.config('SET', 'maxmemory-policy', 'noeviction');
    }
  });
});
