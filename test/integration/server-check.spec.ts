import { randomUUID } from 'node:crypto';
import { jest } from '@jest/globals';
import { Logger, Module } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { Redis } from 'ioredis';
import { RateLimiterService, RateLimitModule, RedisStore } from '../../lib/index.js';
import { ruleOf } from '../cases/index.js';
import { waitUntil } from '../support/wait.js';
import { freePort, type RedisServer, startRedisServer, stopRedisServer } from '../support/redis/process.js';

/**
 * What a `RedisStore` finds out of its server at start (`ready`, which the module awaits): a
 * server that refuses scripts for the client fails start with a message naming the cause, one
 * whose `EVAL` is renamed away still decides (by the loaded scripts and functions), a server
 * that is down lets the app start, and the first decision after start comes within `timeout`
 * from a server that had none of the store's calls before: start waited for them.
 */

/** A user of the test's server whose ACL leaves out `@scripting`, as managed services offer. */
const NO_SCRIPTS_USER = 'rl-no-scripts';
/** The module's timeout in the first-decision test, ms. */
const TIMEOUT = 100;

let server: RedisServer;
let renamed: RedisServer;
let admin: Redis;
let logged: jest.SpiedFunction<Logger['error']>;

beforeAll(async () => {
  [server, renamed] = await Promise.all([startRedisServer(), startRedisServer(['--rename-command', 'EVAL', ''])]);
  admin = new Redis(server.url);
  await admin.acl('SETUSER', NO_SCRIPTS_USER, 'on', 'nopass', '~*', '&*', '+@all', '-@scripting');
});
afterAll(async () => {
  await admin.quit();
  stopRedisServer(server.pid);
  stopRedisServer(renamed.pid);
});
beforeEach(() => {
  logged = jest.spyOn(Logger.prototype, 'error').mockImplementation(() => undefined);
  jest.spyOn(Logger.prototype, 'warn').mockImplementation(() => undefined);
});
afterEach(() => jest.restoreAllMocks());

/** A Nest application context with the module on `options`, started (its `init` run). */
async function startModule(options: Parameters<typeof RateLimitModule.forRoot>[0]) {
  @Module({ imports: [RateLimitModule.forRoot(options)] })
  class AppModule {}
  const moduleRef = await Test.createTestingModule({ imports: [AppModule] }).compile();
  const app = moduleRef.createNestApplication({ logger: false });
  await app.init();
  return app;
}

/** One decision of a fresh identity, 5 a burst: its only decision. */
const decide = async (limiter: RateLimiterService) =>
  (await limiter.consume(`ip:${randomUUID()}`, { name: 'first', rps: 1, burst: 5 }))[0];

describe('a server that refuses scripts for the client (ACL without @scripting)', () => {
  const url = () => `redis://${NO_SCRIPTS_USER}@127.0.0.1:${server.port}`;

  it('fails start naming the refusal, not TIME, and closes the client it made', async () => {
    const connectionName = `rl-no-scripts-${randomUUID().slice(0, 8)}`;
    const start = startModule({ redis: { port: server.port, username: NO_SCRIPTS_USER, connectionName } });
    await expect(start).rejects.toThrow(
      `Redis refuses to run scripts for this client ("NOPERM this user has no permissions to run the 'evalsha' command")`,
    );
    await expect(start).rejects.toThrow('ACL SETUSER <user> +@scripting');
    const connected = ((await admin.client('LIST')) as string).includes(connectionName);
    expect(connected).toBe(false);
  });

  it('rejects RedisStore.ready with it; found after start, it is logged once', async () => {
    const client = new Redis(url());
    try {
      const store = new RedisStore({ client });
      await expect(store.ready()).rejects.toThrow('Redis refuses to run scripts for this client');
      expect(logged).not.toHaveBeenCalled();
      await store.close();
      const lazy = new Redis(url(), { lazyConnect: true });
      const late = new RedisStore({ client: lazy });
      // a lazyConnect client is left alone at start: what its first call finds is logged
      await late.ready();
      const request = { key: `k{${randomUUID()}}`, policy: 'p', rule: ruleOf('token_bucket', 1, 1), cost: 1 };
      await expect(late.peek([request])).rejects.toThrow('NOPERM');
      await waitUntil('the refusal logged', 2_000, async () => (logged.mock.calls.length > 0 ? '' : 'nothing logged'));
      await expect(late.ready()).rejects.toThrow('Redis refuses to run scripts for this client');
      expect(logged.mock.calls.map(([message]) => String(message))).toEqual([
        expect.stringContaining('Redis refuses to run scripts for this client ("NOPERM'),
      ]);
      await late.close();
      lazy.disconnect();
    } finally {
      client.disconnect();
    }
  });
});

it('a server whose EVAL is renamed away starts, and decides on Redis TIME by the loaded calls', async () => {
  const warned = jest.spyOn(Logger.prototype, 'warn');
  const app = await startModule({ redis: `redis://127.0.0.1:${renamed.port}`, failMode: 'closed' });
  try {
    const limiter = app.get(RateLimiterService);
    const decisions = await Promise.all(Array.from({ length: 6 }, () => decide(limiter)));
    expect(decisions.map((d) => d.allowed)).toEqual([true, true, true, true, true, true]);
    expect(warned.mock.calls.map(([message]) => String(message))).not.toContainEqual(expect.stringContaining('TIME'));
    expect(logged).not.toHaveBeenCalled();
  } finally {
    await app.close();
  }
});

it('a server that is down lets the app start, within the wait for it', async () => {
  const port = await freePort();
  const started = performance.now();
  const app = await startModule({ redis: `redis://127.0.0.1:${port}`, failMode: 'closed' });
  try {
    expect(performance.now() - started).toBeLessThan(10_000);
    await expect(decide(app.get(RateLimiterService))).rejects.toMatchObject({ name: 'RateLimitStoreError' });
  } finally {
    await app.close();
  }
});

it(`the first decision after start, on a server that had none of the calls, is Redis's within the ${TIMEOUT} ms timeout`, async () => {
  await admin.script('FLUSH');
  await admin.function('FLUSH');
  const app = await startModule({ redis: server.url, failMode: 'closed', timeout: TIMEOUT });
  try {
    const limiter = app.get(RateLimiterService);
    // failMode 'closed': a decision that is not Redis's rejects
    const [first, second] = await Promise.all([decide(limiter), decide(limiter)]);
    expect([first.allowed, second.allowed]).toEqual([true, true]);
    expect(first.remaining).toBe(4);
  } finally {
    await app.close();
  }
});
