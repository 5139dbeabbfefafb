import { randomUUID } from 'node:crypto';
import { jest } from '@jest/globals';
import { Controller, Get, Module } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { RateLimiter, type RateLimitVerdict } from '../../lib/limiter/rate-limiter.js';
import { MemoryStore, RateLimit, RateLimitModule, type RateLimitStore, RedisStore } from '../../lib/index.js';
import { connectTestRedis } from '../support/redis/test-redis.js';
import { ADAPTERS, read, startApp, type TestApp } from '../support/app.js';

/** When each admitted request reached the handler, `performance.now()`. */
const served: number[] = [];

@Controller('jobs')
class JobsController {
  @RateLimit({ algorithm: 'leaky_bucket', rps: 10, burst: 5, key: 'api-key' })
  @Get()
  submit() {
    served.push(performance.now());
    return { queued: true };
  }
}

let redis: Redis;
beforeAll(async () => {
  redis = await connectTestRedis();
});
afterAll(async () => {
  await redis.quit();
});

/**
 * When the app's engine (`RateLimiter.limit`, as the guard asks it) came to each verdict,
 * `performance.now()`: every verdict's in `decided`, and each admitted request's in `admitted`, in
 * the order it decided them (the order a queue lets them go in).
 */
function watchVerdicts(http: TestApp): { admitted: number[]; decided: number[] } {
  const limiter = http.app.get(RateLimiter);
  const original = limiter.limit.bind(limiter);
  const admitted: number[] = [];
  const decided: number[] = [];
  const seen = (verdict: RateLimitVerdict | undefined) => {
    decided.push(performance.now());
    if (verdict?.allowed) admitted.push(decided[decided.length - 1]);
    return verdict;
  };
  jest.spyOn(limiter, 'limit').mockImplementation((...args: Parameters<RateLimiter['limit']>) => {
    const verdict = original(...args);
    return verdict instanceof Promise ? verdict.then(seen) : seen(verdict);
  });
  return { admitted, decided };
}

/** The interval of `loopTicks`'s timer, ms. */
const TICK_MS = 5;

/**
 * A timer ticking every `TICK_MS` in this process: how long its timers were held up (its event loop
 * busy, or the OS keeping it off the CPU) between two instants, as the time its ticks came late
 * in between. Every hold-up counts, not only the longest: a turn can be let go late by several.
 */
function loopTicks(): { stop: () => void; lateBetween: (from: number, to: number) => number } {
  const ticks = [performance.now()];
  const timer = setInterval(() => ticks.push(performance.now()), TICK_MS);
  return {
    stop: () => clearInterval(timer),
    lateBetween: (from, to) => {
      let late = 0;
      for (let i = 1; i < ticks.length; i++)
        if (ticks[i] > from && ticks[i - 1] < to) late += Math.max(0, ticks[i] - ticks[i - 1] - TICK_MS);
      return late;
    },
  };
}

const prefix = `rl-e2e-leaky-${randomUUID()}:`;
const stores: Array<[string, () => RateLimitStore]> = [
  ['memory store', () => new MemoryStore()],
  ['Redis store', () => new RedisStore({ client: redis })],
];

describe.each(ADAPTERS)('leaky_bucket on %s', (adapter) => {
  describe.each(stores)('with the %s, on the real clock', (_storeName, makeStore) => {
    let http: TestApp;
    beforeAll(async () => {
      @Module({ imports: [RateLimitModule.forRoot({ store: makeStore(), prefix })], controllers: [JobsController] })
      class AppModule {}
      http = await startApp(AppModule, adapter);
    });
    afterAll(() => http.close());

    it('rps 10, burst 5, 12 requests at once: the accepted leave about 100 ms apart, the rest get 429 at once', async () => {
      // open the connections off the measured key, so the 12 arrive close together on a busy machine
      await Promise.all(
        Array.from({ length: 12 }, () => http.get('/jobs', { 'x-api-key': `warm-up-${randomUUID()}` }).then(read)),
      );
      served.length = 0;
      const { admitted, decided } = watchVerdicts(http);
      const apiKey = `key-${randomUUID()}`;
      // how late this process's timers fire (a turn in the queue is let go by one)
      const ticks = loopTicks();
      const sent = performance.now();
      const responses = await Promise.all(
        Array.from({ length: 12 }, () =>
          http
            .get('/jobs', { 'x-api-key': apiKey })
            .then(async (response) => ({ ...(await read(response)), after: performance.now() - sent })),
        ),
      );

      const accepted = responses.filter((r) => r.status === 200);
      const refused = responses.filter((r) => r.status === 429);
      expect(accepted.length + refused.length).toBe(12);
      // the queue holds 5; one more fits for each 100 ms the 12 take to be decided, as measured
      // from before the first was sent to after the last was decided (the engine's own clock sees
      // no longer a span): within 100 ms on a quiet machine, and 12 requests can take 200 ms and
      // more to arrive on a busy one
      expect(decided).toHaveLength(12);
      expect(accepted.length).toBeGreaterThanOrEqual(5);
      expect(accepted.length).toBeLessThanOrEqual(5 + Math.floor((decided[11] - sent) / 100));

      ticks.stop();
      // leaving at exactly rps: the k-th handler runs no sooner than k * 100 ms after the first was
      // decided (so after the requests were sent: a handler run late on a busy machine shortens the
      // gap after it, never the schedule); and each runs 100 ms after the one before it, or when
      // it was admitted if that is later (on a busy machine the 12 requests can take longer to
      // arrive than the queue takes to drain), later by no more than the process's timers were
      // held up in between (and 10 ms for rounding and the handler's own run)
      expect(admitted).toHaveLength(served.length);
      served.forEach((at, k) => expect(at - sent).toBeGreaterThan(k * 100 - 10));
      for (let k = 1; k < served.length; k++) {
        const due = Math.max(served[k - 1] + 100, admitted[k]);
        expect(served[k] - due).toBeLessThan(ticks.lateBetween(Math.min(served[k - 1], admitted[k]), served[k]) + 10);
      }

      // the refused ones are answered at once, long before the queue has drained: before the
      // third accepted request is served, 200 ms after the first (the second, 100 ms after it,
      // was too close on 2 busy cores: 429s came 254 ms after sending with it at 227 ms)
      for (const response of refused) {
        expect(response.after).toBeLessThan(served[2] - sent);
        expect(response.headers['retry-after']).toBe('1');
      }
    });
  });
});
