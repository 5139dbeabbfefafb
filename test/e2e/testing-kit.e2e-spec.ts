import { Controller, Get, type INestApplication } from '@nestjs/common';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { Test } from '@nestjs/testing';
import { RateLimit, RateLimiterService } from '../../lib/index.js';
import { ManualClock, RateLimitTestingModule } from '../../lib/testing/index.js';
import { ADAPTERS } from '../support/app.js';

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
    app = adapter === 'fastify' ? moduleRef.createNestApplication(new FastifyAdapter(), { logger: false }) : moduleRef.createNestApplication({ logger: false });
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
