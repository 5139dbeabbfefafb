/**
 * One test per rule of @nestjs/throttler's guard (the section "The guard" of lib/throttler/README.md):
 * headers, the refusal's body, `totalHits` on a refusal, the block and its end, the order the
 * throttlers are evaluated in, how decorators override, and keys per route per tracker. Each runs
 * against the real `@nestjs/throttler` and against `nestjs-ratelimit/throttler`, in memory and on
 * Redis (NT with our `RateLimitThrottlerStorage`), over Express.
 *
 * NT's memory storage reads `Date.now()`, so the tests about time use short windows and real time,
 * and bound what they assert by the times they measure.
 */
import { createHash } from 'node:crypto';
import { Controller, type ExecutionContext, Get, Module, type Type } from '@nestjs/common';
import { APP_GUARD } from '@nestjs/core';
import type { ThrottlerLimitDetail, ThrottlerModuleOptions } from '@nestjs/throttler';
import { read, startApp, type TestApp } from '../support/app.js';
import { useTestRedis } from '../support/redis/test-redis.js';
import {
  IMPLEMENTATIONS,
  load,
  type Loaded,
  sleep,
  type ThrottlerStoreName,
} from '../support/throttler/implementations.js';

const redis = useTestRedis();

const TARGETS = IMPLEMENTATIONS.flatMap((name) =>
  (['memory', 'redis'] as const).map((store) => [name, store] as const),
);

/** The tracker the apps read from `x-client` (each test a client of its own), else the IP. */
const byClientHeader = (req: Record<string, any>): string =>
  String((req.headers as Record<string, string | undefined>)['x-client'] ?? req.ip);

/** The ThrottlerLimitDetail the apps' errorMessage function wrote as a refusal's message. */
const detailOf = (body: unknown) => JSON.parse((body as { message: string }).message) as ThrottlerLimitDetail;

