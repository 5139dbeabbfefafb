import { randomUUID } from 'node:crypto';
import { Controller, Get, type INestApplication } from '@nestjs/common';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { Test } from '@nestjs/testing';
import {
  MemoryStore,
  RateLimit,
  RateLimiterService,
  RateLimitModule,
  type RateLimitPolicy,
  type RateLimitStore,
  RedisStore,
} from '../../lib/index.js';
import { ManualClock, RateLimitTestingModule } from '../../lib/testing/index.js';
import { ADAPTERS } from '../support/app.js';
import { useTestRedis } from '../support/redis/test-redis.js';

/**
 * The testing kit as an app's own tests use it: the app's controllers on
 * `RateLimitTestingModule`, the clock advanced instead of sleeping, the buckets emptied before
 * each test so that every test starts the same whatever ran before it (each would fail after
 * the one before it without the reset). Nothing here waits on the wall clock.
 */

@Controller('cats')
class CatsController {
  @RateLimit({ rps: 1, burst: 2, key: 'ip' })
  @Get()
  list() {
    return [];
  }

  @RateLimit({ name: 'export', limit: 1, window: '1h', key: 'ip' })
  @Get('export')
  export() {
    return { rows: 0 };
  }

  // three an hour, queued: the first passes at once, the next wait 20 and 40 minutes
  @RateLimit({ name: 'print', algorithm: 'leaky_bucket', limit: 3, window: '1h', key: 'ip' })
  @Get('print')
  print() {
    return { printed: true };
  }
}

const PRINT: RateLimitPolicy = { name: 'print', algorithm: 'leaky_bucket', limit: 3, window: '1h' };

/** Resolves once `check` holds, looking again on every turn of the event loop (a check of the app's state, not a sleep). */
async function waitFor(check: () => Promise<boolean>): Promise<void> {
  while (!(await check())) await new Promise((resolve) => setImmediate(resolve));
}

describe.each(ADAPTERS)('an app tested with RateLimitTestingModule (%s)', (adapter) => {
  let app: INestApplication;
  let clock: ManualClock;
  let url: string;

  beforeAll(async () => {
    const moduleRef = await Test.createTestingModule({
      imports: [RateLimitTestingModule.forRoot()],
      controllers: [CatsController],
    }).compile();
    app =
      adapter === 'fastify'
        ? moduleRef.createNestApplication(new FastifyAdapter(), { logger: false })
        : moduleRef.createNestApplication({ logger: false });
    await app.listen(0, '127.0.0.1');
    url = (await app.getUrl()).replace('[::1]', '127.0.0.1');
    clock = moduleRef.get(ManualClock);
  });
  afterAll(async () => {
    await app.close();
  });
  beforeEach(async () => {
    await app.get(RateLimiterService).resetAll();
  });

  const statuses = async (path: string, count: number): Promise<number[]> => {
    const got: number[] = [];
    for (let i = 0; i < count; i++) got.push((await fetch(`${url}${path}`)).status);
    return got;
  };

  it('refuses the 3rd request of a burst of 2, and admits one after advancing 1 s', async () => {
    expect(await statuses('/cats', 3)).toEqual([200, 200, 429]);
    const refused = await fetch(`${url}/cats`);
    expect(refused.headers.get('retry-after')).toBe('1');
    clock.advance('1s');
    expect(await statuses('/cats', 2)).toEqual([200, 429]);
  });

  it('starts with full buckets again (the test above left this one empty)', async () => {
    expect(await statuses('/cats', 3)).toEqual([200, 200, 429]);
  });

  it('waits out an hour-long window in no time', async () => {
    // fixed windows are aligned to the clock: start this one on the hour
    clock.set(Date.UTC(2027, 0, 1, 12));
    expect(await statuses('/cats/export', 2)).toEqual([200, 429]);
    clock.advance('59m');
    expect(await statuses('/cats/export', 1)).toEqual([429]);
    clock.advance(60 * 60_000);
    expect(await statuses('/cats/export', 2)).toEqual([200, 429]);
  });

  it('lets leaky_bucket requests proceed when the clock is moved past their turn: 40 minutes of queue in no time', async () => {
    clock.set(Date.UTC(2027, 0, 1));
    const answered: string[] = [];
    const send = (name: string) => fetch(`${url}/cats/print`).then((response) => (answered.push(name), response));
    const first = await send('first');
    // X-RateLimit-Reset counts from the manual clock too: the queue of one is empty 20 minutes on
    expect(first.headers.get('x-ratelimit-reset')).toBe(String(Date.UTC(2027, 0, 1, 0, 20) / 1000));
    const [second, third] = [send('second'), send('third')];
    const limiter = app.get(RateLimiterService);
    await waitFor(async () => (await limiter.peek(`ip:127.0.0.1`, PRINT))[0].remaining === 0);
    expect(answered).toEqual(['first']);

    clock.advance('20m');
    expect((await second).status).toBe(200);
    expect(answered).toEqual(['first', 'second']);
    clock.advance('20m');
    expect((await third).status).toBe(200);
    expect(answered).toEqual(['first', 'second', 'third']);
  });

  it('refills to the millisecond of the manual clock', async () => {
    clock.set(Date.UTC(2027, 0, 1));
    expect(await statuses('/cats', 2)).toEqual([200, 200]);
    const refused = await fetch(`${url}/cats`);
    expect(refused.status).toBe(429);
    expect(refused.headers.get('ratelimit')).toBe('"CatsController.list";r=0;t=1');
    clock.advance(999);
    expect(await statuses('/cats', 1)).toEqual([429]);
    clock.advance(1);
    expect(await statuses('/cats', 2)).toEqual([200, 429]);
  });
});

describe("an app's own stores on a ManualClock: the waits and X-RateLimit-Reset follow the store's clock", () => {
  const redis = useTestRedis();
  const stores: Array<[string, (clock: ManualClock) => RateLimitStore]> = [
    ['MemoryStore({ clock })', (clock) => new MemoryStore({ clock })],
    ['RedisStore({ client, clock })', (clock) => new RedisStore({ client: redis(), clock })],
  ];

  it.each(stores)('%s', async (_name, makeStore) => {
    // now, to the second: Redis expires keys on its own clock at this clock's time plus their TTL
    const start = Math.floor(Date.now() / 1000) * 1000;
    const clock = new ManualClock(start);
    const moduleRef = await Test.createTestingModule({
      imports: [RateLimitModule.forRoot({ store: makeStore(clock), prefix: `rl-testing-kit-${randomUUID()}:` })],
      controllers: [CatsController],
    }).compile();
    const app = moduleRef.createNestApplication({ logger: false });
    await app.listen(0, '127.0.0.1');
    try {
      const url = (await app.getUrl()).replace('[::1]', '127.0.0.1');
      const first = await fetch(`${url}/cats/print`);
      expect(first.headers.get('x-ratelimit-reset')).toBe(String(start / 1000 + 20 * 60));
      let answered = false;
      const second = fetch(`${url}/cats/print`).then((response) => ((answered = true), response));
      const limiter = app.get(RateLimiterService);
      await waitFor(async () => (await limiter.peek('ip:127.0.0.1', PRINT))[0].remaining === 1);
      expect(answered).toBe(false);
      clock.advance('20m');
      expect((await second).status).toBe(200);
    } finally {
      await app.close();
    }
  });
});
