import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { jest } from '@jest/globals';
import { Controller, Get, Module, Query } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { bucketKey } from '../../lib/keys/bucket-key.js';
import { RateLimiter } from '../../lib/limiter/rate-limiter.js';
import { MemoryStore, RateLimit, RateLimitModule, type RateLimitStore, RedisStore } from '../../lib/index.js';
import { connectTestRedis } from '../support/redis/test-redis.js';
import { ADAPTERS, read, startApp, type TestApp } from '../support/app.js';

/** Each request that reached a handler: its `n`, and when, `performance.now()`. */
const handled: { n: string; at: number }[] = [];

@Controller('queue')
class QueueController {
  // a queue of 2, one leaving per second; and a log that shows whether a charge was given back
  @RateLimit([
    { name: 'queue', algorithm: 'leaky_bucket', rps: 1, burst: 2, key: 'api-key' },
    { name: 'hourly', algorithm: 'sliding_window_log', limit: 10, window: '1h', key: 'api-key' },
  ])
  @Get()
  take(@Query('n') n: string) {
    handled.push({ n, at: performance.now() });
    return { n };
  }
}

@Controller('slow')
class SlowController {
  // 4 an hour: the first passes at once, the next three wait 15, 30 and 45 minutes
  @RateLimit({ name: 'slow', algorithm: 'leaky_bucket', limit: 4, window: '1h', key: 'api-key' })
  @Get()
  take(@Query('n') n: string) {
    handled.push({ n, at: performance.now() });
    return { n };
  }
}

let redis: Redis;
beforeAll(async () => {
  redis = await connectTestRedis();
});
afterAll(async () => {
  await redis.quit();
});

const prefix = `rl-e2e-leave-${randomUUID()}:`;
const stores: Array<[string, () => RateLimitStore]> = [
  ['memory store', () => new MemoryStore()],
  ['Redis store', () => new RedisStore({ client: redis })],
];

/** The `r` (remaining) of `policy` in a `RateLimit` header. */
function remainingOf(header: string | undefined, policy: string): number | undefined {
  const match = new RegExp(`"${policy}";r=(\\d+)`).exec(header ?? '');
  return match ? Number(match[1]) : undefined;
}

/** Watches the waits of the app's engine (`RateLimiter.wait`, as the guard asks it): every call's promise, and a way to await the nth call. */
function watchWaits(http: TestApp) {
  const limiter = http.app.get(RateLimiter);
  const original = limiter.wait.bind(limiter);
  const calls: Promise<unknown>[] = [];
  const turns: { at: number; delayMs: number }[] = [];
  const listeners: (() => void)[] = [];
  jest.spyOn(limiter, 'wait').mockImplementation((...args: Parameters<RateLimiter['wait']>) => {
    const delay = Math.max(0, ...args[0].map((decision) => (decision.allowed ? decision.delay : 0)));
    turns.push({ at: performance.now(), delayMs: delay * 1000 });
    const waiting = original(...args);
    calls.push(waiting.catch(() => undefined));
    for (const listener of listeners.splice(0)) listener();
    return waiting;
  });
  return {
    calls,
    /** When each call came, `performance.now()`, and the delay it was given, ms. */
    turns,
    /** Resolves once `count` requests are waiting their turn (or have been). */
    async started(count: number): Promise<void> {
      while (calls.length < count) await new Promise<void>((resolve) => listeners.push(resolve));
    },
  };
}

describe.each(ADAPTERS)('a leaky_bucket wait on %s', (adapter) => {
  describe.each(stores)('with the %s', (_storeName, makeStore) => {
    let http: TestApp | undefined;
    let store: RateLimitStore;

    async function start(controller: new () => unknown): Promise<TestApp> {
      store = makeStore();
      @Module({ imports: [RateLimitModule.forRoot({ store, prefix })], controllers: [controller] })
      class AppModule {}
      http = await startApp(AppModule, adapter);
      return http;
    }
    afterEach(async () => {
      await http?.close();
      http = undefined;
      handled.length = 0;
    });

    it('ends when the client goes away: its handler never runs and the next client takes its turn', async () => {
      const app = await start(QueueController);
      const waits = watchWaits(app);
      const apiKey = `key-${randomUUID()}`;
      const headers = { 'x-api-key': apiKey };

      // a passes at once; b joins the queue for the turn 1 s later, then its client hangs up
      const aSent = performance.now();
      expect((await read(await app.get('/queue?n=a', headers))).status).toBe(200);
      const leaving = new AbortController();
      const b = fetch(`${app.url}/queue?n=b`, { headers, signal: leaving.signal }).catch((error: Error) => error.name);
      await waits.started(1);
      leaving.abort();
      expect(await b).toBe('AbortError');
      // the server sees the connection close and gives b's charge back: b's wait ends once the
      // refund is done (without the end it would run to b's turn, 1 s after a, and b's handler with it)
      await waits.calls[0];

      // c takes b's place: admitted (without the refund, before b's turn the queue is full: 429) for
      // b's turn, 1 s after a rather than 2 s, and the hourly log holds a and c only (10 - 2 = 8 left)
      const c = await read(await app.get('/queue?n=c', headers));
      expect(c.status).toBe(200);
      expect(remainingOf(c.headers.ratelimit, 'hourly')).toBe(8);
      const served = handled.find((h) => h.n === 'c')!;
      // not before b's turn, 1 s after a was decided (so after a was sent: a's handler itself may
      // run late on a busy machine)
      expect(served.at - aSent).toBeGreaterThan(950);
      // and given b's turn: a turn behind b's would be 2 s after a was decided, so after it was
      // sent. c's turn is when its wait began plus the delay it was given, at the latest (its
      // verdict came before); when a busy machine held c back past its turn, it had no wait
      const cWait = waits.turns[1];
      if (cWait !== undefined) expect(cWait.at + cWait.delayMs - aSent).toBeLessThan(2_000);

      // b's turn has passed: its handler did not run then, nor later
      await sleep(150);
      expect(handled.map((h) => h.n)).toEqual(['a', 'c']);
    });

    it('ends at once on app.close(), even with an hour-long queue: the waiting get 503 and their charges back', async () => {
      const app = await start(SlowController);
      const waits = watchWaits(app);
      const apiKey = `key-${randomUUID()}`;
      const headers = { 'x-api-key': apiKey };

      expect((await read(await app.get('/slow?n=a', headers))).status).toBe(200);
      const queued = ['b', 'c', 'd'].map((n) => app.get(`/slow?n=${n}`, headers).then(read));
      await waits.started(3);

      const started = performance.now();
      const closed = await Promise.race([
        app.close().then(() => true),
        sleep(5_000, undefined, { ref: false }).then(() => false),
      ]);
      const took = performance.now() - started;
      http = undefined;
      expect(closed).toBe(true);
      expect(took).toBeLessThan(1_000);

      for (const answer of await Promise.all(queued)) {
        expect(answer.status).toBe(503);
        expect(answer.headers['retry-after']).toBe('1');
      }
      expect(handled.map((h) => h.n)).toEqual(['a']);

      // b, c and d gave their turns back: the queue holds only a (about 1 of 4), so 3 are free
      const rule = { algorithm: 'leaky_bucket' as const, rps: 4 / 3600, burst: 4 };
      const key = bucketKey(prefix, 'slow', 'leaky_bucket', `api-key:${apiKey}`);
      const [decision] = await store.peek([{ key, policy: 'slow', rule, cost: 1 }]);
      expect(decision.remaining).toBe(3);
    });
  });
});
