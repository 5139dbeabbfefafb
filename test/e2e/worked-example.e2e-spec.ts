import { randomUUID } from 'node:crypto';
import { Controller, Get, Module } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { MemoryStore, RateLimit, RateLimitModule, type RateLimitStore, RedisStore } from '../../lib/index.js';
import { CASE_EPOCH } from '../cases/cases.js';
import { connectTestRedis, ttlsUnder } from '../support/redis/test-redis.js';
import { ADAPTERS, read, startApp, type TestApp } from '../support/app.js';

@Controller('orders')
class OrdersController {
  @RateLimit({ rps: 10, burst: 50, key: 'api-key' })
  @Get()
  list() {
    return { orders: [] };
  }
}

let redis: Redis;
beforeAll(async () => {
  redis = await connectTestRedis();
});
afterAll(async () => {
  await redis.quit();
});

const prefix = `rl-e2e-worked-${randomUUID()}:`;
/**
 * Keys written on the pinned clock, which is ahead of real time: Redis expires them at that
 * clock's time plus the TTL, later by up to the time the call took (its TTL counts from the app's
 * real time as the call is made).
 */
const pinnedPrefix = `rl-e2e-worked-pinned-${randomUUID()}:`;
/** The longest a burst on the pinned clock took, ms. */
let pinnedBurstMs = 0;
/** A clock the test moves; `undefined` means the store's real clock (Date.now, Redis TIME). */
let pinned: number | undefined;
const clock = () => pinned ?? Date.now();
const stores: Array<[string, (pin: boolean) => RateLimitStore]> = [
  ['memory store', (pin) => new MemoryStore(pin ? { clock } : {})],
  ['Redis store', (pin) => new RedisStore(pin ? { client: redis, clock: () => pinned! } : { client: redis })],
];

const burstOf = (http: TestApp, apiKey: string, n: number) =>
  Promise.all(Array.from({ length: n }, () => http.get('/orders', { 'x-api-key': apiKey }).then(read)));

describe.each(ADAPTERS)("the seeds' worked example on %s", (adapter) => {
  describe.each(stores)('with the %s', (storeName, makeStore) => {
    const apps: TestApp[] = [];
    const start = async (pin: boolean) => {
      @Module({
        imports: [RateLimitModule.forRoot({ store: makeStore(pin), prefix: pin ? pinnedPrefix : prefix })],
        controllers: [OrdersController],
      })
      class AppModule {}
      const http = await startApp(AppModule, adapter);
      apps.push(http);
      return http;
    };
    afterAll(() => Promise.all(apps.map((http) => http.close())));

    it('rps 10, burst 50, clock pinned: of 60 requests at once exactly 50 pass; one second later exactly 10 more', async () => {
      const http = await start(true);
      const apiKey = `key-${randomUUID()}`;
      pinned = CASE_EPOCH;
      const burst = await burstOf(http, apiKey, 60);

      const passed = burst.filter((r) => r.status === 200);
      const refused = burst.filter((r) => r.status === 429);
      expect(passed).toHaveLength(50);
      expect(refused).toHaveLength(10);
      const first = refused[0];
      expect(first.headers['retry-after']).toBe('1');
      expect(first.headers['x-ratelimit-remaining']).toBe('0');
      expect(first.headers['x-ratelimit-limit']).toBe('50');
      expect(first.body).toEqual({
        statusCode: 429,
        error: 'Too Many Requests',
        message: 'Rate limit exceeded for policy "OrdersController.list". Try again in 1 second.',
        policy: 'OrdersController.list',
        retryAfter: 1,
      });

      pinned += 1_000;
      const sent = Date.now();
      const later = await burstOf(http, apiKey, 20);
      pinnedBurstMs = Math.max(pinnedBurstMs, Date.now() - sent);
      expect(later.filter((r) => r.status === 200)).toHaveLength(10);
      pinned = undefined;
    });

    it('on the real clock: 60 requests at once, 50 pass plus what refilled meanwhile; one second later about 10', async () => {
      const http = await start(false);
      await burstOf(http, `warm-up-${randomUUID()}`, 60); // open the connections off the measured key
      const apiKey = `key-${randomUUID()}`;
      const started = performance.now();
      const burst = await burstOf(http, apiKey, 60);
      const firstDone = performance.now();
      const elapsed = firstDone - started;
      const passed = burst.filter((r) => r.status === 200).length;
      // the bucket refills one token per 100 ms while the burst is in flight
      const refilled = Math.ceil(elapsed / 100);
      console.log(
        `${adapter}, ${storeName}, real clock: 60 requests in ${elapsed.toFixed(0)} ms, ${passed} passed (50 + at most ${refilled} refilled)`,
      );
      expect(passed).toBeGreaterThanOrEqual(50);
      expect(passed).toBeLessThanOrEqual(50 + refilled);
      expect(burst.find((r) => r.status === 429)?.headers['retry-after']).toBe('1');

      await new Promise((resolve) => setTimeout(resolve, 1_000));
      const later = (await burstOf(http, apiKey, 20)).filter((r) => r.status === 200).length;
      const ended = performance.now();
      console.log(
        `${adapter}, ${storeName}, real clock: ${(ended - firstDone).toFixed(0)} ms later ${later} of 20 passed`,
      );
      expect(later).toBeGreaterThanOrEqual(9);
      // The bucket may have run dry early in a slow burst and refilled from then on, so bound the
      // whole run: never more than the burst plus what refilled between the first request and the last.
      expect(passed + later).toBeLessThanOrEqual(50 + Math.ceil((ended - started) / 100));
    });
  });
});

describe('Redis keys after the worked example', () => {
  it('every key expires no later than the time to refill fully (5 s)', async () => {
    const ttls = await ttlsUnder(redis, prefix);
    expect(ttls.size).toBeGreaterThan(0);
    // a failure shows the TTL itself (-1: none)
    for (const [key, ttl] of ttls)
      expect({ key, ttl: ttl > 0 && ttl <= 5_000 ? 'within 5 s' : ttl }).toEqual({ key, ttl: 'within 5 s' });

    const pinnedKeys = [...(await ttlsUnder(redis, pinnedPrefix)).keys()];
    expect(pinnedKeys.length).toBeGreaterThan(0);
    for (const key of pinnedKeys) {
      // last written at the pinned clock's CASE_EPOCH + 1 s
      const lives = (await redis.pexpiretime(key)) - (CASE_EPOCH + 1_000);
      expect({ key, lives: lives > 0 && lives <= 5_000 + pinnedBurstMs }).toEqual({ key, lives: true });
    }
  });
});