describe.each(TARGETS)('%s, %s storage', (implementation, store: ThrottlerStoreName) => {
  let target: Loaded;
  const apps: TestApp[] = [];

  beforeAll(async () => {
    target = await load(implementation, store, redis);
  });
  afterAll(async () => {
    await Promise.all(apps.splice(0).map((app) => app.close()));
  });

  /** Starts `controllers` under `options`, the guard bound globally. */
  async function start(options: ThrottlerModuleOptions, controllers: Type[]): Promise<TestApp> {
    @Module({
      imports: [target.forRoot(options)],
      controllers,
      providers: [{ provide: APP_GUARD, useClass: target.api.ThrottlerGuard }],
    })
    class AppModule {}
    const app = await startApp(AppModule, 'express');
    apps.push(app);
    return app;
  }

  describe('one default throttler (limit 2 a minute) and the errorMessage function', () => {
    let app: TestApp;

    beforeAll(async () => {
      const { Throttle, SkipThrottle } = target.api;

      @Throttle({ default: { ttl: 20_000 } })
      @Controller('behaviour')
      class BehaviourController {
        @Get('limited')
        limited() {
          return 'limited';
        }

        @Get('other')
        other() {
          return 'other';
        }

        // the handler's limit with the class's ttl
        @Throttle({ default: { limit: 1 } })
        @Get('combined')
        combined() {
          return 'combined';
        }

        @Throttle({ nope: { limit: 1, ttl: 1_000 } })
        @SkipThrottle({ nope: true })
        @Get('unknown')
        unknown() {
          return 'unknown';
        }
      }

      @Controller('plain')
      class PlainController {
        @Get()
        plain() {
          return 'plain';
        }
      }

      app = await start(
        {
          throttlers: [{ ttl: 60_000, limit: 2 }],
          getTracker: byClientHeader,
          // the detail of a refusal, for the test to read
          errorMessage: (_context: ExecutionContext, detail: ThrottlerLimitDetail) => JSON.stringify(detail),
        },
        [BehaviourController, PlainController],
      );
    });

    it('headers: X-RateLimit-Limit, -Remaining = max(0, limit - totalHits), -Reset; no Retry-After when admitted', async () => {
      const first = await read(await app.get('/plain', { 'x-client': 'headers' }));
      const second = await read(await app.get('/plain', { 'x-client': 'headers' }));
      expect([first.status, second.status]).toEqual([200, 200]);
      expect(first.headers).toMatchObject({ 'x-ratelimit-limit': '2', 'x-ratelimit-remaining': '1' });
      expect(second.headers).toMatchObject({ 'x-ratelimit-limit': '2', 'x-ratelimit-remaining': '0' });
      for (const { headers } of [first, second]) {
        expect(headers['retry-after']).toBeUndefined();
        expect(Number(headers['x-ratelimit-reset'])).toBeGreaterThan(55);
        expect(Number(headers['x-ratelimit-reset'])).toBeLessThanOrEqual(60);
      }
    });

    it('refusal: 429, Retry-After only, and the body { statusCode: 429, message } (default message)', async () => {
      // a module without errorMessage
      const { Throttle } = target.api;
      @Controller('refusal')
      class RefusalController {
        @Throttle({ default: { limit: 1 } })
        @Get()
        refusal() {
          return 'refusal';
        }
      }
      const plain = await start([{ ttl: 60_000, limit: 5 }], [RefusalController]);
      expect((await plain.get('/refusal')).status).toBe(200);
      const refused = await read(await plain.get('/refusal'));
      expect(refused.status).toBe(429);
      expect(refused.body).toEqual({ statusCode: 429, message: 'ThrottlerException: Too Many Requests' });
      expect(Number(refused.headers['retry-after'])).toBeGreaterThan(55);
      expect(Number(refused.headers['retry-after'])).toBeLessThanOrEqual(60);
      expect(refused.headers['x-ratelimit-limit']).toBeUndefined();
      expect(refused.headers['x-ratelimit-remaining']).toBeUndefined();
    });

    it('totalHits on a refusal is limit + 1, and stays so while blocked; the detail and the default key', async () => {
      const client = { 'x-client': 'detail' };
      expect((await app.get('/plain', client)).status).toBe(200);
      expect((await app.get('/plain', client)).status).toBe(200);
      const refusals = [await read(await app.get('/plain', client)), await read(await app.get('/plain', client))];
      const key = createHash('sha256').update('PlainController-plain-default-detail').digest('hex');
      for (const refused of refusals) {
        expect(refused.status).toBe(429);
        const detail = detailOf(refused.body);
        expect(detail).toMatchObject({ limit: 2, ttl: 60_000, tracker: 'detail', key, totalHits: 3, isBlocked: true });
        expect(detail.timeToBlockExpire).toBeGreaterThan(55);
        expect(detail.timeToBlockExpire).toBeLessThanOrEqual(60);
      }
    });

    it('X-RateLimit-Reset counts to the window anchored at the first hit', async () => {
      const client = { 'x-client': 'reset' };
      const beforeFirst = performance.now();
      await app.get('/behaviour/other', client);
      const afterFirst = performance.now();
      await sleep(1_100);
      const beforeSecond = performance.now();
      const second = await read(await app.get('/behaviour/other', client));
      const afterSecond = performance.now();
      const reset = Number(second.headers['x-ratelimit-reset']);
      // ceil of (first hit + 20 s - second hit) in seconds, the hits somewhere in their requests
      expect(reset).toBeGreaterThanOrEqual(Math.ceil((20_000 - (afterSecond - beforeFirst)) / 1000));
      expect(reset).toBeLessThanOrEqual(Math.ceil((20_000 - (beforeSecond - afterFirst)) / 1000));
      expect(reset).toBeLessThan(20);
    });

    it('key per route per tracker: another route or another client counts from 0', async () => {
      const alice = { 'x-client': 'alice' };
      const codes = [];
      for (let i = 0; i < 3; i++) codes.push((await app.get('/behaviour/limited', alice)).status);
      expect(codes).toEqual([200, 200, 429]);
      expect((await app.get('/behaviour/other', alice)).status).toBe(200);
      expect((await app.get('/behaviour/limited', { 'x-client': 'bob' })).status).toBe(200);
    });

    it('@Throttle fields are read handler-first then class, each on its own (handler limit, class ttl)', async () => {
      const client = { 'x-client': 'combined' };
      const first = await read(await app.get('/behaviour/combined', client));
      expect(first.headers['x-ratelimit-limit']).toBe('1');
      expect(Number(first.headers['x-ratelimit-reset'])).toBeGreaterThan(15);
      expect(Number(first.headers['x-ratelimit-reset'])).toBeLessThanOrEqual(20);
      const refused = await read(await app.get('/behaviour/combined', client));
      expect(refused.status).toBe(429);
      expect(detailOf(refused.body)).toMatchObject({ limit: 1, ttl: 20_000, totalHits: 2 });
    });

    it('an unknown name in @Throttle or @SkipThrottle is ignored', async () => {
      const client = { 'x-client': 'unknown' };
      const first = await read(await app.get('/behaviour/unknown', client));
      expect(first.headers['x-ratelimit-limit']).toBe('2');
      expect(first.headers['x-ratelimit-limit-nope']).toBeUndefined();
      expect((await app.get('/behaviour/unknown', client)).status).toBe(200);
      expect((await app.get('/behaviour/unknown', client)).status).toBe(429);
    });
  });

  it('headers of a named throttler carry -<name>; Retry-After-<name> on its refusal', async () => {
    @Controller('named')
    class NamedController {
      @Get()
      named() {
        return 'named';
      }
    }
    const app = await start([{ name: 'burst', ttl: 60_000, limit: 1 }], [NamedController]);
    const admitted = await read(await app.get('/named'));
    expect(admitted.headers).toMatchObject({ 'x-ratelimit-limit-burst': '1', 'x-ratelimit-remaining-burst': '0' });
    expect(Number(admitted.headers['x-ratelimit-reset-burst'])).toBeGreaterThan(55);
    expect(admitted.headers['x-ratelimit-limit']).toBeUndefined();
    expect(admitted.headers['retry-after-burst']).toBeUndefined();
    const refused = await read(await app.get('/named'));
    expect(refused.status).toBe(429);
    expect(Number(refused.headers['retry-after-burst'])).toBeGreaterThan(55);
    expect(refused.headers['retry-after']).toBeUndefined();
  });

  describe('evaluation order: throttlers by ttl, the first refusal throws', () => {
    let app: TestApp;

    beforeAll(async () => {
      const { Throttle, SkipThrottle } = target.api;

      @Controller('order')
      class OrderController {
        @Throttle({ fast: { limit: 1 } })
        @Get('fast-tight')
        fastTight() {
          return 'fast refuses';
        }

        @Throttle({ slow: { limit: 1 } })
        @Get('slow-tight')
        slowTight() {
          return 'slow refuses';
        }

        @SkipThrottle({ fast: true })
        @Get('peek-slow')
        peekSlow() {
          return 'slow only';
        }

        @SkipThrottle({ slow: true })
        @Get('peek-fast')
        peekFast() {
          return 'fast only';
        }
      }

      // a key per throttler and client, the same on every route: the peeks see what the others charged
      const generateKey = (_context: ExecutionContext, tracker: string, name: string) => `order-${name}-${tracker}`;
      app = await start(
        {
          // declared slow first: the order is by ttl, not by declaration
          throttlers: [
            { name: 'slow', ttl: 60_000, limit: 10, generateKey },
            { name: 'fast', ttl: 30_000, limit: 10, generateKey },
          ],
          getTracker: byClientHeader,
        },
        [OrderController],
      );
    });

    it('a refusal by the first throttler charges none after it, and sets no headers of theirs', async () => {
      const client = { 'x-client': 'first-refuses' };
      const admitted = await read(await app.get('/order/fast-tight', client));
      expect(admitted.headers).toMatchObject({ 'x-ratelimit-remaining-fast': '0', 'x-ratelimit-remaining-slow': '9' });
      for (let i = 0; i < 2; i++) {
        const refused = await read(await app.get('/order/fast-tight', client));
        expect(refused.status).toBe(429);
        expect(refused.headers['retry-after-fast']).toBeDefined();
        expect(Object.keys(refused.headers).filter((name) => name.endsWith('-slow'))).toEqual([]);
      }
      // slow was charged once (the admitted request), and once now
      const peek = await read(await app.get('/order/peek-slow', client));
      expect(peek.headers['x-ratelimit-remaining-slow']).toBe('8');
      expect(peek.headers['x-ratelimit-limit-fast']).toBeUndefined();
    });

    it('a refusal by a later throttler leaves the earlier ones charged', async () => {
      const client = { 'x-client': 'second-refuses' };
      expect((await app.get('/order/slow-tight', client)).status).toBe(200);
      for (let i = 0; i < 2; i++) {
        const refused = await read(await app.get('/order/slow-tight', client));
        expect(refused.status).toBe(429);
        expect(refused.headers['retry-after-slow']).toBeDefined();
      }
      // fast was charged by all three, and once now
      const peek = await read(await app.get('/order/peek-fast', client));
      expect(peek.headers['x-ratelimit-remaining-fast']).toBe('6');
    });
  });

  it('a block lasts blockDuration, hits during it are not counted, and its end starts the count from 0', async () => {
    const BLOCK = 1_500;
    @Controller('block')
    class BlockController {
      @Get()
      block() {
        return 'block';
      }
    }
    const app = await start(
      { throttlers: [{ ttl: 30_000, limit: 2, blockDuration: BLOCK }], getTracker: byClientHeader },
      [BlockController],
    );
    const client = { 'x-client': 'blocked' };
    const get = async () => read(await app.get('/block', client));
    expect([(await get()).status, (await get()).status]).toEqual([200, 200]);
    const blockStarted = performance.now();
    const refused = await get();
    expect(refused.status).toBe(429);
    expect(refused.headers['retry-after']).toBe('2'); // ceil(1.5 s)
    const during = await get();
    const duringEnded = performance.now();
    if (duringEnded - blockStarted < BLOCK) expect(during.status).toBe(429);

    await sleep(BLOCK + 200 - (performance.now() - blockStarted));
    // the 30 s window still holds the first two hits: only a reset count admits 2 again
    const after = [await get(), await get(), await get()];
    expect(after.map((r) => r.status)).toEqual([200, 200, 429]);
    expect(after[0].headers['x-ratelimit-remaining']).toBe('1');
    expect(after[1].headers['x-ratelimit-remaining']).toBe('0');
  });
});
