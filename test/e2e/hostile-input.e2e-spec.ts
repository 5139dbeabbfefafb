import { randomUUID } from 'node:crypto';
import { Controller, Get, Module } from '@nestjs/common';
import fc from 'fast-check';
import type { Redis } from 'ioredis';
import { RateLimit, RateLimitModule, RedisStore } from '../../lib/index.js';
import { connectTestRedis, ttlsUnder } from '../redis/test-redis.js';
import { ADAPTERS, startApp, type TestApp } from './app.js';

@Controller('hostile')
class HostileController {
  @RateLimit([
    { name: 'by-key', rps: 1000, burst: 1000, key: ['api-key', 'header:x-tenant'], cost: 'header:x-weight' },
    { name: 'by-ip', rps: 1000, burst: 1000, key: 'ip', cost: 'query:w' },
  ])
  @Get()
  get() {
    return { ok: true };
  }
}

/**
 * A header value fetch can send: visible Latin-1 and inner spaces, up to 3 KiB, so that four of
 * them stay within Node's default 16 KiB limit on a request's headers.
 */
const headerValue = fc
  .oneof(
    fc.string({ unit: fc.integer({ min: 0x21, max: 0x7e }).map((c) => String.fromCharCode(c)), maxLength: 64 }),
    fc.string({ unit: fc.integer({ min: 0x20, max: 0xff }).filter((c) => c !== 0x7f).map((c) => String.fromCharCode(c)), maxLength: 3 * 1024 }),
    fc.constantFrom('-1', '0', '1e400', 'NaN', '{x}', 'a:b{c}', '::ffff:1.2.3.4', '1.1.1.1, 2.2.2.2', '%00', '__proto__'),
  )
  .map((value) => value.trim());

let redis: Redis;
beforeAll(async () => {
  redis = await connectTestRedis();
});
afterAll(async () => {
  await redis.quit();
});

describe.each(ADAPTERS)('hostile input on %s', (adapter) => {
  let http: TestApp;
  const prefix = `rl-hostile-${randomUUID()}:`;
  beforeAll(async () => {
    @Module({ imports: [RateLimitModule.forRoot({ store: new RedisStore({ client: redis }), prefix })], controllers: [HostileController] })
    class AppModule {}
    http = await startApp(AppModule, adapter);
  });
  afterAll(() => http.close());

  it('any API key, tenant, cost header, cost query or X-Forwarded-For gets 200 or 429, never a 500', async () => {
    await fc.assert(
      fc.asyncProperty(headerValue, headerValue, headerValue, headerValue, fc.string({ maxLength: 512 }), async (apiKey, tenant, weight, forwarded, w) => {
        const headers: Record<string, string> = { 'x-tenant': tenant, 'x-weight': weight, 'x-forwarded-for': forwarded };
        if (apiKey) headers['x-api-key'] = apiKey;
        const response = await fetch(`${http.url}/hostile?w=${encodeURIComponent(w)}`, { headers });
        await response.arrayBuffer();
        expect([200, 429]).toContain(response.status);
      }),
      { numRuns: 200 },
    );
    for (const key of (await ttlsUnder(redis, prefix)).keys()) expect(key.length).toBeLessThanOrEqual(100);
  });
});
