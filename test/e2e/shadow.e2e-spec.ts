import { randomUUID } from 'node:crypto';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { jest } from '@jest/globals';
import { Controller, Get, Logger, Module } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { RateLimit, RateLimitModule } from '../../lib/index.js';
import { connectTestRedis } from '../support/redis/test-redis.js';
import { ADAPTERS, read, startApp, type TestApp } from '../support/app.js';

@Controller('search')
class SearchController {
  @RateLimit({ name: 'search', rps: 0.001, burst: 10, key: 'api-key' })
  @Get()
  search() {
    return { results: [] };
  }
}

let redis: Redis;
beforeAll(async () => {
  redis = await connectTestRedis();
});
afterAll(async () => {
  await redis.quit();
});

describe.each(ADAPTERS)('shadow mode on %s, paired with enforce mode on the same traffic', (adapter) => {
  const apps: TestApp[] = [];
  afterAll(() => Promise.all(apps.map((http) => http.close())));

  async function start(mode: 'enforce' | 'shadow'): Promise<TestApp> {
    @Module({
      // the two apps are compared decision by decision, so both take Redis's: a call a loaded
      // machine holds up past the default 100 ms would be failMode's in one app only (it answers
      // without headers; what `timeout` bounds is tested in store-timing.spec.ts)
      imports: [RateLimitModule.forRoot({ redis, prefix: `rl-${mode}-${randomUUID()}:`, mode, timeout: 2_000 })],
      controllers: [SearchController],
    })
    class AppModule {}
    const http = await startApp(AppModule, adapter);
    apps.push(http);
    return http;
  }

  it('blocks nothing, sends the same headers, and logs one would-block per request enforce mode blocks', async () => {
    const [enforce, shadow] = await Promise.all([start('enforce'), start('shadow')]);
    const warn = jest.spyOn(Logger.prototype, 'warn').mockImplementation(() => undefined);
    const storeErrors: unknown[] = [];
    const onStoreError = (message: unknown) => void storeErrors.push(message);
    subscribe('nestjs-ratelimit:store-error', onStoreError);
    try {
      // the same traffic to both: 3 clients, 8, 12 and 25 requests at once
      const traffic = [8, 12, 25].flatMap((n, client) => Array.from({ length: n }, () => `client-${client}`));
      const send = (http: TestApp) =>
        Promise.all(traffic.map((apiKey) => http.get('/search', { 'x-api-key': apiKey }).then(read)));
      const enforced = await send(enforce);
      const shadowed = await send(shadow);
      const blocked = enforced.filter((r) => r.status === 429).length;
      const wouldBlock = warn.mock.calls.filter(([message]) =>
        String(message).startsWith('Shadow mode: policy "search"'),
      ).length;
      expect(storeErrors).toEqual([]);
      console.log(
        `${adapter}: ${traffic.length} requests, enforce blocked ${blocked}, shadow blocked ${shadowed.filter((r) => r.status !== 200).length}, shadow would-block ${wouldBlock}`,
      );
      expect(blocked).toBe(2 + 15); // 12 - 10 and 25 - 10
      expect(shadowed.map((r) => r.status)).toEqual(traffic.map(() => 200));
      expect(wouldBlock).toBe(blocked);
      // the same decisions, so the same remaining quota in the headers
      const remaining = (responses: typeof enforced) => responses.map((r) => r.headers['x-ratelimit-remaining']).sort();
      expect(remaining(shadowed)).toEqual(remaining(enforced));
      expect(warn.mock.calls[0][0]).toMatch(
        /^Shadow mode: policy "search" would refuse a request to SearchController\.search \(retry after \d+ s\)$/,
      );
    } finally {
      unsubscribe('nestjs-ratelimit:store-error', onStoreError);
      warn.mockRestore();
    }
  });
});
