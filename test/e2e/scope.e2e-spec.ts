/**
 * `scope` over HTTP, on both adapters and both stores: a module-wide and a class-level policy
 * scoped to the client (the default) take one bucket per client across the routes they cover; scoped
 * to the route, one bucket per client per route, so two routes of one client each get the whole
 * limit. Every check uses a client of its own (`x-client`), so no bucket carries over between them.
 */
import { randomUUID } from 'node:crypto';
import { Controller, Get, Module, type Type } from '@nestjs/common';
import type { Redis } from 'ioredis';
import {
  MemoryStore,
  RateLimit,
  RateLimitModule,
  type RateLimitStore,
  RedisStore,
  SkipRateLimit,
} from '../../lib/index.js';
import { ADAPTERS, read, startApp, type TestApp } from '../support/app.js';
import { connectTestRedis } from '../support/redis/test-redis.js';

type Scope = 'client' | 'route';

/** 2 requests an hour per client: nothing comes back while a test runs. */
const LIMIT = { limit: 2, window: '1h', key: 'header:x-client' } as const;

/** An app whose module policy and class policy (each over two routes) have `scope`. */
function appModule(scope: Scope, store: RateLimitStore): Type {
  @Controller('module')
  class ModuleScopedController {
    @Get('a')
    a() {
      return { route: 'a' };
    }

    @Get('b')
    b() {
      return { route: 'b' };
    }
  }

  // only its own policy: the module's is skipped here
  @SkipRateLimit('module')
  @RateLimit({ name: 'per-class', ...LIMIT, scope })
  @Controller('class')
  class ClassScopedController {
    @Get('a')
    a() {
      return { route: 'a' };
    }

    @Get('b')
    b() {
      return { route: 'b' };
    }
  }

  @Module({
    imports: [
      RateLimitModule.forRoot({
        store,
        prefix: `rl-e2e-scope-${randomUUID()}:`,
        policies: [{ name: 'module', ...LIMIT, scope }],
      }),
    ],
    controllers: [ModuleScopedController, ClassScopedController],
  })
  class AppModule {}
  return AppModule;
}

let redis: Redis;
beforeAll(async () => {
  redis = await connectTestRedis();
});
afterAll(async () => {
  await redis.quit();
});

const STORES: Array<[string, () => RateLimitStore]> = [
  ['memory store', () => new MemoryStore()],
  ['Redis store', () => new RedisStore({ client: redis })],
];

describe.each(ADAPTERS)('scope on %s', (adapter) => {
  describe.each(STORES)('with the %s', (_store, makeStore) => {
    const apps = new Map<Scope, TestApp>();
    beforeAll(async () => {
      for (const scope of ['client', 'route'] as const)
        apps.set(scope, await startApp(appModule(scope, makeStore()), adapter));
    });
    afterAll(() => Promise.all([...apps.values()].map((app) => app.close())));

    /** Status, remaining and `RateLimit-Policy` of each path in turn, as one client. */
    async function send(scope: Scope, paths: string[]) {
      const headers = { 'x-client': randomUUID() };
      const seen = [];
      for (const path of paths) {
        const { status, headers: got } = await read(await apps.get(scope)!.get(path, headers));
        seen.push([path, status, Number(got['x-ratelimit-remaining']), got['ratelimit-policy']]);
      }
      return seen;
    }

    it.each(['module', 'class'])('a %s policy scoped to the client: one bucket across its routes', async (level) => {
      const name = level === 'module' ? 'module' : 'per-class';
      const policy = `"${name}";q=2;w=3600`;
      expect(await send('client', [`/${level}/a`, `/${level}/b`, `/${level}/a`, `/${level}/b`])).toEqual([
        [`/${level}/a`, 200, 1, policy],
        [`/${level}/b`, 200, 0, policy],
        [`/${level}/a`, 429, 0, policy],
        [`/${level}/b`, 429, 0, policy],
      ]);
    });

    it.each(['module', 'class'])('a %s policy scoped to the route: a bucket per route', async (level) => {
      const name = level === 'module' ? 'module' : 'per-class';
      const policy = `"${name}";q=2;w=3600`;
      expect(
        await send('route', [`/${level}/a`, `/${level}/a`, `/${level}/a`, `/${level}/b`, `/${level}/b`, `/${level}/b`]),
      ).toEqual([
        [`/${level}/a`, 200, 1, policy],
        [`/${level}/a`, 200, 0, policy],
        [`/${level}/a`, 429, 0, policy],
        // the other route's bucket is untouched: its whole limit
        [`/${level}/b`, 200, 1, policy],
        [`/${level}/b`, 200, 0, policy],
        [`/${level}/b`, 429, 0, policy],
      ]);
    });

    it('keeps the buckets of a route-scoped policy apart per client too', async () => {
      expect((await send('route', ['/module/a', '/module/a'])).map(([, status]) => status)).toEqual([200, 200]);
      expect((await send('route', ['/module/a'])).map(([, status]) => status)).toEqual([200]);
    });
  });
});
