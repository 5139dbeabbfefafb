/**
 * @nestjs/throttler's README examples, written as an app writes them, with only the import path
 * changed: each runs against the real `@nestjs/throttler` and against `nestjs-ratelimit/throttler`
 * (see `test/support/throttler/implementations.ts`). The full set runs on Express with the memory
 * storage; a representative subset on Fastify, and on Redis (NT with our
 * `RateLimitThrottlerStorage`, ours with `forRoot(options, { redis, prefix })`).
 *
 * Every limit here has a `ttl` of a minute or more, so nothing expires while a test runs; each
 * test uses routes (and so keys) of its own.
 */
import { Controller, type ExecutionContext, Get, Injectable, Module, type Type, UseGuards } from '@nestjs/common';
import { APP_GUARD } from '@nestjs/core';
import type { ThrottlerModuleOptions, ThrottlerOptionsFactory, ThrottlerStorage } from '@nestjs/throttler';
import { type AdapterName, read, startApp, type TestApp } from '../support/app.js';
import { useTestRedis } from '../support/redis/test-redis.js';
import {
  type ImplementationName,
  load,
  type Loaded,
  type ThrottlerStoreName,
} from '../support/throttler/implementations.js';

const redis = useTestRedis();

/** Implementation, adapter, store, and whether the full example set runs there. */
const TARGETS: Array<[ImplementationName, AdapterName, ThrottlerStoreName, 'full' | 'subset']> = [
  ['@nestjs/throttler', 'express', 'memory', 'full'],
  ['nestjs-ratelimit/throttler', 'express', 'memory', 'full'],
  ['@nestjs/throttler', 'fastify', 'memory', 'subset'],
  ['nestjs-ratelimit/throttler', 'fastify', 'memory', 'subset'],
  ['@nestjs/throttler', 'express', 'redis', 'subset'],
  ['nestjs-ratelimit/throttler', 'express', 'redis', 'subset'],
  ['nestjs-ratelimit/throttler', 'fastify', 'redis', 'subset'],
];

/** Statuses of `count` requests in a row. */
async function statuses(app: TestApp, path: string, count: number, headers: Record<string, string> = {}) {
  const seen: number[] = [];
  for (let i = 0; i < count; i++) seen.push((await app.get(path, headers)).status);
  return seen;
}

const TOO_MANY = { statusCode: 429, message: 'ThrottlerException: Too Many Requests' };

