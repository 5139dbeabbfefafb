import { randomUUID } from 'node:crypto';
import { Controller, Get, Module } from '@nestjs/common';
import { Redis } from 'ioredis';
import { RateLimit, RateLimitModule, type RateLimitModuleOptions } from '../../lib/index.js';
import { type RedisServer, startRedisServer, stopRedisServer } from '../support/redis/process.js';
import { ADAPTERS, read, startApp, type TestApp } from '../support/app.js';
import { RunQueueWait } from '../support/run-queue.js';

@Controller('pay')
class PayController {
  @RateLimit({ rps: 0.001, burst: 2, key: 'api-key' })
  @Get()
  pay() {
    return { paid: true };
  }
}

const TIMEOUT = 100;

const runQueue = new RunQueueWait();
afterAll(() => runQueue.close());

/**
 * Sends one request and measures how long it took, ms, less the time the OS kept this process's
 * thread (the app's and the client's) waiting for a CPU meanwhile: not the app's time.
 */
async function timed(http: TestApp, apiKey: string) {
  const started = performance.now();
  const waited = runQueue.ms();
  const response = await read(await http.get('/pay', { 'x-api-key': apiKey }));
  return { ...response, ms: performance.now() - started - (runQueue.ms() - waited) };
}

describe.each(ADAPTERS)('failMode on %s, against a real redis-server that freezes or dies', (adapter) => {
  let server: RedisServer;
  let client: Redis;
  const apps: TestApp[] = [];

  beforeAll(async () => {
    server = await startRedisServer();
    client = new Redis(server.url, { enableOfflineQueue: false, maxRetriesPerRequest: 0, lazyConnect: true });
    await client.connect();
  });
  afterAll(async () => {
    await Promise.all(apps.map((http) => http.close()));
    client.disconnect();
    stopRedisServer(server.pid);
  });

  async function start(options: RateLimitModuleOptions): Promise<TestApp> {
    @Module({ imports: [RateLimitModule.forRoot({ timeout: TIMEOUT, ...options })], controllers: [PayController] })
    class AppModule {}
    const http = await startApp(AppModule, adapter);
    apps.push(http);
    return http;
  }

  it('decides within the timeout while Redis is frozen: open lets through, closed answers 503, local limits in memory', async () => {
    const prefix = `rl-fail-${randomUUID()}:`;
    const open = await start({ redis: client, prefix, failMode: 'open' });
    const closed = await start({ redis: client, prefix, failMode: 'closed' });
    const local = await start({ redis: client, prefix, failMode: 'local' });
    const apiKey = `key-${randomUUID()}`;
    expect((await timed(open, apiKey)).status).toBe(200); // Redis answers: 1 of 2 tokens left

    process.kill(server.pid, 'SIGSTOP');
    try {
      const results = {
        open: await timed(open, apiKey),
        closed: await timed(closed, apiKey),
        local: [await timed(local, apiKey), await timed(local, apiKey), await timed(local, apiKey)],
      };
      console.log(
        `${adapter}, Redis frozen, timeout ${TIMEOUT} ms: open ${results.open.ms.toFixed(0)} ms, ` +
          `closed ${results.closed.ms.toFixed(0)} ms, local ${results.local.map((r) => r.ms.toFixed(0)).join('/')} ms`,
      );
      expect(results.open.status).toBe(200);
      expect(results.closed.status).toBe(503);
      expect(results.closed.headers['retry-after']).toBe('1');
      expect(results.closed.body).toEqual({
        statusCode: 503,
        error: 'Service Unavailable',
        message: 'Rate limiter unavailable. Try again later.',
      });
      expect(results.local.map((r) => r.status)).toEqual([200, 200, 429]);
      // bounded by the timeout, not by the freeze (which lasts until the finally below); the margin
      // is for a loaded 2-core machine, where a fresh app's first request took up to 513 ms, less
      // the run-queue wait
      for (const { ms } of [results.open, results.closed, ...results.local]) expect(ms).toBeLessThan(TIMEOUT + 900);
    } finally {
      process.kill(server.pid, 'SIGCONT');
    }
  });

  it('fails open at once when the module-made client cannot reach Redis', async () => {
    const dead = await startRedisServer();
    const http = await start({ redis: dead.url, failMode: 'open' });
    expect((await timed(http, `key-${randomUUID()}`)).status).toBe(200);
    stopRedisServer(dead.pid);
    await new Promise((resolve) => setTimeout(resolve, 200)); // let the client see the connection drop
    const result = await timed(http, `key-${randomUUID()}`);
    console.log(`${adapter}, Redis gone: answered ${result.status} in ${result.ms.toFixed(0)} ms`);
    expect(result.status).toBe(200);
    expect(result.ms).toBeLessThan(TIMEOUT + 400);
  });
});
