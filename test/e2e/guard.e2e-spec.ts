import { randomUUID } from 'node:crypto';
import {
  type ArgumentsHost,
  Catch,
  Controller,
  type ExceptionFilter,
  Get,
  HttpException,
  Injectable,
  Module,
  UseGuards,
} from '@nestjs/common';
import { APP_FILTER, HttpAdapterHost } from '@nestjs/core';
import type { Redis } from 'ioredis';
import {
  MemoryStore,
  RateLimit,
  RateLimitGuard,
  RateLimitModule,
  type RateLimitModuleOptions,
  RedisStore,
  SkipRateLimit,
} from '../../lib/index.js';
import { connectTestRedis, ttlsUnder } from '../support/redis/test-redis.js';
import { ADAPTERS, type AdapterName, read, startApp, type TestApp } from '../support/app.js';
import { CASE_EPOCH } from '../cases/cases.js';

@Controller('widgets')
class WidgetsController {
  @RateLimit({ rps: 10, burst: 50, key: 'api-key' })
  @Get()
  list() {
    return { widgets: [] };
  }

  @RateLimit({ name: 'weighted', rps: 1, burst: 10, cost: 'header:x-weight', defaultCost: 2, key: 'api-key' })
  @Get('weighted')
  weighted() {
    return { ok: true };
  }

  @RateLimit({ rps: 1, burst: 3, key: 'ip' })
  @Get('by-ip')
  byIp() {
    return { ok: true };
  }

  @RateLimit([
    { name: 'per-key', rps: 1, burst: 2, key: 'api-key' },
    { name: 'per-ip', rps: 100, burst: 1000, key: 'ip' },
  ])
  @Get('two-policies')
  twoPolicies() {
    return { ok: true };
  }

  @RateLimit([
    { name: 'frees-soon', rps: 5, burst: 2, key: 'api-key' },
    { name: 'frees-late', rps: 0.1, burst: 2, key: 'api-key' },
  ])
  @Get('both-refuse')
  bothRefuse() {
    return { ok: true };
  }

  @Get('plain')
  plain() {
    return { ok: true };
  }

  @SkipRateLimit()
  @Get('health')
  health() {
    return { status: 'ok' };
  }

  @SkipRateLimit('global')
  @RateLimit({ rps: 1, burst: 5, key: 'api-key' })
  @Get('own-only')
  ownOnly() {
    return { ok: true };
  }
}

/** A fixed instant for tests whose headers are exact. */
/** A pinned clock, ahead of the real one: Redis expires keys on its own clock (see CASE_EPOCH). */
const T0 = CASE_EPOCH;

let redis: Redis;
beforeAll(async () => {
  redis = await connectTestRedis();
});
afterAll(async () => {
  await redis.quit();
});

async function appWith(
  adapter: AdapterName,
  options: RateLimitModuleOptions,
  extra: { providers?: any[] } = {},
): Promise<TestApp> {
  @Module({
    imports: [RateLimitModule.forRoot(options)],
    controllers: [WidgetsController],
    providers: extra.providers ?? [],
  })
  class AppModule {}
  return startApp(AppModule, adapter);
}

const key = () => `key-${randomUUID()}`;

/** An answer as `read` gives it, its body a JSON object (the routes here answer nothing else). */
interface Answer {
  status: number;
  headers: Record<string, string>;
  body: Record<string, unknown>;
}

/** `read`, for the routes here. */
const readAnswer = (response: Response): Promise<Answer> => read(response);

