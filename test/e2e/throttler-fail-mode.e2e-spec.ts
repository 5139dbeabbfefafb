/**
 * `RateLimitThrottlerStorage`'s `failMode` when Redis is gone, under the real @nestjs/throttler
 * (`storage: new RateLimitThrottlerStorage({ redis, failMode, timeout })`) and under ours
 * (`ThrottlerModule.forRoot(options, { redis, failMode, timeout })`): a redis-server of the test's
 * own serves the first request, then is killed. `open` admits the next request; `closed` refuses
 * it with a 503, within the timeout (plus slack for a busy machine), never with a 500.
 */
import { Controller, type DynamicModule, Get, Module } from '@nestjs/common';
import { APP_GUARD } from '@nestjs/core';
import { Redis } from 'ioredis';
import { read, startApp, type TestApp } from '../support/app.js';
import { type RedisServer, startRedisServer, stopRedisServer } from '../support/redis/process.js';
import { type ThrottlerApi, loadNt, loadOurs, sleep } from '../support/throttler/implementations.js';

const TIMEOUT = 200;

describe.each(['@nestjs/throttler with RateLimitThrottlerStorage', 'nestjs-ratelimit/throttler'] as const)(
  '%s: failMode when Redis is gone',
  (implementation) => {
    let server: RedisServer;
    let client: Redis;
    const apps: TestApp[] = [];

    beforeAll(async () => {
      server = await startRedisServer();
      client = new Redis(server.url, { enableOfflineQueue: false, maxRetriesPerRequest: 0, lazyConnect: true });
      client.on('error', () => {});
      await client.connect();
    });
    afterAll(async () => {
      await Promise.all(apps.map((app) => app.close()));
      client.disconnect();
      stopRedisServer(server.pid);
    });

    async function start(failMode: 'open' | 'closed'): Promise<TestApp> {
      const ours = await loadOurs();
      const engine = { redis: client, prefix: `nt-fail-${failMode}:`, failMode, timeout: TIMEOUT };
      let api: ThrottlerApi;
      let throttlerModule;
      if (implementation === 'nestjs-ratelimit/throttler') {
        api = ours;
        throttlerModule = (ours.ThrottlerModule.forRoot as unknown as (o: unknown, e: unknown) => DynamicModule)(
          [{ ttl: 60_000, limit: 5 }],
          engine,
        );
      } else {
        api = await loadNt();
        throttlerModule = api.ThrottlerModule.forRoot({
          throttlers: [{ ttl: 60_000, limit: 5 }],
          storage: new ours.RateLimitThrottlerStorage(engine),
        });
      }
      @Controller('pay')
      class PayController {
        @Get()
        pay() {
          return { paid: true };
        }
      }
      @Module({
        imports: [throttlerModule],
        controllers: [PayController],
        providers: [{ provide: APP_GUARD, useClass: api.ThrottlerGuard }],
      })
      class AppModule {}
      const app = await startApp(AppModule, 'express');
      apps.push(app);
      return app;
    }

    it('open admits, closed answers 503, each within the timeout', async () => {
      const open = await start('open');
      const closed = await start('closed');
      expect((await open.get('/pay')).status).toBe(200);
      expect((await closed.get('/pay')).status).toBe(200);

      stopRedisServer(server.pid);
      await sleep(200); // let the client see the connection drop

      for (const [app, status] of [
        [open, 200],
        [closed, 503],
      ] as const) {
        const started = performance.now();
        const response = await read(await app.get('/pay'));
        const ms = performance.now() - started;
        expect({ status: response.status, body: response.body as unknown }).toEqual({
          status,
          body: status === 200 ? { paid: true } : (expect.objectContaining({ statusCode: 503 }) as unknown),
        });
        expect(ms).toBeLessThan(TIMEOUT + 900);
      }
    });
  },
);
