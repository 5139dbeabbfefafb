import { randomUUID } from 'node:crypto';
import { Controller, type ExecutionContext, Get, Module } from '@nestjs/common';
import { type FailMode, MemoryStore, RateLimit, RateLimitModule } from '../../lib/index.js';
import { ADAPTERS, read, startApp, type TestApp } from '../support/app.js';

/**
 * Key and tier functions that answer with a promise, over HTTP on both adapters: the promise is
 * awaited (a tenant looked up per request keys its own bucket), and bounded by the module's
 * `timeout`: a key past it gets `failMode`'s answer, a tier past it the policy's `defaultTier`.
 */

/** The module's `timeout`, ms: only the lookups that never answer reach it. */
const TIMEOUT = 50;

/** A lookup of the request's tenant, answered on a later turn of the event loop (as a cache or database would). */
const tenantOf = (context: ExecutionContext): Promise<string | undefined> =>
  new Promise((resolve) =>
    setImmediate(() =>
      resolve(context.switchToHttp().getRequest<{ headers: Record<string, string | undefined> }>().headers['x-tenant']),
    ),
  );

/** A lookup that never answers. */
const hung = (): Promise<string> => new Promise(() => undefined);

@Controller('api')
class ApiController {
  @RateLimit({ name: 'tenant', limit: 1, window: '1h', key: [tenantOf, 'ip'] })
  @Get('tenant')
  tenant() {
    return { ok: true };
  }

  @RateLimit({ name: 'hung-key', limit: 1, window: '1h', key: hung })
  @Get('hung-key')
  hungKey() {
    return { ok: true };
  }

  @RateLimit({
    name: 'plan',
    key: 'header:x-tenant',
    tiers: { free: { limit: 1, window: '1h' }, pro: { limit: 3, window: '1h' } },
    tier: hung,
    defaultTier: 'free',
  })
  @Get('hung-tier')
  hungTier() {
    return { ok: true };
  }
}

describe.each(ADAPTERS)('key and tier functions that answer with a promise, %s', (adapter) => {
  const apps: TestApp[] = [];
  afterAll(() => Promise.all(apps.map((app) => app.close())));

  async function start(failMode: FailMode): Promise<TestApp> {
    @Module({
      imports: [RateLimitModule.forRoot({ store: new MemoryStore(), timeout: TIMEOUT, failMode })],
      controllers: [ApiController],
    })
    class AppModule {}
    const app = await startApp(AppModule, adapter);
    apps.push(app);
    return app;
  }

  it('keys each request by what the promise names: one bucket per tenant', async () => {
    const http = await start('open');
    const [acme, globex] = [randomUUID(), randomUUID()];
    const statuses = [];
    for (const tenant of [acme, acme, globex])
      statuses.push((await http.get('/api/tenant', { 'x-tenant': tenant })).status);
    expect(statuses).toEqual([200, 429, 200]);
  });

  it.each([
    ['open', 200],
    ['closed', 503],
  ] as const)(
    "answers a key that does not answer within timeout as failMode '%s' says (%i)",
    async (failMode, status) => {
      const http = await start(failMode);
      const started = performance.now();
      const response = await read(await http.get('/api/hung-key'));
      expect(performance.now() - started).toBeGreaterThanOrEqual(TIMEOUT);
      expect(response.status).toBe(status);
      if (failMode === 'closed') expect(response.headers['retry-after']).toBe('1');
      expect(response.headers['ratelimit-policy']).toBeUndefined();
    },
  );

  it('limits by the defaultTier when the tier does not answer within timeout', async () => {
    const http = await start('open');
    const tenant = { 'x-tenant': randomUUID() };
    const first = await read(await http.get('/api/hung-tier', tenant));
    expect(first.status).toBe(200);
    expect(first.headers['ratelimit-policy']).toBe('"plan";q=1;w=3600');
    expect((await http.get('/api/hung-tier', tenant)).status).toBe(429);
  });
});