describe.each(TARGETS)('%s on %s, %s storage', (implementation, adapter, store, set) => {
  let target: Loaded;
  const apps: TestApp[] = [];

  beforeAll(async () => {
    target = await load(implementation, store, redis);
  });
  afterAll(async () => {
    await Promise.all(apps.splice(0).map((app) => app.close()));
  });

  async function start(module: Type, trustProxy?: string): Promise<TestApp> {
    const app = await startApp(module, adapter, { trustProxy });
    apps.push(app);
    return app;
  }

  /** A test of the full set: registered on the full targets only (the others run the subset). */
  const full = (name: string, test: () => Promise<void>) => {
    if (set === 'full') it(name, test);
  };

  // -------------------------------------------------------------------------------------------
  // "ThrottlerModule": forRoot([{ ttl: 60000, limit: 10 }]) with the guard as APP_GUARD, and
  // "Customization": @Throttle and @SkipThrottle on the default throttler.

  describe('the default throttler, bound globally', () => {
    let app: TestApp;

    beforeAll(async () => {
      const { Throttle, SkipThrottle, ThrottlerGuard } = target.api;

      @Controller('cats')
      class CatsController {
        @Get()
        findAll() {
          return 'cats';
        }

        // Override default configuration for Rate limiting and duration.
        @Throttle({ default: { limit: 3, ttl: 60000 } })
        @Get('custom')
        custom() {
          return 'List users works with custom rate limiting.';
        }

        // `@Throttle()` changes only the fields it lists: the ttl stays the configured one.
        @Throttle({ default: { limit: 5 } })
        @Get('lower')
        lower() {
          return 'lower';
        }

        @SkipThrottle()
        @Get('free')
        free() {
          return 'free';
        }
      }

      @SkipThrottle({ default: true })
      @Controller('users')
      class UsersController {
        // Rate limiting is applied to this route.
        @SkipThrottle({ default: false })
        @Get('dont-skip')
        dontSkip() {
          return 'List users work with Rate limiting.';
        }

        // This route will skip rate limiting.
        @Get('do-skip')
        doSkip() {
          return 'List users work without Rate limiting.';
        }
      }

      @Module({
        imports: [target.forRoot([{ ttl: 60000, limit: 10 }])],
        controllers: [CatsController, UsersController],
        providers: [{ provide: APP_GUARD, useClass: ThrottlerGuard }],
      })
      class AppModule {}

      app = await start(AppModule);
    });

    it('admits 10 requests a minute to a route, then answers 429 with NT body and Retry-After', async () => {
      expect(await statuses(app, '/cats', 10)).toEqual(Array<number>(10).fill(200));
      const refused = await read(await app.get('/cats'));
      expect(refused.status).toBe(429);
      expect(refused.body).toEqual(TOO_MANY);
      expect(Number(refused.headers['retry-after'])).toBeGreaterThan(0);
      expect(Number(refused.headers['retry-after'])).toBeLessThanOrEqual(60);
    });

    it('@Throttle({ default: { limit: 3, ttl: 60000 } }) overrides the configured limit', async () => {
      const first = await read(await app.get('/cats/custom'));
      expect(first.headers['x-ratelimit-limit']).toBe('3');
      expect(first.headers['x-ratelimit-remaining']).toBe('2');
      expect(await statuses(app, '/cats/custom', 3)).toEqual([200, 200, 429]);
    });

    full('@Throttle({ default: { limit: 5 } }) keeps the configured ttl', async () => {
      const first = await read(await app.get('/cats/lower'));
      expect(first.headers['x-ratelimit-limit']).toBe('5');
      expect(Number(first.headers['x-ratelimit-reset'])).toBeGreaterThan(55);
      expect(Number(first.headers['x-ratelimit-reset'])).toBeLessThanOrEqual(60);
      expect(await statuses(app, '/cats/lower', 5)).toEqual([200, 200, 200, 200, 429]);
    });

    it('@SkipThrottle() on a handler: no limit, no headers', async () => {
      expect(await statuses(app, '/cats/free', 12)).toEqual(Array<number>(12).fill(200));
      expect((await app.get('/cats/free')).headers.get('x-ratelimit-limit')).toBeNull();
    });

    it('@SkipThrottle({ default: false }) on a handler limits it inside a class that skips', async () => {
      expect(await statuses(app, '/users/do-skip', 12)).toEqual(Array<number>(12).fill(200));
      expect((await app.get('/users/do-skip')).headers.get('x-ratelimit-limit')).toBeNull();
      expect(await statuses(app, '/users/dont-skip', 11)).toEqual([...Array<number>(10).fill(200), 429]);
    });
  });

  // -------------------------------------------------------------------------------------------
  // "Multiple Throttler Definitions" and "Important note on using decorators with Named Throttlers".

  describe('named throttlers short, medium and long', () => {
    let app: TestApp;

    beforeAll(async () => {
      const { Throttle, SkipThrottle, ThrottlerGuard } = target.api;

      @Controller('named')
      class NamedController {
        @Get()
        findAll() {
          return 'all three';
        }

        @Throttle({ short: { limit: 5, ttl: 1000 }, medium: { limit: 30, ttl: 10000 } })
        @Get('custom')
        custom() {
          return 'Custom limits for specific throttlers';
        }

        // This will NOT skip any named throttlers
        @SkipThrottle()
        @Get('unnamed-skip')
        unnamedSkip() {
          return 'still limited';
        }
      }

      @SkipThrottle({ short: true, medium: true })
      @Controller('named-users')
      class UsersController {
        @Get()
        findAll() {
          return 'long only';
        }
      }

      @Module({
        imports: [
          target.forRoot([
            { name: 'short', ttl: 1000, limit: 3 },
            { name: 'medium', ttl: 10000, limit: 20 },
            { name: 'long', ttl: 60000, limit: 100 },
          ]),
        ],
        controllers: [NamedController, UsersController],
        providers: [{ provide: APP_GUARD, useClass: ThrottlerGuard }],
      })
      class AppModule {}

      app = await start(AppModule);
    });

    it('reports each throttler under headers suffixed with its name', async () => {
      const { headers } = await read(await app.get('/named'));
      expect(headers).toMatchObject({
        'x-ratelimit-limit-short': '3',
        'x-ratelimit-remaining-short': '2',
        'x-ratelimit-limit-medium': '20',
        'x-ratelimit-remaining-medium': '19',
        'x-ratelimit-limit-long': '100',
        'x-ratelimit-remaining-long': '99',
      });
      expect(headers['x-ratelimit-limit']).toBeUndefined();
    });

    it('@Throttle overrides the named throttlers it lists, and only those', async () => {
      const { headers } = await read(await app.get('/named/custom'));
      expect(headers).toMatchObject({
        'x-ratelimit-limit-short': '5',
        'x-ratelimit-limit-medium': '30',
        'x-ratelimit-limit-long': '100',
      });
    });

    it('@SkipThrottle({ short: true, medium: true }) on a class leaves only long', async () => {
      const { headers } = await read(await app.get('/named-users'));
      expect(headers['x-ratelimit-limit-long']).toBe('100');
      expect(headers['x-ratelimit-limit-short']).toBeUndefined();
      expect(headers['x-ratelimit-limit-medium']).toBeUndefined();
    });

    full('@SkipThrottle() without names skips none of the named throttlers', async () => {
      const { headers } = await read(await app.get('/named/unnamed-skip'));
      expect(headers).toMatchObject({
        'x-ratelimit-limit-short': '3',
        'x-ratelimit-limit-medium': '20',
        'x-ratelimit-limit-long': '100',
      });
    });
  });

  // -------------------------------------------------------------------------------------------
  // "Throttling specific routes" and "Proxies": the guard bound with @UseGuards, a subclass with
  // getTracker reading req.ips behind a trusted proxy.

  describe('guards bound per route, and a proxy-aware guard subclass', () => {
    let app: TestApp;

    beforeAll(async () => {
      const { SkipThrottle, ThrottlerGuard } = target.api;

      @Injectable()
      class ThrottlerBehindProxyGuard extends ThrottlerGuard {
        protected override getTracker(req: Record<string, any>): Promise<string> {
          // The client IP is the leftmost IP in req.ips.
          const ips = req.ips as string[];
          const tracker = ips.length > 0 ? ips[0] : (req.ip as string);
          return Promise.resolve(tracker);
        }
      }

      @UseGuards(ThrottlerBehindProxyGuard)
      @Controller('proxied')
      class ProxiedController {
        @Get()
        findAll() {
          return 'proxied';
        }
      }

      @UseGuards(ThrottlerGuard)
      @Controller('reports')
      class ReportsController {
        @Get()
        findAll() {
          return 'reports';
        }

        @SkipThrottle({ default: true })
        @Get('skipped')
        skipped() {
          return 'skipped';
        }
      }

      @Controller('search')
      class SearchController {
        @UseGuards(ThrottlerGuard)
        @Get()
        search() {
          return 'search';
        }

        @Get('unguarded')
        unguarded() {
          return 'no limit';
        }
      }

      @Module({
        imports: [target.forRoot([{ ttl: 60000, limit: 2 }])],
        controllers: [ProxiedController, ReportsController, SearchController],
      })
      class AppModule {}

      app = await start(AppModule, '127.0.0.1');
    });

    // Express's req.ips lists the forwarded clients, furthest first; Fastify's starts with the
    // socket's address (the proxy), so there the README's `req.ips[0]` keys every client alike.
    it(`getTracker override reading req.ips[0]: ${adapter === 'express' ? 'a count per forwarded client' : "the proxy's one count"}`, async () => {
      const from = (ip: string) => ({ 'x-forwarded-for': ip });
      expect(await statuses(app, '/proxied', 3, from('203.0.113.7'))).toEqual([200, 200, 429]);
      const other = await statuses(app, '/proxied', 2, from('203.0.113.8'));
      expect(other).toEqual(adapter === 'express' ? [200, 200] : [429, 429]);
      expect(await statuses(app, '/proxied', 1, from('203.0.113.7'))).toEqual([429]);
    });

    full('@UseGuards(ThrottlerGuard) on a class and on a handler; a route without it has no limit', async () => {
      expect(await statuses(app, '/reports', 3)).toEqual([200, 200, 429]);
      expect(await statuses(app, '/reports/skipped', 3)).toEqual([200, 200, 200]);
      expect(await statuses(app, '/search', 3)).toEqual([200, 200, 429]);
      expect(await statuses(app, '/search/unguarded', 4)).toEqual([200, 200, 200, 200]);
    });
  });

  // -------------------------------------------------------------------------------------------
  // "Configuration": the object form with the options of the second table, and the options of
  // a throttler, function-valued ttl, limit and blockDuration among them.

  describe('the object form: skipIf, ignoreUserAgents, getTracker, generateKey, errorMessage as a function', () => {
    let app: TestApp;

    beforeAll(async () => {
      const { Throttle, ThrottlerGuard } = target.api;
      const header = (context: ExecutionContext, name: string) =>
        context.switchToHttp().getRequest<{ headers: Record<string, string | undefined> }>().headers[name];

      @Controller('object')
      class ObjectController {
        @Get()
        findAll() {
          return 'object';
        }

        // two routes sharing one count through a key of their own
        @Throttle({ default: { generateKey: (_context, tracker, name) => `shared-${name}-${tracker}` } })
        @Get('shared-a')
        sharedA() {
          return 'a';
        }

        @Throttle({ default: { generateKey: (_context, tracker, name) => `shared-${name}-${tracker}` } })
        @Get('shared-b')
        sharedB() {
          return 'b';
        }

        @Throttle({
          default: {
            limit: (context) => (header(context, 'x-plan') === 'pro' ? 4 : 1),
            ttl: async () => 120_000,
            blockDuration: () => 7_000,
          },
        })
        @Get('plans')
        plans() {
          return 'plans';
        }
      }

      const options: ThrottlerModuleOptions = {
        throttlers: [{ ttl: 60000, limit: 2 }],
        skipIf: (context) => header(context, 'x-internal') === 'yes',
        ignoreUserAgents: [/googlebot/i],
        getTracker: (req) => String((req.headers as Record<string, string | undefined>)['x-client'] ?? req.ip),
        errorMessage: (_context, detail) => `slow down: ${detail.totalHits} hits over ${detail.limit}`,
      };

      @Module({
        imports: [target.forRoot(options)],
        controllers: [ObjectController],
        providers: [{ provide: APP_GUARD, useClass: ThrottlerGuard }],
      })
      class AppModule {}

      app = await start(AppModule);
    });

    it('getTracker: a count per tracker; errorMessage as a function replaces the message', async () => {
      const client = { 'x-client': 'alice' };
      expect(await statuses(app, '/object', 2, client)).toEqual([200, 200]);
      const refused = await read(await app.get('/object', client));
      expect(refused.status).toBe(429);
      expect(refused.body).toEqual({ statusCode: 429, message: 'slow down: 3 hits over 2' });
      expect(await statuses(app, '/object', 1, { 'x-client': 'bob' })).toEqual([200]);
    });

    it('skipIf and ignoreUserAgents let requests through uncounted', async () => {
      const client = { 'x-client': 'carol' };
      expect(await statuses(app, '/object', 3, { ...client, 'x-internal': 'yes' })).toEqual([200, 200, 200]);
      const bot = { ...client, 'user-agent': 'Mozilla/5.0 (compatible; Googlebot/2.1)' };
      expect(await statuses(app, '/object', 3, bot)).toEqual([200, 200, 200]);
      // nothing of the above was counted
      expect(await statuses(app, '/object', 3, client)).toEqual([200, 200, 429]);
    });

    full('generateKey from @Throttle: two routes share one count', async () => {
      const client = { 'x-client': 'dave' };
      expect(await statuses(app, '/object/shared-a', 1, client)).toEqual([200]);
      expect(await statuses(app, '/object/shared-b', 2, client)).toEqual([200, 429]);
      expect(await statuses(app, '/object/shared-a', 1, client)).toEqual([429]);
    });

    full('function-valued limit, ttl (async) and blockDuration, read per request', async () => {
      const pro = await read(await app.get('/object/plans', { 'x-client': 'erin', 'x-plan': 'pro' }));
      expect(pro.headers['x-ratelimit-limit']).toBe('4');
      expect(Number(pro.headers['x-ratelimit-reset'])).toBeGreaterThan(115);
      expect(Number(pro.headers['x-ratelimit-reset'])).toBeLessThanOrEqual(120);
      const free = { 'x-client': 'frank' };
      expect((await app.get('/object/plans', free)).headers.get('x-ratelimit-limit')).toBe('1');
      const refused = await read(await app.get('/object/plans', free));
      expect(refused.status).toBe(429);
      // the block's 7 s, not the ttl's 120 s
      expect(Number(refused.headers['retry-after'])).toBeGreaterThan(5);
      expect(Number(refused.headers['retry-after'])).toBeLessThanOrEqual(7);
    });
  });

  // -------------------------------------------------------------------------------------------
  // "Async Configuration": useFactory with inject, useClass, and useExisting.

  describe('forRootAsync', () => {
    /** The README's ConfigService, in miniature. */
    @Injectable()
    class ConfigService {
      private readonly values: Record<string, number> = { THROTTLE_TTL: 60000, THROTTLE_LIMIT: 2 };
      get(key: string): number | undefined {
        return this.values[key];
      }
    }

    @Module({ providers: [ConfigService], exports: [ConfigService] })
    class ConfigModule {}

    /** Starts an app with `throttlerModule` and the guard bound globally, one route `/async`. */
    async function startWith(throttlerModule: ReturnType<Loaded['forRootAsync']>) {
      const { ThrottlerGuard } = target.api;
      @Controller('async')
      class AsyncController {
        @Get()
        findAll() {
          return 'async';
        }
      }
      @Module({
        imports: [throttlerModule],
        controllers: [AsyncController],
        providers: [{ provide: APP_GUARD, useClass: ThrottlerGuard }],
      })
      class AppModule {}
      return start(AppModule);
    }

    it('useFactory with imports and inject', async () => {
      const app = await startWith(
        target.forRootAsync({
          imports: [ConfigModule],
          inject: [ConfigService],
          useFactory: (config: ConfigService) => [
            { ttl: config.get('THROTTLE_TTL')!, limit: config.get('THROTTLE_LIMIT')! },
          ],
        }),
      );
      expect(await statuses(app, '/async', 3)).toEqual([200, 200, 429]);
    });

    /** Implements ThrottlerOptionsFactory with the config, and a string errorMessage. */
    @Injectable()
    class ThrottlerConfigService implements ThrottlerOptionsFactory {
      constructor(private readonly config: ConfigService) {}
      createThrottlerOptions(): ThrottlerModuleOptions {
        return {
          throttlers: [{ ttl: this.config.get('THROTTLE_TTL')!, limit: this.config.get('THROTTLE_LIMIT')! }],
          errorMessage: 'Easy there.',
        };
      }
    }

    full('useClass, with errorMessage as a string', async () => {
      const app = await startWith(target.forRootAsync({ imports: [ConfigModule], useClass: ThrottlerConfigService }));
      expect(await statuses(app, '/async', 2)).toEqual([200, 200]);
      expect((await read(await app.get('/async'))).body).toEqual({ statusCode: 429, message: 'Easy there.' });
    });

    full('useExisting, a factory another module provides', async () => {
      @Module({ imports: [ConfigModule], providers: [ThrottlerConfigService], exports: [ThrottlerConfigService] })
      class ThrottlerConfigModule {}
      const app = await startWith(
        target.forRootAsync({ imports: [ThrottlerConfigModule], useExisting: ThrottlerConfigService }),
      );
      expect(await statuses(app, '/async', 3)).toEqual([200, 200, 429]);
    });
  });

  // -------------------------------------------------------------------------------------------
  // "Storages": a storage of the app's own, given as `storage`; and the time helpers.

  full('a custom storage: the guard counts with it, as NT calls it', async () => {
    const { ThrottlerGuard, seconds, minutes } = target.api;
    const calls: unknown[][] = [];

    /** Counts forever, blocks from the hit over the limit on. */
    class CountingStorage implements ThrottlerStorage {
      private readonly hits = new Map<string, number>();
      async increment(key: string, ttl: number, limit: number, blockDuration: number, throttlerName: string) {
        calls.push([key, ttl, limit, blockDuration, throttlerName]);
        const totalHits = (this.hits.get(key) ?? 0) + 1;
        this.hits.set(key, totalHits);
        const isBlocked = totalHits > limit;
        return {
          totalHits,
          timeToExpire: Math.ceil(ttl / 1000),
          isBlocked,
          timeToBlockExpire: isBlocked ? Math.ceil(blockDuration / 1000) : 0,
        };
      }
    }

    @Controller('stored')
    class StoredController {
      @Get()
      findAll() {
        return 'stored';
      }
    }
    @Module({
      imports: [
        target.forRoot({
          throttlers: [{ ttl: minutes(1), limit: 2, blockDuration: seconds(30) }],
          storage: new CountingStorage(),
        }),
      ],
      controllers: [StoredController],
      providers: [{ provide: APP_GUARD, useClass: ThrottlerGuard }],
    })
    class AppModule {}
    const app = await start(AppModule);

    expect(await statuses(app, '/stored', 2)).toEqual([200, 200]);
    const refused = await read(await app.get('/stored'));
    expect(refused.status).toBe(429);
    expect(refused.headers['retry-after']).toBe('30');
    expect(calls).toHaveLength(3);
    expect(calls[0]).toEqual([expect.stringMatching(/^[0-9a-f]{64}$/), 60_000, 2, 30_000, 'default']);
    expect(new Set(calls.map(([key]) => key)).size).toBe(1);
  });
});