describe.each(ADAPTERS)('RateLimitGuard on %s', (adapter) => {
  const apps: TestApp[] = [];
  const start = async (...args: Parameters<typeof appWith> extends [any, ...infer R] ? R : never) => {
    const http = await appWith(adapter, ...args);
    apps.push(http);
    return http;
  };
  afterAll(() => Promise.all(apps.map((http) => http.close())));

  it('sends exact headers on an allowed response, every family', async () => {
    const http = await start({
      store: new MemoryStore({ clock: () => T0 }),
      headers: ['ietf', 'x-ratelimit', 'legacy'],
    });
    const { status, headers } = await read(await http.get('/widgets', { 'x-api-key': key() }));
    expect(status).toBe(200);
    expect(headers).toMatchObject({
      'ratelimit-policy': '"WidgetsController.list";q=50;w=5',
      ratelimit: '"WidgetsController.list";r=49;t=1',
      'x-ratelimit-limit': '50',
      'x-ratelimit-remaining': '49',
      'ratelimit-limit': '50',
      'ratelimit-remaining': '49',
      'ratelimit-reset': '1',
    });
    // full again 0.1 s later, rounded up to a whole second, on the store's clock (T0 is a whole second)
    expect(headers['x-ratelimit-reset']).toBe(String(T0 / 1000 + 1));
    expect(headers['retry-after']).toBeUndefined();
  });

  it('describes every policy in RateLimit and the one closest to refusing in X-RateLimit-*', async () => {
    const http = await start({ store: new MemoryStore({ clock: () => T0 }) });
    const { headers } = await read(await http.get('/widgets/two-policies', { 'x-api-key': key() }));
    expect(headers['ratelimit-policy']).toBe('"per-key";q=2;w=2, "per-ip";q=1000;w=10');
    expect(headers.ratelimit).toBe('"per-key";r=1;t=1, "per-ip";r=999;t=1');
    expect(headers['x-ratelimit-limit']).toBe('2');
    expect(headers['x-ratelimit-remaining']).toBe('1');
  });

  it('names the policy that frees up last everywhere when two refuse: X-RateLimit-*, legacy, Retry-After and body agree', async () => {
    const http = await start({
      store: new MemoryStore({ clock: () => T0 }),
      headers: ['ietf', 'x-ratelimit', 'legacy'],
    });
    const client = { 'x-api-key': key() };
    for (let i = 0; i < 2; i++) expect((await http.get('/widgets/both-refuse', client)).status).toBe(200);
    const { status, headers, body } = await readAnswer(await http.get('/widgets/both-refuse', client));
    // frees-soon takes 1 s to admit again and 1 s to refill; frees-late 10 s and 20 s
    expect(status).toBe(429);
    expect(body).toMatchObject({ policy: 'frees-late', retryAfter: 10 });
    expect(headers['retry-after']).toBe('10');
    expect(headers.ratelimit).toBe('"frees-soon";r=0;t=1, "frees-late";r=0;t=10');
    expect(headers['x-ratelimit-remaining']).toBe('0');
    expect(headers['x-ratelimit-reset']).toBe(String(T0 / 1000 + 20));
    expect(headers['ratelimit-reset']).toBe('10');
  });

  it('sends no rate-limit header with headers: false, but still Retry-After on a 429', async () => {
    const http = await start({ store: new MemoryStore({ clock: () => T0 }), headers: false });
    const apiKey = key();
    const ok = await read(await http.get('/widgets/two-policies', { 'x-api-key': apiKey }));
    expect(Object.keys(ok.headers).filter((h) => h.includes('ratelimit'))).toEqual([]);
    await http.get('/widgets/two-policies', { 'x-api-key': apiKey });
    const refused = await read(await http.get('/widgets/two-policies', { 'x-api-key': apiKey }));
    expect(refused.status).toBe(429);
    expect(refused.headers['retry-after']).toBe('1');
  });

  it('@SkipRateLimit() exempts a route from a module policy; @SkipRateLimit(name) only from that one', async () => {
    const http = await start({ policies: [{ name: 'global', rps: 0.001, burst: 1, key: 'api-key' }] });
    const apiKey = key();
    for (let i = 0; i < 5; i++) {
      const health = await read(await http.get('/widgets/health', { 'x-api-key': apiKey }));
      expect(health.status).toBe(200);
      expect(health.headers.ratelimit).toBeUndefined();
    }
    expect((await http.get('/widgets/plain', { 'x-api-key': apiKey })).status).toBe(200);
    const refused = await readAnswer(await http.get('/widgets/plain', { 'x-api-key': apiKey }));
    expect(refused.status).toBe(429);
    expect(refused.body.policy).toBe('global');
    // the module policy's bucket is shared across routes: spent above, refused here too
    expect((await http.get('/widgets', { 'x-api-key': apiKey })).status).toBe(429);
    const own = await read(await http.get('/widgets/own-only', { 'x-api-key': apiKey }));
    expect(own.status).toBe(200);
    expect(own.headers['ratelimit-policy']).toBe('"WidgetsController.ownOnly";q=5;w=5');
  });

  it('gives two API keys separate buckets', async () => {
    const http = await start({ store: new MemoryStore({ clock: () => T0 }) });
    const [a, b] = [key(), key()];
    for (let i = 0; i < 50; i++) expect((await http.get('/widgets', { 'x-api-key': a })).status).toBe(200);
    expect((await http.get('/widgets', { 'x-api-key': a })).status).toBe(429);
    const other = await read(await http.get('/widgets', { 'x-api-key': b }));
    expect(other.status).toBe(200);
    expect(other.headers['x-ratelimit-remaining']).toBe('49');
  });

  it('does not make a bucket per X-Forwarded-For when the app does not trust proxies', async () => {
    const prefix = `rl-e2e-xff-${randomUUID()}:`;
    const http = await start({ store: new RedisStore({ client: redis, clock: () => T0 }), prefix });
    const statuses: number[] = [];
    for (let i = 0; i < 6; i++) {
      const forged = `${1 + (i % 200)}.${i}.${(i * 7) % 255}.${(i * 13) % 255}`;
      statuses.push((await http.get('/widgets/by-ip', { 'x-forwarded-for': forged })).status);
    }
    expect(statuses).toEqual([200, 200, 200, 429, 429, 429]);
    expect([...(await ttlsUnder(redis, prefix)).keys()]).toHaveLength(1);
  });

  it('takes the cost from a header and falls back to defaultCost for an unusable value', async () => {
    const http = await start({ store: new MemoryStore({ clock: () => T0 }) });
    const remainingAfter = async (weight?: string) => {
      const headers: Record<string, string> = { 'x-api-key': key() };
      if (weight !== undefined) headers['x-weight'] = weight;
      return (await read(await http.get('/widgets/weighted', headers))).headers['x-ratelimit-remaining'];
    };
    expect(await remainingAfter('3')).toBe('7');
    expect(await remainingAfter('2.5')).toBe('7');
    // defaultCost 2: absent, not numeric, not finite, not positive
    for (const unusable of [undefined, '', 'abc', '-1', '0', '1e400', 'Infinity', 'NaN', '0x10', '3; drop', '3 3']) {
      expect({ unusable, remaining: await remainingAfter(unusable) }).toEqual({ unusable, remaining: '8' });
    }
  });

  it('refuses a cost above burst without charge, with no Retry-After', async () => {
    const http = await start({ store: new MemoryStore({ clock: () => T0 }) });
    const apiKey = key();
    const refused = await read(await http.get('/widgets/weighted', { 'x-api-key': apiKey, 'x-weight': '11' }));
    expect(refused.status).toBe(429);
    expect(refused.headers['retry-after']).toBeUndefined();
    expect(refused.body).toEqual({
      statusCode: 429,
      error: 'Too Many Requests',
      message: 'Request cost 11 exceeds the capacity 10 of policy "weighted": it can never be admitted.',
      policy: 'weighted',
      retryAfter: null,
    });
    expect(refused.headers['x-ratelimit-remaining']).toBe('10');
  });

  it('turns an 8 KiB API key into a short store key', async () => {
    const prefix = `rl-e2e-long-${randomUUID()}:`;
    const http = await start({ store: new RedisStore({ client: redis }), prefix });
    const huge = 'k'.repeat(8 * 1024);
    // the whole bucket of 'weighted' (1 token a second): its key lives 10 s, long enough to be
    // looked at on a loaded machine (a token of /widgets comes back, and its key goes, in 100 ms)
    expect((await http.get('/widgets/weighted', { 'x-api-key': huge, 'x-weight': '10' })).status).toBe(200);
    const keys = [...(await ttlsUnder(redis, prefix)).keys()];
    expect(keys).toHaveLength(1);
    expect(keys[0].length).toBeLessThan(100);
    expect(keys[0]).toMatch(new RegExp(`^${prefix}weighted:tb:\\{[A-Za-z0-9_-]{16}\\}$`));
  });

  it("keeps the headers when the app's own exception filter renders the 429", async () => {
    @Catch(HttpException)
    @Injectable()
    class OwnFilter implements ExceptionFilter {
      constructor(private readonly adapterHost: HttpAdapterHost) {}
      catch(exception: HttpException, host: ArgumentsHost) {
        const response = host.switchToHttp().getResponse<unknown>();
        this.adapterHost.httpAdapter.reply(response, { own: true }, exception.getStatus());
      }
    }
    const http = await start(
      { store: new MemoryStore({ clock: () => T0 }) },
      { providers: [{ provide: APP_FILTER, useClass: OwnFilter }] },
    );
    const apiKey = key();
    await http.get('/widgets/two-policies', { 'x-api-key': apiKey });
    await http.get('/widgets/two-policies', { 'x-api-key': apiKey });
    const refused = await read(await http.get('/widgets/two-policies', { 'x-api-key': apiKey }));
    expect(refused.status).toBe(429);
    expect(refused.body).toEqual({ own: true });
    expect(refused.headers['retry-after']).toBe('1');
    expect(refused.headers.ratelimit).toBe('"per-key";r=0;t=1, "per-ip";r=998;t=1');
  });

  it('with guard: false limits only routes that use the guard themselves', async () => {
    @Controller('opt-in')
    class OptInController {
      @RateLimit({ rps: 0.001, burst: 1 })
      @Get('free')
      free() {
        return {};
      }

      @UseGuards(RateLimitGuard)
      @RateLimit({ rps: 0.001, burst: 1 })
      @Get('guarded')
      guarded() {
        return {};
      }
    }
    @Module({ imports: [RateLimitModule.forRoot({ guard: false })], controllers: [OptInController] })
    class AppModule {}
    const http = await startApp(AppModule, adapter);
    apps.push(http);
    expect([(await http.get('/opt-in/free')).status, (await http.get('/opt-in/free')).status]).toEqual([200, 200]);
    expect([(await http.get('/opt-in/guarded')).status, (await http.get('/opt-in/guarded')).status]).toEqual([
      200, 429,
    ]);
  });
});
